"""What the OpenAPI document says about credentials.

A route that also answers callers without credentials (:data:`szbench.auth.dependencies.Anyone`)
depends on :data:`no_credentials` besides the bearer scheme. FastAPI lists each security
dependency as an alternative (``[{"token": []}, {"anonymous": []}]``);
:func:`mark_anonymous_reads` turns the marker into OpenAPI's empty requirement ``{}``, which
says "or no credentials at all", and drops the marker scheme, which no client can use.
"""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import HTTPBase
from fastapi.security.base import SecurityBase

ANONYMOUS_SCHEME = "anonymous"


class NoCredentials(SecurityBase):
    """A security "scheme" that is only a marker in the OpenAPI document; it reads nothing."""

    def __init__(self) -> None:
        self.model = HTTPBase(scheme=ANONYMOUS_SCHEME)
        self.scheme_name = ANONYMOUS_SCHEME

    async def __call__(self) -> None:
        return None


no_credentials = NoCredentials()


def mark_anonymous_reads(schema: dict[str, Any], *, anonymous_read: bool) -> dict[str, Any]:
    """``schema`` with each marker requirement made ``{}`` (or removed when anonymous reads
    are off, since such a route then needs a token too) and the marker scheme dropped."""
    empty: list[dict[str, list[str]]] = [{}] if anonymous_read else []
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            security = operation.get("security") if isinstance(operation, dict) else None
            if not security:
                continue
            kept = [s for s in security if ANONYMOUS_SCHEME not in s]
            if len(kept) != len(security):
                operation["security"] = kept + empty
    schemes = schema.get("components", {}).get("securitySchemes", {})
    schemes.pop(ANONYMOUS_SCHEME, None)
    return schema
