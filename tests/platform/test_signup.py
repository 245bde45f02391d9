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

from szbench.auth import accounts, throttle
from szbench.config import get_settings
from szbench.errors import Forbidden
from szbench.models import DatasetKind, User
from szbench.quotas import service as quotas
from tests.platform import factories as f
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
    for _ in range(throttle.SIGNUP_FREE_PER_CLIENT + 1):
        assert _signup(client).status_code == 201
    assert _signup(client).status_code == 429


def _accounts(db_session: Session) -> int:
    return db_session.scalar(select(func.count(User.id))) or 0


def test_sign_ups_from_one_address_wait_longer_and_longer(
    client: TestClient, db_session: Session, frozen_clock: throttle.Clock
) -> None:
    free, base = throttle.SIGNUP_FREE_PER_CLIENT, throttle.SIGNUP_BACKOFF_BASE_S
    before = _accounts(db_session)
    # The free ones, and one more that starts the first wait.
    for _ in range(free + 1):
        assert _signup(client).status_code == 201
    refused = _signup(client)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "TooManyAttempts"
    assert refused.headers["Retry-After"] == str(int(base))
    # In words, not seconds: how long, until when, and what a lab behind one address can do.
    detail = refused.json()["detail"]
    assert "too many new accounts from your network's address; try again in 2 hours" in detail
    assert "(at 14:00 UTC)" in detail  # the frozen clock's 12:00 plus the wait
    assert " s." not in detail
    assert "confirms their e-mail address" in detail
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
    for i in range(throttle.SIGNUP_FREE_PER_CLIENT + 1):
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
    for _ in range(throttle.SIGNUP_FREE_PER_CLIENT):
        assert _signup(client, email="taken@example.org").status_code == 409
    assert _signup(client).status_code == 429


def test_sign_ups_do_not_slow_sign_ins_from_the_same_address(
    client: TestClient, db_session: Session
) -> None:
    email = "first@example.org"
    assert _signup(client, email=email).status_code == 201
    for _ in range(throttle.SIGNUP_FREE_PER_CLIENT):
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
    assert r.headers["Retry-After"] == str(int(throttle.SIGNUP_BACKOFF_BASE_S))
    assert "try again in 2 hours (at 14:00 UTC)" in r.text
    assert "7200" not in r.text
    assert db_session.scalar(select(User.id).where(User.email == "page@example.org")) is None


@pytest.fixture
def mail_on(settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
    settings_env.setenv("SZBENCH_SMTP_PORT", "1")  # nothing is sent in these tests
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    get_settings.cache_clear()


@pytest.mark.usefixtures("mail_on")
def test_with_mail_on_held_out_work_needs_a_verified_address(db_session: Session) -> None:
    unverified = f.user(db_session, verified=False)
    version = f.version(db_session, f.algorithm(db_session, unverified))
    starts = {
        "submission": lambda: quotas.check_submission(db_session, user=unverified, phase=None),
        "evaluation": lambda: quotas.check_evaluation(
            db_session, user=unverified, algorithm_version=version, held_out=True
        ),
        "re-score": lambda: quotas.check_rescore(db_session, user=unverified, held_out=True),
    }
    for what, start in starts.items():
        with pytest.raises(Forbidden, match="confirm your e-mail address first") as refused:
            start()
        assert refused.value.detail.startswith("held-out evaluations: "), what
    # Work on public samples is not held-out work.
    quotas.check_evaluation(db_session, user=unverified, algorithm_version=version, held_out=False)
    quotas.check_rescore(db_session, user=unverified, held_out=False)
    # A verified address may start it.
    verified = f.user(db_session)
    quotas.check_evaluation(
        db_session,
        user=verified,
        algorithm_version=f.version(db_session, f.algorithm(db_session, verified)),
        held_out=True,
    )


def test_without_mail_nothing_waits_for_verification(db_session: Session) -> None:
    unverified = f.user(db_session, verified=False)
    quotas.check_submission(db_session, user=unverified, phase=None)
    quotas.check_rescore(db_session, user=unverified, held_out=True)


@pytest.mark.usefixtures("mail_on")
def test_with_mail_on_an_unverified_account_starts_nothing_over_http(
    client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session, verified=False)
    ds = f.dataset(db_session, DatasetKind.HELD_OUT)
    dv = f.dataset_version(db_session, ds)
    version = f.version(db_session, f.algorithm(db_session, owner))
    ev = f.evaluation(db_session, version, dv)
    h = f.headers(db_session, owner)
    for method, path, body in (
        ("POST", "/api/v1/evaluations", {"algorithm_version_id": version.id, "dataset": ds.slug}),
        ("POST", f"/api/v1/evaluations/{ev.id}/rerun", None),
        ("POST", f"/api/v1/evaluations/{ev.id}/rescore", {"params": {}}),
        ("POST", "/api/v1/uploads", {"filename": "a.tar", "size_bytes": 10}),
    ):
        r = client.request(method, path, json=body, headers=h)
        assert r.status_code == 403, (path, r.text)
        assert "confirm your e-mail address first" in r.json()["detail"]


def test_a_lab_behind_one_address_signs_up_as_its_people_confirm(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    """People behind one address are counted together, but each account that confirms its
    e-mail address gives its place back: a lab of ten signs up in an afternoon, while
    unconfirmed accounts (which bring no held-out quota) stay throttled as before."""
    settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
    settings_env.setenv("SZBENCH_SMTP_PORT", "9")  # nothing is mailed: the token is made here
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    get_settings.cache_clear()
    made = []
    for i in range(10):
        r = _signup(client, email=f"lab-{i}@example.org")
        assert r.status_code == 201, (i, r.text)
        user = db_session.get(User, r.json()["id"])
        assert user is not None
        made.append(user)
        confirmed = client.post(
            "/api/v1/auth/verify", json={"token": accounts.verification_token(user)}
        )
        assert confirmed.status_code == 200, confirmed.text
    # Unconfirmed sign-ups from the same address still wait, as before.
    for _ in range(throttle.SIGNUP_FREE_PER_CLIENT + 1):
        assert _signup(client).status_code == 201
    assert _signup(client).status_code == 429
    # Confirming an address twice gives nothing more back.
    again = client.post("/api/v1/auth/verify", json={"token": accounts.verification_token(made[0])})
    assert again.status_code == 200
    assert _signup(client).status_code == 429
