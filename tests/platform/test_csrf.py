"""Cross-site state changes are refused for cookie sessions (API and web forms alike): a
``null`` or foreign ``Origin``, or without one a foreign ``Referer``. Bearer-token requests
are not affected."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench import queue
from szbench.auth import service as auth
from szbench.models import ApiToken, DatasetKind, Evaluation, Role
from tests.platform import factories as f

PASSWORD = "s3cret-pass-word"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
HOSTILE = [
    {"Origin": "null"},
    {"Origin": "null", "Authorization": ""},  # an empty header: the cookie still decides
    {"Origin": "https://evil.example"},
    {"Origin": "http://testserver.evil.example"},
    {"Referer": "https://evil.example/page"},
]
SAME_SITE = [{"Origin": "http://testserver"}, {"Referer": "http://testserver/submissions"}, {}]


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict]]]:
    calls: list[tuple[str, str, dict]] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


@dataclass
class World:
    owner_email: str
    admin_email: str
    evaluation_id: int
    phase_slug: str


@pytest.fixture
def world(db_session: Session) -> World:
    s = db_session
    owner = f.user(s, email="owner@example.org", password=PASSWORD)
    f.user(s, Role.ADMIN, email="admin@example.org", password=PASSWORD)
    phase = f.phase(s, hidden=True)
    version = f.version(s, f.algorithm(s, owner), phase_id=phase.id)
    dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT))
    f.recording(s, dv)
    ev = f.evaluation(s, version, dv, published=False)
    return World("owner@example.org", "admin@example.org", ev.id, phase.slug)


def _sign_in(client: TestClient, email: str) -> str:
    """A web session for ``email``; the page's CSRF token."""
    token = _CSRF.search(client.get("/login").text)
    assert token is not None
    r = client.post(
        "/login",
        data={"email": email, "password": PASSWORD, "csrf_token": token.group(1)},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    page_token = _CSRF.search(client.get("/submissions").text)
    assert page_token is not None
    return page_token.group(1)


def _evaluations(db_session: Session) -> int:
    return db_session.scalar(select(func.count(Evaluation.id))) or 0


def test_api_rerun_by_cookie_from_another_site_is_refused(
    client: TestClient, db_session: Session, world: World, sent: list
) -> None:
    _sign_in(client, world.owner_email)
    before = _evaluations(db_session)
    for headers in HOSTILE:
        r = client.post(f"/api/v1/evaluations/{world.evaluation_id}/rerun", headers=headers)
        assert r.status_code == 403, (headers, r.text)
        assert r.json()["error"] == "Forbidden"
        assert "cross-site request refused" in r.json()["detail"]
    assert _evaluations(db_session) == before
    assert sent == []
    r = client.post(
        f"/api/v1/evaluations/{world.evaluation_id}/rerun",
        headers={"Origin": "http://testserver"},
    )
    assert r.status_code == 201, r.text


def test_api_phase_publish_by_admin_cookie_from_another_site_is_refused(
    client: TestClient, db_session: Session, world: World
) -> None:
    _sign_in(client, world.admin_email)
    for headers in HOSTILE:
        r = client.post(f"/api/v1/phases/{world.phase_slug}/publish", headers=headers)
        assert r.status_code == 403, (headers, r.text)
    evaluation = db_session.get(Evaluation, world.evaluation_id)
    assert evaluation is not None
    db_session.refresh(evaluation)
    assert evaluation.published is False
    for headers in SAME_SITE:
        r = client.post(f"/api/v1/phases/{world.phase_slug}/publish", headers=headers)
        assert r.status_code == 200, (headers, r.text)
    db_session.refresh(evaluation)
    assert evaluation.published is True


def test_api_delete_and_patch_by_cookie_from_another_site_are_refused(
    client: TestClient, db_session: Session, world: World
) -> None:
    _sign_in(client, world.admin_email)
    token_id = db_session.scalars(select(ApiToken.id).order_by(ApiToken.id.desc())).first()
    r = client.delete(f"/api/v1/tokens/{token_id}", headers={"Origin": "null"})
    assert r.status_code == 403
    r = client.patch(f"/api/v1/phases/{world.phase_slug}", json={"title": "x"}, headers=HOSTILE[1])
    assert r.status_code == 403
    assert client.get("/api/v1/auth/me").status_code == 200  # the session was not revoked


def test_bearer_token_requests_are_not_affected(
    client: TestClient, db_session: Session, world: World, sent: list
) -> None:
    user = auth.get_user_by_email(db_session, world.owner_email)
    h = f.headers(db_session, user)
    r = client.post(
        f"/api/v1/evaluations/{world.evaluation_id}/rerun", headers={**h, "Origin": "null"}
    )
    assert r.status_code == 201, r.text


def test_web_forms_from_another_site_are_refused(
    client: TestClient, db_session: Session, world: World, sent: list
) -> None:
    token = _sign_in(client, world.admin_email)
    for headers in HOSTILE:
        for action in (
            f"/admin/phases/{world.phase_slug}/publish",
            f"/admin/evaluations/{world.evaluation_id}/publish",
            f"/evaluations/{world.evaluation_id}/rerun",
            "/logout",
        ):
            r = client.post(
                action, data={"csrf_token": token}, headers=headers, follow_redirects=False
            )
            assert r.status_code == 403, (action, headers, r.text)
    evaluation = db_session.get(Evaluation, world.evaluation_id)
    assert evaluation is not None
    db_session.refresh(evaluation)
    assert evaluation.published is False
    r = client.post(
        f"/admin/phases/{world.phase_slug}/publish",
        data={"csrf_token": token},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


def test_the_sign_in_form_from_another_site_is_refused(client: TestClient, world: World) -> None:
    token = _CSRF.search(client.get("/login").text)
    assert token is not None
    r = client.post(
        "/login",
        data={"email": world.owner_email, "password": PASSWORD, "csrf_token": token.group(1)},
        headers={"Origin": "null"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert "szbench_session" not in r.headers.get("set-cookie", "")
