"""Property-based requests generated from the OpenAPI schema: never a 500.

Every operation gets a few generated requests with an admin token (so that authorization
does not stop them early) against the real app on PostgreSQL, rolled back afterwards.
503 is allowed: it is the documented answer when a part (broker, pipeline) is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from sqlalchemy.orm import Session

from szbench.app import create_app
from szbench.models import Role
from tests.platform import factories as f

# One app for the whole module: the schema is read from it at collection time; each test
# points its session dependency at that test's rolled-back session.
APP = create_app()
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", APP)


@pytest.fixture(autouse=True)
def _wired(app: FastAPI) -> Iterator[None]:
    APP.dependency_overrides.update(app.dependency_overrides)
    yield
    APP.dependency_overrides.clear()


@schema.parametrize()
@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case, db_session: Session) -> None:  # type: ignore[no-untyped-def]
    admin = f.user(db_session, Role.ADMIN)
    _, secret = f.token(db_session, admin)
    response = case.call(headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code < 500 or response.status_code == 503, (
        f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
    )
    if response.status_code >= 400 and case.path.startswith("/api/v1"):
        body = response.json()
        assert set(body) == {"error", "detail"}, body
