"""Login, tokens (hashed, scoped, expiring, revocable), the session cookie, sign-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import FastAPI, Request, Response
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.api.deps import SessionDep
from szbench.auth import cookies
from szbench.auth import service as auth
from szbench.auth.passwords import hash_password, needs_rehash, verify_password
from szbench.models import ApiToken, Role
from tests.platform import factories as f


def test_password_hash_roundtrip_and_rehash() -> None:
    stored = hash_password("correct horse", n=1024)
    assert stored.startswith("scrypt$1024$")
    assert verify_password("correct horse", stored)
    assert not verify_password("wrong horse", stored)
    assert not verify_password("x", "garbage")
    assert not verify_password("x", None)
    assert needs_rehash(stored, n=2048)
    assert not needs_rehash(stored, n=1024)


def test_login_returns_working_token(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="ada@example.org", password="s3cret-pass")
    r = client.post(
        "/api/v1/auth/login", json={"email": "ADA@example.org ", "password": "s3cret-pass"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token"].startswith("szb_")
    assert body["user"]["email"] == "ada@example.org"
    me = client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {body['token']}"})
    assert me.status_code == 200
    assert me.json()["email"] == "ada@example.org"
    # Only the hash is stored.
    stored = db_session.scalars(select(ApiToken.token_hash)).all()
    assert body["token"] not in stored
    assert auth.hash_token(body["token"]) in stored


def test_login_wrong_password_is_401_envelope(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="bob@example.org", password="s3cret-pass")
    r = client.post(
        "/api/v1/auth/login", json={"email": "bob@example.org", "password": "nope-nope"}
    )
    assert r.status_code == 401
    assert r.json() == {"error": "Unauthorized", "detail": "wrong email or password"}


def test_inactive_user_cannot_log_in_or_use_tokens(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session, email="gone@example.org", password="s3cret-pass")
    h = f.headers(db_session, user)
    user.is_active = False
    db_session.flush()
    assert client.get("/api/v1/auth/me", headers=h).status_code == 401
    r = client.post(
        "/api/v1/auth/login", json={"email": "gone@example.org", "password": "s3cret-pass"}
    )
    assert r.status_code == 401


def test_token_shown_once_listed_without_secret_and_revocable(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session)
    h = f.headers(db_session, user)
    r = client.post(
        "/api/v1/tokens", json={"name": "ci", "scopes": ["read"], "expires_in_days": 30}
    )
    assert r.status_code == 401  # no credentials
    r = client.post(
        "/api/v1/tokens", headers=h, json={"name": "ci", "scopes": ["read"], "expires_in_days": 30}
    )
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["token"]
    assert created["scopes"] == ["read"]
    assert created["expires_at"] is not None
    listing = client.get("/api/v1/tokens", headers=h).json()
    assert listing["total"] == 2
    assert all("token" not in t for t in listing["items"])
    assert {t["prefix"] for t in listing["items"]} >= {secret[:12]}
    # The read-only token can read but not write.
    ro = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/v1/auth/me", headers=ro).status_code == 200
    r = client.post("/api/v1/tokens", headers=ro, json={})
    assert r.status_code == 403
    assert "write" in r.json()["detail"]
    # last_used_at is recorded.
    row = db_session.get(ApiToken, created["id"])
    assert row is not None
    assert row.last_used_at is not None
    # Revoke: the token stops working.
    assert client.delete(f"/api/v1/tokens/{created['id']}", headers=h).status_code == 200
    r = client.get("/api/v1/auth/me", headers=ro)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


def test_cannot_revoke_someone_elses_token(client: TestClient, db_session: Session) -> None:
    alice, bob = f.user(db_session), f.user(db_session)
    token, _ = f.token(db_session, bob)
    r = client.delete(f"/api/v1/tokens/{token.id}", headers=f.headers(db_session, alice))
    assert r.status_code == 404
    admin = f.user(db_session, Role.ADMIN)
    assert (
        client.delete(
            f"/api/v1/tokens/{token.id}", headers=f.headers(db_session, admin)
        ).status_code
        == 200
    )


def test_expired_token_rejected(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session)
    token, secret = f.token(db_session, user)
    token.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    db_session.flush()
    r = client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {secret}"})
    assert r.status_code == 401
    assert "expired" in r.json()["detail"]


def test_scopes_validated(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session)
    h = f.headers(db_session, user)
    r = client.post("/api/v1/tokens", headers=h, json={"scopes": ["admin"]})
    assert r.status_code == 403
    r = client.post("/api/v1/tokens", headers=h, json={"scopes": ["root"]})
    assert r.status_code == 400
    assert "unknown scope" in r.json()["detail"]
    admin = f.user(db_session, Role.ADMIN)
    r = client.post(
        "/api/v1/tokens", headers=f.headers(db_session, admin), json={"scopes": ["read", "admin"]}
    )
    assert r.status_code == 201


def test_admin_route_needs_admin_scope_even_for_admins(
    client: TestClient, db_session: Session
) -> None:
    admin = f.user(db_session, Role.ADMIN)
    assert (
        client.get(
            "/api/v1/users", headers=f.headers(db_session, admin, ["read", "write"])
        ).status_code
        == 403
    )
    assert client.get("/api/v1/users", headers=f.headers(db_session, admin)).status_code == 200


def test_malformed_authorization_header(client: TestClient) -> None:
    for value in ("Basic abc", "Bearer", "Bearer not-a-token"):
        r = client.get("/api/v1/auth/me", headers={"Authorization": value})
        assert r.status_code == 401, value
        assert r.json()["error"] == "Unauthorized"


def test_signup_and_closed_signup(client: TestClient, settings_env, db_session: Session) -> None:
    r = client.post(
        "/api/v1/auth/signup", json={"email": "new@example.org", "password": "longenough"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["role"] == "researcher"
    r = client.post(
        "/api/v1/auth/signup", json={"email": "new@example.org", "password": "longenough"}
    )
    assert r.status_code == 409
    settings_env.setenv("SZBENCH_ALLOW_SIGNUP", "false")
    from szbench.config import get_settings

    get_settings.cache_clear()
    r = client.post(
        "/api/v1/auth/signup", json={"email": "other@example.org", "password": "longenough"}
    )
    assert r.status_code == 403


def test_logout_revokes_the_token(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session)
    h = f.headers(db_session, user)
    assert client.post("/api/v1/auth/logout", headers=h).status_code == 204
    assert client.get("/api/v1/auth/me", headers=h).status_code == 401


def test_session_cookie_helper(app: FastAPI, client: TestClient, db_session: Session) -> None:

    f.user(db_session, email="web@example.org", password="s3cret-pass")

    @app.post("/web/login")
    def web_login(session: SessionDep, email: str, password: str) -> Response:
        response = Response(status_code=204)
        cookies.login_with_password(session, response, email=email, password=password)
        return response

    @app.post("/web/logout")
    def web_logout(session: SessionDep, request: Request) -> Response:
        response = Response(status_code=204)
        cookies.logout(session, request, response)
        return response

    r = client.post("/web/login", params={"email": "web@example.org", "password": "s3cret-pass"})
    assert r.status_code == 204, r.text
    set_cookie = r.headers["set-cookie"]
    assert "HttpOnly" in set_cookie
    assert "samesite=lax" in set_cookie.lower()
    assert client.get("/api/v1/auth/me").json()["email"] == "web@example.org"
    # Cookie-authenticated writes from another site are refused.
    r = client.post("/api/v1/tokens", json={}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    assert client.post("/api/v1/tokens", json={}).status_code == 201
    # A forged cookie means "signed out", not an error.
    client.cookies.set("szbench_session", "forged.value.sig")
    assert client.get("/api/v1/auth/me").status_code == 401
    client.cookies.clear()
    r = client.post("/web/login", params={"email": "web@example.org", "password": "s3cret-pass"})
    assert client.post("/web/logout").status_code == 204
    assert client.get("/api/v1/auth/me").status_code == 401
