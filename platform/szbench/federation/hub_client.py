"""The centre's HTTP calls to its hub: the catalogue, and publishing a bundle.

All of it goes through the project's outbound client (:mod:`szbench.outbound`). The
hub is reached over https (plain http only to a loopback address, for tests and a hub on
the same machine), no redirect is followed, no proxy from the environment is used, each
call is bounded in time (:data:`TIMEOUT_S`) and in what is read of the answer.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from szbench.errors import BadRequest, ServiceUnavailable
from szbench.outbound import http
from szbench.outbound.deadline import Deadline, DeadlineExceeded

#: Seconds one call to the hub may take (connect, send, answer).
TIMEOUT_S = 30.0
#: The most of an answer read: a catalogue of thousands of versions fits.
MAX_ANSWER_BYTES = 4 * 1024**2
CATALOGUE_PATH = "/api/v1/federation/catalogue"
BUNDLES_PATH = "/api/v1/federation/bundles"
CENTRES_PATH = "/api/v1/federation/centres/"


def check_hub_url(url: str) -> str:
    """The hub's address, checked: ``https://host[:port]``, or ``http://`` to loopback only
    (across a network the bundles would travel in clear, and the catalogue could be forged)."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"hub_url: {url[:200]!r} is not an http(s) address")
    if parts.username or parts.password or parts.query or parts.fragment or parts.path.strip("/"):
        raise BadRequest(
            "hub_url: the hub's address alone (scheme, host, port), as its admins give it"
        )
    if parts.scheme == "http":
        host = parts.hostname
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise BadRequest(
                "hub_url: https:// is needed (plain http:// only to a loopback address)"
            )
    return url


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]

    @property
    def detail(self) -> str:
        return str(self.body.get("detail") or self.body.get("error") or "")[:900]


def _body(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        body = {"detail": data[:300].decode("utf-8", "replace")}
    return body if isinstance(body, dict) else {"detail": str(body)[:300]}


def _call(
    method: str, url: str, *, content: bytes = b"", headers: dict[str, str] | None = None
) -> Answer:
    # The project's outbound client: one wall-clock deadline for the lookup, the connection,
    # the body sent and the answer read, so a hub that drips its answer cannot hold a tick.
    try:
        with Deadline(TIMEOUT_S) as deadline:
            answer = http.request(
                method,
                url,
                deadline=deadline,
                headers=list((headers or {}).items()),
                content=content,
                max_body=MAX_ANSWER_BYTES + 1,
            )
    except (DeadlineExceeded, http.CallFailed, OSError) as exc:
        raise ServiceUnavailable(
            f"the hub ({url}) does not answer ({exc}); try again later"
        ) from exc
    if len(answer.body) > MAX_ANSWER_BYTES:
        raise ServiceUnavailable(f"the hub's answer is larger than {MAX_ANSWER_BYTES} bytes")
    return Answer(answer.status, _body(answer.body))


def catalogue(hub_url: str) -> dict[str, Any]:
    """The hub's versions offered for external evaluation (its catalogue answer)."""
    answer = _call("GET", check_hub_url(hub_url) + CATALOGUE_PATH)
    if answer.status != 200:
        raise ServiceUnavailable(
            f"the hub answered {answer.status} for its catalogue: {answer.detail}"
        )
    return answer.body


def centre(hub_url: str, name: str) -> dict[str, Any]:
    """The hub's public view of centre ``name`` (its keys, its last accepted sequence)."""
    answer = _call("GET", check_hub_url(hub_url) + CENTRES_PATH + name)
    if answer.status != 200:
        raise ServiceUnavailable(
            f"the hub answered {answer.status} for centre {name!r}: {answer.detail}"
        )
    return answer.body


def publish(hub_url: str, payload: bytes, signature: str) -> Answer:
    """Send one bundle: ``payload`` exactly as the body, the signature in its header."""
    from szbench.federation.service import SIGNATURE_HEADER, SIGNATURE_SCHEME

    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: SIGNATURE_SCHEME + signature,
    }
    return _call("POST", check_hub_url(hub_url) + BUNDLES_PATH, content=payload, headers=headers)
