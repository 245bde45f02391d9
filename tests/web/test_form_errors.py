"""Issue 23.7: a form's errors sit next to their field, in a person's words, and the form
keeps what was typed; no form turns a wrong value into the separate "Bad request" page."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.errors import BadRequest
from szbench.models import Dataset, Role, User
from szbench.web import forms
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in


def _field_error(page: str, field_id: str) -> str:
    match = re.search(rf'<p class="field-error" id="{field_id}-error">([^<]*)</p>', page)
    assert match, f"no error next to {field_id}"
    return html.unescape(match.group(1))


def test_messages_are_sentences_by_field() -> None:
    typed = forms.check(forms_model(), {"name": "x" * 201, "days": "soon"})
    assert typed.model is None
    assert typed.errors == {"name": "At most 200 characters.", "days": "Give a whole number."}
    assert typed.values == {"name": "x" * 201, "days": "soon"}
    ok = forms.check(forms_model(), {"name": "a", "days": "3"})
    assert ok.ok
    assert ok.model is not None
    ok.fail(BadRequest("name: is taken"))
    assert ok.errors == {"name": "Is taken"}
    assert ok.status_code == 400
    ok.fail(BadRequest("something else went wrong"))
    assert ok.errors[forms.FORM] == "Something else went wrong"


def forms_model() -> type[forms.FormModel]:
    from pydantic import Field

    class Sample(forms.FormModel):
        name: str = Field(max_length=200)
        days: int | None = None

    return Sample


def test_sign_up_errors_stay_by_their_field(client: TestClient, db_session: Session) -> None:
    r = post_form(
        client,
        "/signup",
        "/signup",
        {"email": "typed@example.org", "password": "short", "name": "N" * 250},
    )
    assert r.status_code == 400
    assert "Bad request" not in r.text
    assert "body." not in r.text
    assert _field_error(r.text, "name") == "At most 200 characters."
    assert 'value="typed@example.org"' in r.text
    assert 'value="short"' not in r.text  # a password is never sent back
    r = post_form(client, "/signup", "/signup", {"email": "typed@example.org", "password": "short"})
    assert r.status_code == 400
    assert "at least" in _field_error(r.text, "password")
    assert 'aria-describedby="password-error"' in r.text
    assert db_session.scalar(select(User).where(User.email == "typed@example.org")) is None


def test_account_token_and_password_forms(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="forms-acct@example.org", password=PASSWORD, name="Before")
    sign_in(client, "forms-acct@example.org")
    r = post_form(client, "/account", "/account", {"name": "Z" * 201})
    assert r.status_code == 400
    assert _field_error(r.text, "name") == "At most 200 characters."
    assert 'value="' + "Z" * 201 + '"' in r.text
    assert db_session.scalar(select(User.name).where(User.email == "forms-acct@example.org")) == (
        "Before"
    )
    r = post_form(
        client, "/tokens", "/tokens", {"name": "laptop", "expires_in_days": "ten", "scopes": "read"}
    )
    assert r.status_code == 400
    assert _field_error(r.text, "expires-in-days") == "Give a whole number."
    assert 'value="laptop"' in r.text
    assert 'value="ten"' in r.text
    r = post_form(client, "/tokens", "/tokens", {"name": "laptop", "expires_in_days": "9999"})
    assert _field_error(r.text, "expires-in-days") == "Give 3650 or less."
    r = post_form(client, "/tokens", "/tokens", {"name": "laptop", "scopes": "nonsense"})
    assert "Unknown scope" in _field_error(r.text, "scopes")
    r = post_form(
        client,
        "/password",
        "/password",
        {"current_password": "wrong-one-123", "new_password": "another-good-one-77"},
    )
    assert r.status_code == 400
    assert _field_error(r.text, "current-password") == "Wrong password"


def test_algorithm_edit_keeps_the_typed_values(client: TestClient, db_session: Session) -> None:
    owner = f.user(db_session, email="forms-edit@example.org", password=PASSWORD)
    algo = f.algorithm(db_session, owner, name="typed")
    sign_in(client, "forms-edit@example.org")
    edit = f"/algorithms/{algo.id}/edit"
    r = post_form(
        client, edit, edit, {"title": "Kept title", "licence": "L" * 101, "visibility": "nope"}
    )
    assert r.status_code == 400
    assert _field_error(r.text, "licence") == "At most 100 characters."
    assert _field_error(r.text, "visibility").startswith("Choose one of")
    assert 'value="Kept title"' in r.text


def test_dataset_create_errors(client: TestClient, db_session: Session) -> None:
    f.user(db_session, Role.ADMIN, email="forms-admin@example.org", password=PASSWORD)
    sign_in(client, "forms-admin@example.org")
    page = "/admin/datasets"
    r = post_form(client, page, page, {"slug": "Bad Slug", "title": "Typed title"})
    assert r.status_code == 400
    assert "is not a valid slug" in _field_error(r.text, "slug")
    assert 'value="Typed title"' in r.text
    r = post_form(client, page, page, {"slug": "ok-slug", "kind": "everything"})
    assert _field_error(r.text, "kind").startswith("Choose one of")
    assert db_session.scalar(select(Dataset).where(Dataset.slug == "ok-slug")) is None
    f.dataset(db_session, slug="taken-slug")
    r = post_form(client, page, page, {"slug": "taken-slug"})
    assert r.status_code == 409
    assert "already exists" in _field_error(r.text, "slug")


def test_notifications_url_too_long_is_a_field_error(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="forms-notes@example.org", password=PASSWORD)
    sign_in(client, "forms-notes@example.org")
    page = "/account/notifications"
    long_url = "https://example.org/" + "a" * 2000
    r = post_form(client, page, page, {"webhook_url": long_url})
    assert r.status_code == 400
    assert _field_error(r.text, "webhook-url") == "At most 2000 characters."
    assert long_url in r.text


def _every_override_isolated(page: str, where: str) -> None:
    """Each U+202E sits inside a first-strong isolate, and the isolates are balanced."""
    depth = 0
    for char in page:
        if char == "\u2068":
            depth += 1
        elif char == "\u2069":
            depth -= 1
            assert depth >= 0, where
        elif char == "\u202e":
            assert depth > 0, where
    assert depth == 0, where


def test_bidi_controls_stay_inside_an_isolate_on_every_page(
    client: TestClient, db_session: Session
) -> None:
    from szbench.models import DatasetKind

    owner = f.user(db_session, email="bidi@example.org", password=PASSWORD, name="Eve\u202e")
    algo = f.algorithm(db_session, owner, name="bidi", title="txt.\u202eexe")
    ds = f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE, slug="bidi-sample")
    ev = f.evaluation(db_session, f.version(db_session, algo), f.dataset_version(db_session, ds))
    f.result(db_session, ev, {"01": {"event_f1": 0.5}})
    for path in (f"/algorithms/{algo.id}", "/leaderboards/bidi-sample", f"/evaluations/{ev.id}"):
        page = client.get(path).text
        assert "txt.\u202eexe" in page, path
        _every_override_isolated(page, path)
    sign_in(client, "bidi@example.org")
    assert "\u2068Eve\u202e\u2069" in client.get("/account").text


def test_a_signed_in_users_404_keeps_the_navigation(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="lost@example.org", password=PASSWORD)
    sign_in(client, "lost@example.org")
    r = client.get("/nowhere/at/all")
    assert r.status_code == 404
    assert 'form action="/logout"' in r.text or 'action="/logout"' in r.text
    assert 'href="/login' not in r.text
    api = client.get("/api/v1/nowhere")
    assert api.status_code == 404
    assert api.json()["error"] == "NotFound"
