"""Signed-in callers resolved from memory: the window, writes that end it, expiry, merging."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import service as auth_service
from szbench.auth.token_cache import TokenCache, tokens
from szbench.config import get_settings
from szbench.models import ApiToken, Role, User
from tests.platform import factories as f
from tests.platform.helpers import in_thread, recorded_statements, until


@pytest.fixture
def token_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], None]]:
    def set_window(seconds: float) -> None:
        monkeypatch.setenv("SZBENCH_TOKEN_FRESH_S", str(seconds))
        get_settings.cache_clear()

    yield set_window
    get_settings.cache_clear()


def test_a_known_token_is_resolved_without_the_database(
    client: TestClient, db_session: Session, token_window: Callable[[float], None]
) -> None:
    token_window(3600)
    alice = f.user(db_session, name="Alice")
    as_alice = f.headers(db_session, alice)
    assert client.get("/api/v1/auth/me", headers=as_alice).json()["name"] == "Alice"
    with recorded_statements(db_session) as statements:
        me = client.get("/api/v1/auth/me", headers=as_alice)
        assert statements == []
    assert me.status_code == 200
    assert me.json()["name"] == "Alice"
    # Without a window, every request reads the token.
    token_window(0)
    with recorded_statements(db_session) as statements:
        assert client.get("/api/v1/auth/me", headers=as_alice).status_code == 200
        assert any("api_tokens" in st for st in statements)


def test_writes_through_the_app_end_the_window_and_others_wait_for_it(
    client: TestClient,
    db_session: Session,
    token_window: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token_window(3600)
    s = db_session
    alice, admin = f.user(s, name="Alice"), f.user(s, Role.ADMIN)
    token, secret = f.token(s, alice)
    as_alice = {"Authorization": f"Bearer {secret}"}
    other = f.headers(s, alice)
    assert client.get("/api/v1/auth/me", headers=as_alice).status_code == 200
    assert client.get("/api/v1/auth/me", headers=other).status_code == 200

    # Revoked through the API (this process): refused at once.
    assert client.delete(f"/api/v1/tokens/{token.id}", headers=other).status_code == 200
    assert client.get("/api/v1/auth/me", headers=as_alice).status_code == 401

    # Deactivated behind this process's back (another API process, or SQL): still served
    # from memory within the window, refused once it has passed.
    clock = [1000.0]
    monkeypatch.setattr(tokens, "_clock", lambda: clock[0])
    monkeypatch.setattr(tokens, "window_s", lambda: 10.0)
    assert client.get("/api/v1/auth/me", headers=other).status_code == 200
    alice.is_active = False
    s.flush()
    clock[0] += 5
    assert client.get("/api/v1/auth/me", headers=other).status_code == 200
    clock[0] += 5
    assert client.get("/api/v1/auth/me", headers=other).status_code == 401
    # A role change by an admin through the app is seen at once.
    alice.is_active = True
    s.flush()
    clock[0] += 10
    assert client.get("/api/v1/auth/me", headers=other).json()["role"] == "researcher"
    r = client.patch(
        f"/api/v1/users/{alice.id}", json={"role": "centre"}, headers=f.headers(s, admin)
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/auth/me", headers=other).json()["role"] == "centre"


def test_a_cached_token_still_expires_on_time(
    client: TestClient,
    db_session: Session,
    token_window: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token_window(3600)
    alice = f.user(db_session)
    token, secret = f.token(db_session, alice)
    token.expires_at = datetime.now(UTC) + timedelta(hours=1)
    db_session.flush()
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/auth/me", headers=headers).status_code == 200
    later = datetime.now(UTC) + timedelta(hours=2)
    monkeypatch.setattr(tokens, "_now", lambda: later)
    with recorded_statements(db_session) as statements:
        assert client.get("/api/v1/auth/me", headers=headers).status_code == 401
        assert statements == []  # decided from memory


def test_writes_with_a_cached_caller_use_objects_bound_to_the_request(
    client: TestClient, db_session: Session, token_window: Callable[[float], None]
) -> None:
    token_window(3600)
    alice = f.user(db_session, name="Alice")
    as_alice = f.headers(db_session, alice)
    assert client.get("/api/v1/auth/me", headers=as_alice).status_code == 200  # now cached
    r = client.post("/api/v1/tokens", json={"name": "script"}, headers=as_alice)
    assert r.status_code == 201, r.text
    r = client.post("/api/v1/tokens", json={"name": "script 2"}, headers=as_alice)
    assert r.status_code == 201, r.text
    owners = db_session.scalars(
        select(ApiToken.user_id).where(ApiToken.name.in_(["script", "script 2"]))
    ).all()
    assert owners == [alice.id, alice.id]
    # The cached copies were merged, not added: no second row for the caller.
    assert db_session.scalars(select(User.id).where(User.email == alice.email)).all() == [alice.id]


def test_many_requests_with_one_unknown_token_read_it_once(
    db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = f.user(db_session, name="Alice")
    _, secret = f.token(db_session, alice)
    cache = TokenCache(window_s=lambda: 60.0)
    reads: list[str] = []
    real = auth_service.resolve_token

    def counting(session: Session, secret: str) -> Any:
        reads.append(secret)
        return real(session, secret)

    monkeypatch.setattr(auth_service, "resolve_token", counting)
    users: list[int] = []

    async def request() -> None:
        found = await cache.resolve(db_session, secret, in_thread)
        assert found is not None
        users.append(found[1].id)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(request)
        await request()  # and later, from memory
        assert await cache.resolve(db_session, "szb_not-a-token", in_thread) is None

    anyio.run(main)
    assert users == [alice.id] * 31
    assert reads == [secret, "szb_not-a-token"]


def test_a_token_in_steady_use_is_read_again_in_the_background_before_its_window_ends(
    db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = f.user(db_session)
    token, secret = f.token(db_session, alice)
    clock = [0.0]
    cache = TokenCache(window_s=lambda: 10.0, clock=lambda: clock[0])

    @contextmanager
    def this_session() -> Iterator[Session]:
        yield db_session

    cache.session_scope = this_session
    reads: list[float] = []
    real = auth_service.resolve_token

    def counting(session: Session, secret: str) -> Any:
        reads.append(clock[0])
        return real(session, secret)

    monkeypatch.setattr(auth_service, "resolve_token", counting)

    async def main() -> None:
        assert await cache.resolve(db_session, secret, in_thread) is not None
        clock[0] = 3.0
        assert cache.peek(secret) is not None  # fresh, young: nothing more
        clock[0] = 6.0
        assert cache.peek(secret) is not None  # past half its window: served, and re-read
        await until(lambda: len(reads) == 2)
        clock[0] = 12.0  # past the first read's window, not the second's
        assert cache.peek(secret) is not None  # and past half of it: re-read again
        await until(lambda: len(reads) == 3)
        token.revoked_at = datetime.now(UTC)  # revoked behind this process's back
        db_session.flush()
        clock[0] = 18.0
        assert cache.peek(secret) is not None  # still within the window of the last read
        await until(lambda: len(reads) == 4)  # which the next re-read closes
        await until(lambda: cache.peek(secret) is None)

    anyio.run(main)
    assert reads == [0.0, 6.0, 12.0, 18.0]
