"""Accounts through the API: admin-issued one-time reset links, e-mailed reset links and
address verification with SMTP configured, web sign-ins told apart from API tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import accounts, cookies
from szbench.auth import service as auth
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import ApiToken, Role, User
from tests.platform import factories as f
from tests.platform.smtp_sink import Sink, smtp_sink
from tests.web.browsing import seeded_site

OLD, NEW = "old-password-17", "brand-new-secret-29"


def _token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["token"][0]


@pytest.fixture
def sink(settings_env: pytest.MonkeyPatch) -> Iterator[Sink]:
    with smtp_sink() as server:
        settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
        settings_env.setenv("SZBENCH_SMTP_PORT", str(server.port))
        settings_env.setenv("SZBENCH_SMTP_STARTTLS", "false")
        settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
        get_settings.cache_clear()
        yield server


def test_an_admin_link_works_once_and_revokes_every_session_and_token(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, email="forgetful@example.org", password=OLD)
    _, api_secret = f.token(db_session, user)
    admin_h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))
    r = client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=admin_h)
    assert r.status_code == 200, r.text
    assert r.json()["emailed"] is False
    url = r.json()["url"]
    assert urlsplit(url).path == "/password/reset"
    token = _token_of(url)
    # A researcher cannot issue links.
    other_h = f.headers(db_session, f.user(db_session))
    assert (
        client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=other_h).status_code
        == 403
    )

    weak = client.post(
        "/api/v1/auth/password-reset", json={"token": token, "new_password": "short"}
    )
    assert weak.status_code == 400
    assert weak.json()["detail"].startswith("password: ")
    r = client.post("/api/v1/auth/password-reset", json={"token": token, "new_password": NEW})
    assert r.status_code == 200, r.text
    assert r.json()["email"] == "forgetful@example.org"
    # The old API token is revoked; the new password signs in, the old one does not.
    assert (
        client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {api_secret}"}).status_code
        == 401
    )
    login = {"email": "forgetful@example.org"}
    assert client.post("/api/v1/auth/login", json={**login, "password": OLD}).status_code == 401
    assert client.post("/api/v1/auth/login", json={**login, "password": NEW}).status_code == 200
    # The link is spent.
    again = client.post(
        "/api/v1/auth/password-reset", json={"token": token, "new_password": "another-one-51"}
    )
    assert again.status_code == 400
    assert again.json()["detail"].startswith("token: this reset link is not valid")


def test_a_link_dies_when_the_password_changes_and_when_it_expires(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    user = f.user(db_session, password=OLD)
    admin_h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))
    first = _token_of(
        client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=admin_h).json()[
            "url"
        ]
    )
    auth.set_password(db_session, user, "changed-meanwhile-3")
    r = client.post("/api/v1/auth/password-reset", json={"token": first, "new_password": NEW})
    assert r.status_code == 400
    forged = first[:-4] + ("AAAA" if not first.endswith("AAAA") else "BBBB")
    r = client.post("/api/v1/auth/password-reset", json={"token": forged, "new_password": NEW})
    assert r.status_code == 400
    settings_env.setattr(accounts, "RESET_TTL_S", -1)
    fresh = _token_of(
        client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=admin_h).json()[
            "url"
        ]
    )
    r = client.post("/api/v1/auth/password-reset", json={"token": fresh, "new_password": NEW})
    assert r.status_code == 400


def test_without_smtp_reset_requests_say_whom_to_ask(client: TestClient) -> None:
    r = client.post("/api/v1/auth/password-reset/request", json={"email": "a@example.org"})
    assert r.status_code == 409
    assert "ask an admin for a reset link" in r.json()["detail"]


def test_emailed_reset_link_same_answer_for_unknown_addresses_and_rate_limited(
    client: TestClient, db_session: Session, sink: Sink
) -> None:
    user = f.user(db_session, email="mailme@example.org", password=OLD)
    for email in ("mailme@example.org", "nobody@example.org", "MailMe@example.org"):
        r = client.post("/api/v1/auth/password-reset/request", json={"email": email})
        assert r.status_code == 202
        assert (
            r.json()["detail"]
            == "If an account has this address, a reset link is on its way to it."
        )
    # One message: none for the unknown address, the second for the account is rate-limited.
    assert len(sink.messages) == 1
    assert sink.messages[0]["To"] == "mailme@example.org"
    (url,) = sink.links("/password/reset")
    assert url.startswith("https://bench.example.org/password/reset?token=")
    r = client.post(
        "/api/v1/auth/password-reset", json={"token": _token_of(url), "new_password": NEW}
    )
    assert r.status_code == 200
    # A link that came by e-mail proves the address.
    db_session.refresh(user)
    assert user.email_verified_at is not None


def test_with_smtp_a_sign_up_verifies_its_address_before_submitting(
    client: TestClient, db_session: Session, sink: Sink
) -> None:
    r = client.post(
        "/api/v1/auth/signup", json={"email": "new@example.org", "password": "signup-secret-81"}
    )
    assert r.status_code == 201
    assert r.json()["email_verified_at"] is None
    (url,) = sink.links("/verify")
    login = client.post(
        "/api/v1/auth/login", json={"email": "new@example.org", "password": "signup-secret-81"}
    ).json()
    h = {"Authorization": f"Bearer {login['token']}"}
    refused = client.post("/api/v1/algorithms", json={"name": "early"}, headers=h)
    assert refused.status_code == 403
    assert refused.json()["detail"].startswith("confirm your e-mail address first")
    bad = client.post("/api/v1/auth/verify", json={"token": "not-a-token"})
    assert bad.status_code == 400
    assert bad.json()["detail"] == "token: this verification link is not valid or has expired"
    r = client.post("/api/v1/auth/verify", json={"token": _token_of(url)})
    assert r.status_code == 200
    assert r.json()["email_verified_at"] is not None
    assert client.post("/api/v1/algorithms", json={"name": "later"}, headers=h).status_code == 201
    # Accounts an admin makes count as confirmed.
    admin_made = f.user(db_session)
    assert admin_made.email_verified_at is not None


def test_admin_link_can_be_emailed(client: TestClient, db_session: Session, sink: Sink) -> None:
    user = f.user(db_session, email="lost@example.org", password=OLD)
    admin_h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))
    r = client.post(
        f"/api/v1/users/{user.id}/password-reset", json={"send_email": True}, headers=admin_h
    )
    assert r.json()["emailed"] is True
    assert sink.links("/password/reset") == [r.json()["url"]]


def test_web_sign_ins_are_named_apart_and_the_name_is_reserved(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, password=OLD)
    h = f.headers(db_session, user)
    r = client.post("/api/v1/tokens", json={"name": "Web Session"}, headers=h)
    assert r.status_code == 400
    assert (
        r.json()["detail"]
        == "name: 'Web Session' is reserved for web sign-ins (or reads as that name); "
        "choose another name"
    )
    names = {t["name"] for t in client.get("/api/v1/tokens", headers=h).json()["items"]}
    assert cookies.WEB_SESSION_NAME not in names
    assert (
        db_session.scalar(
            select(ApiToken.id).where(ApiToken.user_id == user.id, ApiToken.name == "Web Session")
        )
        is None
    )
    assert db_session.get(User, user.id) is not None


def test_an_existing_email_sign_up_points_to_sign_in_and_reset(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="here@example.org", password=OLD)
    r = client.post(
        "/api/v1/auth/signup", json={"email": "Here@example.org", "password": "signup-secret-81"}
    )
    assert r.status_code == 409
    assert r.json()["detail"] == (
        "email: an account with here@example.org exists already: sign in "
        "(POST /api/v1/auth/login) or reset its password (ask an admin for a reset link)"
    )


@pytest.mark.parametrize(
    "name",
    [
        "WEB SESSION",
        " web  session ",
        "web-session",
        "web_session",
        "web.session!",
        "websession",
        "web\u00adsession",  # soft hyphen
        "web\u200bsession",  # zero-width space
        "w\u0435b session",  # Cyrillic small ie
        "\u0461eb session",  # Cyrillic omega
        "\uff57\uff45\uff42 \uff53\uff45\uff53\uff53\uff49\uff4f\uff4e",  # full-width
        "web sess1on",
        "vveb session",
        "web 5ession",
        "W\u0301eb session",  # combining accent
    ],
)
def test_the_reserved_name_cannot_be_taken_by_a_look_alike(
    client: TestClient, db_session: Session, name: str
) -> None:
    h = f.headers(db_session, f.user(db_session, password=OLD))
    r = client.post("/api/v1/tokens", json={"name": name}, headers=h)
    assert r.status_code == 400, (name, r.text)
    assert "is reserved for web sign-ins" in r.json()["detail"]


@pytest.mark.parametrize("name", ["web sessions", "my web session", "laptop", "ci", "session"])
def test_other_names_stay_free(client: TestClient, db_session: Session, name: str) -> None:
    h = f.headers(db_session, f.user(db_session, password=OLD))
    r = client.post("/api/v1/tokens", json={"name": name}, headers=h)
    assert r.status_code == 201, (name, r.text)


def test_mail_goes_out_after_the_answer(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A reset request for an account and for an unknown address do the same work before
    answering: the message is sent after the answer (the SMTP server holds it meanwhile)."""
    with smtp_sink(hold=True) as sink:
        env = {
            "SZBENCH_DATABASE_URL": pg_url,
            "SZBENCH_PASSWORD_SCRYPT_N": "1024",
            "SZBENCH_SMTP_HOST": "127.0.0.1",
            "SZBENCH_SMTP_PORT": str(sink.port),
            "SZBENCH_SMTP_STARTTLS": "false",
            # The sender waits for the sink as long as the test may: a message sent before
            # answering holds the answer until the gate opens.
            "SZBENCH_SMTP_TIMEOUT_S": "60",
            "SZBENCH_PUBLIC_URL": "https://bench.example.org",
        }

        def seed() -> None:
            with session_scope() as s:
                f.user(s, email="held@example.org", password=OLD)

        with seeded_site(settings_env, env, seed) as (url, _):
            answers = [
                httpx.post(
                    f"{url}/api/v1/auth/password-reset/request", json={"email": email}, timeout=15
                )
                for email in ("held@example.org", "nobody@example.org")
            ]
            signup = httpx.post(
                f"{url}/api/v1/auth/signup",
                json={"email": "joining@example.org", "password": "signup-secret-81"},
                timeout=15,
            )
            # Every answer is complete while the SMTP server still holds the first message.
            assert [a.status_code for a in answers] == [202, 202]
            assert answers[0].json() == answers[1].json()
            assert signup.status_code == 201, signup.text
            assert sink.arrived.wait(20)
            assert sink.messages == []
            sink.gate.set()
            deadline = time.monotonic() + 20
            while len(sink.messages) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    assert sorted(m["To"] for m in sink.messages) == ["held@example.org", "joining@example.org"]
    assert len(sink.links("/password/reset")) == 1
