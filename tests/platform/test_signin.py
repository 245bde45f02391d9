"""Sign-in: throttling with backoff, one password hash per attempt, password rules, and
revocation of every token and session when a password changes (docs/security.md)."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from szbench.api.deps import get_session, get_side_session
from szbench.app import create_app
from szbench.auth import passwords, throttle
from szbench.auth import service as auth
from szbench.cli.main import app as cli_app
from szbench.config import get_settings
from szbench.errors import TooManyAttempts, Unauthorized
from szbench.models import ApiToken, Role, SigninThrottle, User
from tests.platform import factories as f

PASSWORD = "s3cret-pass-word"
LOGIN = "/api/v1/auth/login"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[throttle.Clock]:
    """The throttle's clock, stopped at a fixed moment; tests advance it instead of sleeping."""
    throttle.clock.set(datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    yield throttle.clock
    throttle.clock.set(None)


def _login(client: TestClient, email: str, password: str, **kw: object):  # type: ignore[no-untyped-def]
    return client.post(LOGIN, json={"email": email, "password": password}, **kw)  # type: ignore[arg-type]


def _fail(client: TestClient, email: str, times: int) -> None:
    for _ in range(times):
        assert _login(client, email, "not-the-password").status_code == 401


def _web_sign_in(client: TestClient, email: str, password: str) -> None:
    page = client.get("/login")
    token = _CSRF.search(page.text)
    assert token is not None
    r = client.post(
        "/login",
        data={"email": email, "password": password, "csrf_token": token.group(1), "next": "/"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


# --- throttling -------------------------------------------------------------------------------


def test_after_n_failures_the_right_password_is_refused_until_the_backoff_ends(
    client: TestClient, db_session: Session, frozen_clock: throttle.Clock
) -> None:
    f.user(db_session, email="ada@example.org", password=PASSWORD)
    free = throttle.FREE_FAILURES_PER_ACCOUNT
    _fail(client, "ada@example.org", free)
    # Within the free failures the right password still works...
    assert _login(client, "ada@example.org", PASSWORD).status_code == 200
    # ...and a success starts the account afresh.
    _fail(client, "ada@example.org", free + 1)  # one past the free ones: a 1 s wait
    r = _login(client, "ada@example.org", PASSWORD)
    assert r.status_code == 429, r.text
    assert r.headers["Retry-After"] == "1"
    assert r.json()["error"] == "TooManyAttempts"
    frozen_clock.advance(1)
    _fail(client, "ada@example.org", 1)  # the next failure doubles the wait
    r = _login(client, "ada@example.org", PASSWORD)
    assert (r.status_code, r.headers["Retry-After"]) == (429, "2")
    frozen_clock.advance(1)
    assert _login(client, "ada@example.org", PASSWORD).status_code == 429  # still 1 s to go
    frozen_clock.advance(1)
    assert _login(client, "ada@example.org", PASSWORD).status_code == 200


def test_the_wait_doubles_up_to_the_cap(
    client: TestClient, db_session: Session, frozen_clock: throttle.Clock
) -> None:
    f.user(db_session, email="cap@example.org", password=PASSWORD)
    free = throttle.FREE_FAILURES_PER_ACCOUNT
    _fail(client, "cap@example.org", free)
    waits = []
    for _ in range(12):
        _fail(client, "cap@example.org", 1)
        r = _login(client, "cap@example.org", PASSWORD)
        assert r.status_code == 429
        waits.append(int(r.headers["Retry-After"]))
        frozen_clock.advance(waits[-1])
    assert waits == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]


def test_an_unknown_email_is_throttled_exactly_like_a_known_one(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="known@example.org", password=PASSWORD)
    free = throttle.FREE_FAILURES_PER_ACCOUNT

    def story(email: str) -> list[tuple[int, str | None]]:
        answers = []
        for _ in range(free + 2):
            r = _login(client, email, "not-the-password")
            answers.append((r.status_code, r.headers.get("Retry-After")))
        return answers

    assert story("known@example.org") == story("nobody@example.org")
    assert story("known@example.org")[-1] == (429, "1")


def test_one_client_address_is_throttled_across_accounts(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setattr(throttle, "FREE_FAILURES_PER_CLIENT", 3)
    f.user(db_session, email="victim@example.org", password=PASSWORD)
    for i in range(4):  # one failure each on four accounts: none is throttled on its own
        assert _login(client, f"guess{i}@example.org", "not-the-password").status_code == 401
    r = _login(client, "victim@example.org", PASSWORD)
    assert r.status_code == 429
    # Another address is not held back by this one's failures.
    assert auth.authenticate(
        db_session, email="victim@example.org", password=PASSWORD, client="192.0.2.7"
    )


def test_client_keys_group_an_ipv6_slash_64() -> None:
    assert throttle.client_key("2001:db8::1") == throttle.client_key("2001:db8::ffff:1:2")
    assert throttle.client_key("2001:db8::1") != throttle.client_key("2001:db8:0:1::1")
    assert throttle.client_key("::ffff:192.0.2.1") == throttle.client_key("192.0.2.1")
    assert throttle.client_key("192.0.2.1") != throttle.client_key("192.0.2.2")


def test_the_throttle_holds_across_api_processes(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    f.user(db_session, email="two@example.org", password=PASSWORD)
    _fail(client, "two@example.org", throttle.FREE_FAILURES_PER_ACCOUNT + 1)
    # A second application (another API process) on the same database refuses too.
    second = create_app()

    def session_override() -> Iterator[Session]:
        db_session.commit()
        yield db_session
        db_session.commit()

    second.dependency_overrides[get_session] = session_override
    second.dependency_overrides[get_side_session] = session_override
    with TestClient(second, raise_server_exceptions=False) as other:
        assert _login(other, "two@example.org", PASSWORD).status_code == 429
    # What is stored names no email.
    keys = db_session.scalars(select(SigninThrottle.key)).all()
    assert throttle.account_key("two@example.org") in keys
    assert not any("two@" in key for key in keys)


def test_web_sign_in_is_throttled_with_retry_after(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="web@example.org", password=PASSWORD)
    _fail(client, "web@example.org", throttle.FREE_FAILURES_PER_ACCOUNT + 1)
    page = client.get("/login")
    token = _CSRF.search(page.text)
    assert token is not None
    data = {"email": "web@example.org", "password": PASSWORD, "csrf_token": token.group(1)}
    r = client.post("/login", data=data, follow_redirects=False)
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "1"
    assert "too many failed sign-ins" in r.text


def test_a_password_change_checks_the_current_password_under_the_throttle(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, email="chg@example.org", password=PASSWORD)
    h = f.headers(db_session, user)
    body = {"current_password": "wrong-guess-1", "new_password": "another-long-phrase"}
    for _ in range(throttle.FREE_FAILURES_PER_ACCOUNT + 1):
        r = client.post("/api/v1/auth/password", json=body, headers=h)
        assert r.status_code == 400
        assert r.json()["detail"] == "current_password: wrong password"
    body["current_password"] = PASSWORD
    assert client.post("/api/v1/auth/password", json=body, headers=h).status_code == 429


# --- constant work ----------------------------------------------------------------------------


def test_every_sign_in_costs_exactly_one_password_hash(
    client: TestClient, db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    f.user(db_session, email="known@example.org", password=PASSWORD)
    f.user(db_session, email="tokens-only@example.org")
    gone = f.user(db_session, email="gone@example.org", password=PASSWORD)
    gone.is_active = False
    db_session.flush()
    calls: list[int] = []
    real = passwords._scrypt

    def counting(password: str, **kw: int | bytes) -> bytes:
        calls.append(int(kw["n"]))  # type: ignore[call-overload]
        return real(password, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(passwords, "_scrypt", counting)
    n = get_settings().password_scrypt_n
    cases = [
        ("known@example.org", "not-the-password", 401),
        ("known@example.org", PASSWORD, 200),
        ("nobody@example.org", "not-the-password", 401),
        ("tokens-only@example.org", "not-the-password", 401),
        ("gone@example.org", PASSWORD, 401),
    ]
    for email, password, status in cases:
        calls.clear()
        assert _login(client, email, password).status_code == status, email
        # One hash, at the configured cost, whether or not the account exists.
        assert calls == [n], email


# --- password rules ----------------------------------------------------------------------------


def test_the_blocklist_is_zxcvbns_common_password_list() -> None:
    common = passwords.common_passwords()
    assert len(common) >= 20_000
    assert {"password", "qwertyuiop", "1234567890"} <= common


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("password", "at least 10 characters"),
        ("        ", "at least 10 characters"),
        ("          ", "blank or one character repeated"),
        ("aaaaaaaaaaaa", "blank or one character repeated"),
        ("Short9!x", "at least 10 characters"),
        ("qwertyuiop", "most common passwords"),
        ("1234567890", "most common passwords"),
        ("PASSWORD123", "most common passwords"),
        ("newperson@example.org", "your email address"),
    ],
)
def test_weak_passwords_are_refused_at_api_sign_up(
    client: TestClient, password: str, reason: str
) -> None:
    r = client.post(
        "/api/v1/auth/signup", json={"email": "newperson@example.org", "password": password}
    )
    assert r.status_code == 400, r.text
    assert r.json()["detail"].startswith("password: ")
    assert reason in r.json()["detail"]


def test_password_rules_apply_on_every_path(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    admin = f.user(db_session, Role.ADMIN)
    admin_h = f.headers(db_session, admin)
    user = f.user(db_session, email="someone@example.org", password=PASSWORD)
    # Web sign-up.
    page = client.get("/signup")
    token = _CSRF.search(page.text)
    assert token is not None
    r = client.post(
        "/signup",
        data={"email": "web@example.org", "password": "password", "csrf_token": token.group(1)},
    )
    assert r.status_code == 400
    assert "at least 10 characters" in r.text
    # Admin-created and admin-set passwords.
    r = client.post(
        "/api/v1/users", headers=admin_h, json={"email": "x@example.org", "password": "qwertyuiop"}
    )
    assert (r.status_code, r.json()["detail"].split(":")[0]) == (400, "password")
    r = client.patch(f"/api/v1/users/{user.id}", headers=admin_h, json={"password": "password1"})
    assert r.status_code == 400
    # The user's own change.
    r = client.post(
        "/api/v1/auth/password",
        headers=f.headers(db_session, user),
        json={"current_password": PASSWORD, "new_password": "1234567890"},
    )
    assert r.status_code == 400
    assert "most common" in r.json()["detail"]
    # The minimum length is a setting.
    settings_env.setenv("SZBENCH_PASSWORD_MIN_LENGTH", "20")
    get_settings.cache_clear()
    r = client.post(
        "/api/v1/auth/signup", json={"email": "long@example.org", "password": "nineteen-chars-0001"}
    )
    assert r.json()["detail"] == "password: must be at least 20 characters"


def test_cli_refuses_weak_passwords(settings_env: pytest.MonkeyPatch) -> None:
    from szbench import migrate

    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    migrate.upgrade(get_settings().effective_database_url)
    runner = CliRunner()
    result = runner.invoke(cli_app, ["user", "create", "ada@example.org", "--password", "password"])
    assert result.exit_code == 1
    assert "password: must be at least 10 characters" in result.output
    result = runner.invoke(
        cli_app, ["user", "create", "ada@example.org", "--password", "s3cret-pass-word"]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        cli_app, ["user", "set-password", "ada@example.org", "--password", "qwertyuiop"]
    )
    assert result.exit_code == 1
    assert "most common passwords" in result.output


# --- revocation ---------------------------------------------------------------------------------


def test_changing_ones_password_revokes_every_token_and_session(
    app: FastAPI, client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, email="me@example.org", password=PASSWORD)
    api_token = f.headers(db_session, user)
    login = _login(client, "me@example.org", PASSWORD).json()["token"]
    _web_sign_in(client, "me@example.org", PASSWORD)
    assert client.get("/api/v1/auth/me").status_code == 200  # the web session
    with TestClient(app, raise_server_exceptions=False) as other_browser:
        _web_sign_in(other_browser, "me@example.org", PASSWORD)
        r = client.post(
            "/api/v1/auth/password",
            json={"current_password": PASSWORD, "new_password": "a-brand-new-phrase"},
            headers={"Origin": "http://testserver"},
        )
        assert r.status_code == 200, r.text
        fresh = r.json()["token"]
        assert other_browser.get("/api/v1/auth/me").status_code == 401
    for secret in (api_token["Authorization"], f"Bearer {login}"):
        assert client.get("/api/v1/auth/me", headers={"Authorization": secret}).status_code == 401
    # The browser that changed it got a new session; the answer holds a new token.
    assert client.get("/api/v1/auth/me").status_code == 200
    assert client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {fresh}"}).json()[
        "email"
    ] == ("me@example.org")
    assert _login(client, "me@example.org", PASSWORD).status_code == 401
    assert _login(client, "me@example.org", "a-brand-new-phrase").status_code == 200


def test_an_admin_reset_revokes_the_users_tokens(client: TestClient, db_session: Session) -> None:
    admin = f.user(db_session, Role.ADMIN)
    user = f.user(db_session, password=PASSWORD)
    theirs = f.headers(db_session, user)
    assert client.get("/api/v1/auth/me", headers=theirs).status_code == 200
    r = client.patch(
        f"/api/v1/users/{user.id}",
        headers=f.headers(db_session, admin),
        json={"password": "reset-by-the-admin"},
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/auth/me", headers=theirs).status_code == 401
    revoked = db_session.scalars(select(ApiToken.revoked_at).where(ApiToken.user_id == user.id))
    assert all(at is not None for at in revoked)


def test_a_token_made_before_the_password_changed_is_refused(
    client: TestClient, db_session: Session
) -> None:
    # A sign-in with the old password that raced the change: its token is newer than the
    # revocation but older than the change, and must not work either.
    user = f.user(db_session, password=PASSWORD)
    token, secret = f.token(db_session, user)
    auth.set_password(db_session, user, "changed-meanwhile")
    token.revoked_at = None
    db_session.flush()
    assert (
        client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 401
    )
    stored = db_session.get(User, user.id)
    assert stored is not None
    assert stored.password_changed_at is not None


def test_cli_set_password_revokes_tokens(settings_env: pytest.MonkeyPatch) -> None:
    from szbench import migrate
    from szbench.db import session_scope

    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    migrate.upgrade(get_settings().effective_database_url)
    with session_scope() as session:
        user = auth.create_user(session, email="cli@example.org", password=PASSWORD)
        _, secret = auth.create_token(session, user)
    result = CliRunner().invoke(
        cli_app, ["user", "set-password", "cli@example.org", "--password", "reset-from-the-cli"]
    )
    assert result.exit_code == 0, result.output
    with session_scope() as session:
        assert auth.resolve_token(session, secret) is None
        assert auth.authenticate(session, email="cli@example.org", password="reset-from-the-cli")


def test_the_web_password_page_changes_it_and_revokes_the_rest(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, email="page@example.org", password=PASSWORD)
    theirs = f.headers(db_session, user)
    _web_sign_in(client, "page@example.org", PASSWORD)
    assert 'minlength="10"' in client.get("/signup").text
    page = client.get("/password")
    token = _CSRF.search(page.text)
    assert token is not None
    form = {"csrf_token": token.group(1), "current_password": "wrong-one-here"}
    r = client.post("/password", data={**form, "new_password": "a-fresh-long-phrase"})
    assert r.status_code == 400
    assert "wrong password" in r.text.lower()
    assert "current_password:" not in r.text  # under its field, not in validator wording
    form["current_password"] = PASSWORD
    r = client.post("/password", data={**form, "new_password": "password"})
    assert r.status_code == 400
    assert "at least 10 characters" in r.text
    r = client.post(
        "/password", data={**form, "new_password": "a-fresh-long-phrase"}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert client.get("/api/v1/auth/me", headers=theirs).status_code == 401
    assert client.get("/api/v1/auth/me").json()["email"] == "page@example.org"
    assert _login(client, "page@example.org", "a-fresh-long-phrase").status_code == 200


def test_concurrent_attempts_are_each_counted(pg_engine: Engine) -> None:
    """N simultaneous guesses are N failures (row locks, counted before the hash): once the
    free ones are used up, the rest are refused, whatever order they arrive in."""
    email = f"parallel{f.n()}-{uuid.uuid4().hex[:8]}@example.org"
    free = throttle.FREE_FAILURES_PER_ACCOUNT
    start = threading.Barrier(free + 3)
    outcomes: list[str] = []

    def attempt() -> None:
        with Session(pg_engine) as session:
            start.wait()
            try:
                throttle.begin(session, email=email, client=None)
                session.commit()
                outcomes.append("counted")
            except TooManyAttempts:
                session.rollback()
                outcomes.append("refused")

    threads = [threading.Thread(target=attempt) for _ in range(free + 3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # The free ones, and the one that started the first wait; the others wait.
        assert sorted(outcomes) == ["counted"] * (free + 1) + ["refused"] * 2
        with Session(pg_engine) as session:
            row = session.get(SigninThrottle, throttle.account_key(email))
            assert row is not None
            assert row.failures == free + 1
    finally:
        with Session(pg_engine) as session:
            session.execute(
                delete(SigninThrottle).where(SigninThrottle.key == throttle.account_key(email))
            )
            session.commit()


def test_the_throttle_works_on_the_embedded_sqlite_database(
    settings_env: pytest.MonkeyPatch, frozen_clock: throttle.Clock
) -> None:
    from szbench import migrate
    from szbench.db import session_scope

    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    get_settings.cache_clear()
    migrate.upgrade(get_settings().effective_database_url)
    with session_scope() as session:
        auth.create_user(session, email="lite@example.org", password=PASSWORD)
    for _ in range(throttle.FREE_FAILURES_PER_ACCOUNT + 1):
        with session_scope() as session, pytest.raises(Unauthorized):
            auth.authenticate(session, email="lite@example.org", password="nope", client="::1")
    with session_scope() as session, pytest.raises(TooManyAttempts) as refused:
        auth.authenticate(session, email="lite@example.org", password=PASSWORD, client="::1")
    assert refused.value.retry_after_s == 1
    frozen_clock.advance(1)
    with session_scope() as session:
        assert auth.authenticate(session, email="lite@example.org", password=PASSWORD)


def test_failures_are_forgotten_after_the_memory_period(
    client: TestClient, db_session: Session, frozen_clock: throttle.Clock
) -> None:
    f.user(db_session, email="old@example.org", password=PASSWORD)
    _fail(client, "old@example.org", throttle.FREE_FAILURES_PER_ACCOUNT + 1)
    frozen_clock.advance(throttle.FAILURE_MEMORY_S + 1)
    # Any attempt sweeps forgotten rows.
    assert _login(client, "someone-else@example.org", "not-the-password").status_code == 401
    keys = set(db_session.scalars(select(SigninThrottle.key)).all())
    assert throttle.account_key("old@example.org") not in keys
    assert throttle.account_key("someone-else@example.org") in keys
    assert _login(client, "old@example.org", PASSWORD).status_code == 200
