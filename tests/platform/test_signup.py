"""Sign-ups are throttled per client address (each account brings its own daily quotas), and
with e-mail on, held-out work needs a verified address (docs/security.md, "Sign-ups")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from itertools import count

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.auth import throttle
from szbench.config import get_settings
from szbench.models import User
from tests.web.conftest import csrf_of

SIGNUP = "/api/v1/auth/signup"
_n = count()


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[throttle.Clock]:
    throttle.clock.set(datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    yield throttle.clock
    throttle.clock.set(None)


def _signup(client: TestClient, email: str | None = None, password: str = "signup-secret-81"):  # type: ignore[no-untyped-def]
    email = email or f"new-{next(_n)}@example.org"
    return client.post(SIGNUP, json={"email": email, "password": password})


def _use_up(client: TestClient) -> None:
    """Sign up until the client's wait starts (the free sign-ups and one more)."""
    for _ in range(get_settings().signup_free_per_client + 1):
        assert _signup(client).status_code == 201
    assert _signup(client).status_code == 429


def _accounts(db_session: Session) -> int:
    return db_session.scalar(select(func.count(User.id))) or 0


def test_sign_ups_from_one_address_wait_longer_and_longer(
    client: TestClient, db_session: Session, frozen_clock: throttle.Clock
) -> None:
    settings = get_settings()
    free, base = settings.signup_free_per_client, settings.signup_backoff_base_s
    before = _accounts(db_session)
    # The free ones, and one more that starts the first wait.
    for _ in range(free + 1):
        assert _signup(client).status_code == 201
    refused = _signup(client)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "TooManyAttempts"
    assert refused.headers["Retry-After"] == str(int(base))
    assert "too many sign-ups from your address" in refused.json()["detail"]
    assert _accounts(db_session) == before + free + 1
    frozen_clock.advance(base)
    assert _signup(client).status_code == 201
    # The next wait is twice as long.
    assert _signup(client).headers["Retry-After"] == str(int(2 * base))
    frozen_clock.advance(2 * base - 1)
    assert _signup(client).status_code == 429
    frozen_clock.advance(1)
    assert _signup(client).status_code == 201


def test_another_address_is_not_held_up_and_forged_headers_change_nothing(
    app: FastAPI, db_session: Session
) -> None:
    first = TestClient(app, client=("198.51.100.7", 40000))
    other = TestClient(app, client=("198.51.100.8", 40000))
    for i in range(get_settings().signup_free_per_client + 1):
        # A forwarding header from a client that is no trusted proxy is ignored.
        r = first.post(
            SIGNUP,
            json={"email": f"one-{i}@example.org", "password": "signup-secret-81"},
            headers={"X-Forwarded-For": f"203.0.113.{i}"},
        )
        assert r.status_code == 201, r.text
    r = first.post(
        SIGNUP,
        json={"email": "one-x@example.org", "password": "signup-secret-81"},
        headers={"X-Forwarded-For": "203.0.113.99"},
    )
    assert r.status_code == 429
    assert _signup(other).status_code == 201


def test_invalid_input_is_not_counted_and_a_taken_address_is(
    client: TestClient, db_session: Session
) -> None:
    for _ in range(5):
        weak = _signup(client, password="short")
        assert weak.status_code == 400
        assert weak.json()["detail"].startswith("password: ")
        assert _signup(client, email="not-an-address").status_code == 400
    assert _signup(client, email="taken@example.org").status_code == 201
    # Asking whether an address has an account is a sign-up attempt like any other.
    for _ in range(get_settings().signup_free_per_client):
        assert _signup(client, email="taken@example.org").status_code == 409
    assert _signup(client).status_code == 429


def test_sign_ups_do_not_slow_sign_ins_from_the_same_address(
    client: TestClient, db_session: Session
) -> None:
    email = "first@example.org"
    assert _signup(client, email=email).status_code == 201
    for _ in range(get_settings().signup_free_per_client):
        assert _signup(client).status_code == 201
    assert _signup(client).status_code == 429
    r = client.post("/api/v1/auth/login", json={"email": email, "password": "signup-secret-81"})
    assert r.status_code == 200, r.text


def test_the_sign_up_page_is_throttled_with_retry_after(
    client: TestClient, db_session: Session
) -> None:
    _use_up(client)
    token = csrf_of(client.get("/signup").text)
    r = client.post(
        "/signup",
        data={"email": "page@example.org", "password": "signup-secret-81", "csrf_token": token},
        follow_redirects=False,
    )
    assert r.status_code == 429
    assert r.headers["Retry-After"] == str(int(get_settings().signup_backoff_base_s))
    assert "too many sign-ups from your address" in r.text
    assert db_session.scalar(select(User.id).where(User.email == "page@example.org")) is None
