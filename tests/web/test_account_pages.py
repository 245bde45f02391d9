"""Account pages: profile, web sign-ins apart from API tokens, reset by link, forgot
password, e-mail verification, and the sign-up of an address that has an account."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import accounts, cookies
from szbench.auth import service as auth
from szbench.config import get_settings
from szbench.models import ApiToken, Role
from tests.platform import factories as f
from tests.platform.smtp_sink import Sink, smtp_sink

from .conftest import PASSWORD, csrf_of, post_form, sign_in

NEW = "a-new-password-42"


@pytest.fixture
def sink(settings_env: pytest.MonkeyPatch) -> Iterator[Sink]:
    with smtp_sink() as server:
        settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
        settings_env.setenv("SZBENCH_SMTP_PORT", str(server.port))
        settings_env.setenv("SZBENCH_SMTP_STARTTLS", "false")
        settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
        get_settings.cache_clear()
        yield server


def test_profile_lists_web_sign_ins_apart_from_api_tokens(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, email="prof@example.org", password=PASSWORD, name="Prof")
    auth.create_token(db_session, user, name="laptop CLI")
    other_browser, _ = auth.create_token(db_session, user, name=cookies.WEB_SESSION_NAME)
    sign_in(client, "prof@example.org")
    page = client.get("/account").text
    assert 'id="account-link"' in page
    # This browser and the other one.
    assert len(re.findall(r'action="/account/sessions/\d+/revoke"', page)) == 2
    assert "this browser" in page
    assert "laptop CLI" not in page
    assert 'API tokens</a> (<span id="api-token-count">1</span> in use)' in page
    tokens = client.get("/tokens").text
    assert "laptop CLI" in tokens
    assert cookies.WEB_SESSION_NAME not in tokens
    r = post_form(client, "/account", "/account", {"name": "Professor P"})
    assert "Your name is saved." in r.text
    assert 'value="Professor P"' in r.text
    r = post_form(client, "/account", "/account/sessions/revoke-others")
    assert "1 other web sign-in(s) ended." in r.text
    db_session.refresh(other_browser)
    assert other_browser.revoked_at is not None
    assert client.get("/account").status_code == 200  # this browser stays signed in
    # An API token is not a web sign-in: it cannot be ended from here.
    api = db_session.scalar(select(ApiToken).where(ApiToken.name == "laptop CLI"))
    assert api is not None
    assert post_form(client, "/account", f"/account/sessions/{api.id}/revoke").status_code == 404


def test_admin_issued_link_sets_a_password_once_and_signs_in(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, role=Role.ADMIN, email="acc-admin@example.org", password=PASSWORD)
    user = f.user(db_session, email="acc-lost@example.org", password="forgotten-pw-77")
    _, old_api = auth.create_token(db_session, user, name="cli")
    sign_in(client, "acc-admin@example.org")
    r = post_form(client, "/admin/users", f"/admin/users/{user.id}/reset-link")
    assert r.status_code == 200
    html = r.text
    start = html.index('id="reset-url" class="secret" readonly value="') + len(
        'id="reset-url" class="secret" readonly value="'
    )
    url = html[start : html.index('"', start)].replace("&amp;", "&")
    path = url[url.index("/password/reset") :]
    client.cookies.clear()
    form = client.get(path)
    assert form.status_code == 200
    assert "acc-lost@example.org" in form.text
    token = path.split("token=", 1)[1]
    weak = client.post(
        "/password/reset",
        data={"token": token, "new_password": "password1", "csrf_token": csrf_of(form.text)},
    )
    assert weak.status_code == 400
    assert "new_password" in weak.text or "password" in weak.text
    r = client.post(
        "/password/reset",
        data={"token": token, "new_password": NEW, "csrf_token": csrf_of(form.text)},
    )
    assert r.status_code == 200
    assert "Your new password is set" in r.text
    assert "<h1>Your account</h1>" in r.text
    assert auth.resolve_token(db_session, old_api) is None
    spent = client.get(path)
    assert spent.status_code == 400
    assert "this reset link is not valid" in spent.text


def test_forgot_password_without_and_with_smtp(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    assert 'id="forgot-link"' in client.get("/login").text
    page = client.get("/password/forgot").text
    assert 'id="ask-admin"' in page
    with smtp_sink() as sink:
        settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
        settings_env.setenv("SZBENCH_SMTP_PORT", str(sink.port))
        settings_env.setenv("SZBENCH_SMTP_STARTTLS", "false")
        settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
        get_settings.cache_clear()
        f.user(db_session, email="forgot@example.org", password=PASSWORD)
        r = post_form(
            client, "/password/forgot", "/password/forgot", {"email": "forgot@example.org"}
        )
        assert 'id="reset-sent"' in r.text
        unknown = post_form(
            client, "/password/forgot", "/password/forgot", {"email": "unknown@example.org"}
        )
        assert 'id="reset-sent"' in unknown.text
        (link,) = sink.links("/password/reset")
        assert link.startswith("https://bench.example.org/password/reset?token=")


def test_sign_up_of_an_existing_address_points_to_sign_in_and_reset(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="taken@example.org", password=PASSWORD)
    r = post_form(
        client, "/signup", "/signup", {"email": "taken@example.org", "password": "whatever-pw-93"}
    )
    assert r.status_code == 409
    assert 'id="signup-exists"' in r.text
    assert 'href="/login?email=taken%40example.org"' in r.text
    assert 'href="/password/forgot"' in r.text
    assert 'value="taken@example.org"' in client.get("/login?email=taken%40example.org").text


def test_sign_up_with_smtp_sends_a_link_that_confirms_the_address(
    client: TestClient, db_session: Session, sink: Sink
) -> None:
    r = post_form(
        client, "/signup", "/signup", {"email": "fresh@example.org", "password": "fresh-password-5"}
    )
    assert "Confirm your address with the link sent to fresh@example.org" in r.text
    account = client.get("/account").text
    assert 'id="verify-notice"' in account
    assert client.get("/submit").status_code == 403
    (link,) = sink.links("/verify")
    r = client.get(link[link.index("/verify") :])
    assert "Your address fresh@example.org is confirmed." in r.text
    assert 'id="verify-notice"' not in r.text
    assert client.get("/submit").status_code == 200


def test_the_admin_page_shows_a_path_and_says_why(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session)
    admin = f.user(db_session, role=Role.ADMIN, password=PASSWORD)
    sign_in(client, admin.email)
    page = post_form(
        client,
        "/admin/users",
        f"/admin/users/{user.id}/reset-link",
        {},
        headers={"Host": "evil.example"},
    )
    assert 'value="/password/reset?token=' in page.text
    assert 'value="http://evil.example' not in page.text
    assert "This server has no <code>SZBENCH_PUBLIC_URL</code>" in page.text


def test_upload_a_fixed_version_preselects_only_the_callers_algorithm(
    client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session, email="fixer@example.org", password=PASSWORD)
    other = f.user(db_session, email="other@example.org")
    mine = f.algorithm(db_session, owner, name="fixme")
    f.algorithm(db_session, owner, name="another")
    theirs = f.algorithm(db_session, other, name="theirs")
    db_session.commit()
    sign_in(client, "fixer@example.org")
    page = client.get(f"/submit?algorithm_id={mine.id}").text
    assert re.findall(r'<option value="(\d+)" selected>', page) == [str(mine.id)]
    # Someone else's algorithm (or none) leaves "New algorithm" chosen, says nothing of it.
    for query in (f"?algorithm_id={theirs.id}", ""):
        page = client.get(f"/submit{query}").text
        assert " selected>" not in page.split('id="algorithm-id"')[1].split("</select>")[0]
        assert "theirs" not in page


def test_the_token_count_is_right_after_a_password_reset(
    client: TestClient, db_session: Session
) -> None:
    """Issue 30.6: a reset revokes every token; the account page it lands on counts the
    tokens that still work (none), not every token ever made."""
    user = f.user(db_session, email="reset-count@example.org", password=PASSWORD)
    for name in ("laptop", "cluster"):
        auth.create_token(db_session, user, name=name)
    sign_in(client, "reset-count@example.org")
    assert '<span id="api-token-count">2</span> in use' in client.get("/account").text
    token, _ = accounts.reset_token(user)
    page = client.get(f"/password/reset?token={token}").text
    r = client.post(
        "/password/reset",
        data={
            "token": token,
            "new_password": "a-brand-new-secret-5",
            "csrf_token": csrf_of(page),
        },
        follow_redirects=True,
    )
    assert r.status_code == 200, r.text
    assert "Your new password is set" in r.text
    assert '<span id="api-token-count">0</span> in use' in r.text
