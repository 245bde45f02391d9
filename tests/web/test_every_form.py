"""Issue 30.5: every form says what is wrong in plain words under its field.

The test walks every page that has a form a person fills in (signed out, as a researcher and
as an admin), finds each POST form with a field to type into, and sends it with a value that
no field takes (too long for any field, in no field's pattern). Whatever the form answers,
its page must not show a validator's phrase (``String should match pattern``, ``Field
required``, ``body.name: ...``) nor an internal field name (``closes_at``,
``(confirm_public)``) as text; a refusal comes back as the form itself, its fields as typed,
with the message under a field (``field-error``) or above the form, never as the separate
error page. The submit page (a script) is walked in Chromium by
tests/web/test_journey_browser.py::test_the_submit_page_says_what_is_wrong_under_each_field.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import DatasetKind, Role, Visibility
from tests.platform import factories as f

from .conftest import PASSWORD, sign_in

#: What validators and programs say, never a person: pydantic's messages, the API's
#: locations, Python's reprs of them.
VALIDATOR_PHRASES = (
    "String should",
    "Input should",
    "Field required",
    "should match pattern",
    "should have at most",
    "should have at least",
    "valid integer",
    "Value error",
    "validation error",
    "body.",
    "query.",
    "Extra inputs",
    "BadRequest",
    "ValidationError",
)
#: A value no field of any form takes: longer than every field's limit (descriptions are
#: capped at 20,000 characters) and in no field's pattern (it starts with a space and holds
#: characters no short name, version, address, date or number has).
JUNK = " <no field takes this> " + "?" * 21_000

_FORM = re.compile(r"<form\b([^>]*)>(.*?)</form>", re.S)
_ATTR = re.compile(r'(\w[\w-]*)="([^"]*)"')
_INPUT = re.compile(r"<(input|textarea|select)\b([^>]*)>", re.S)
_TYPED = {"text", "email", "password", "url", "search", "datetime-local", "number", "tel", ""}
#: Forms whose POST ends the walk's session or starts work elsewhere: never sent.
_NOT_SENT = ("/logout",)


@dataclass
class Form:
    page: str
    action: str
    fields: dict[str, str]
    typed: list[str]


def visible_text(page: str) -> str:
    """What a person reads of ``page``: its text without tags, scripts and attributes."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def forms_of(page: str, url: str) -> list[Form]:
    """The POST forms of ``page`` that have a field to type into."""
    found = []
    for attrs, body in _FORM.findall(page):
        tag = dict(_ATTR.findall(attrs))
        if tag.get("method", "get").lower() != "post" or tag.get("action", "") in _NOT_SENT:
            continue
        fields: dict[str, str] = {}
        typed: list[str] = []
        for kind, raw in _INPUT.findall(body):
            a = dict(_ATTR.findall(raw))
            name = a.get("name")
            if not name:
                continue
            if kind == "select":
                continue  # a person picks one of its options: sent as the form's default
            if kind == "input" and a.get("type", "") not in _TYPED:
                if a.get("type") in ("hidden", "radio") and name not in fields:
                    fields[name] = html.unescape(a.get("value", ""))
                continue
            typed.append(name)
            fields[name] = JUNK
        if typed:
            found.append(Form(url, html.unescape(tag.get("action", url)), fields, typed))
    return found


def internal_names(page: str) -> set[str]:
    """The names of the page's form fields that are not words (``closes_at``)."""
    names = {dict(_ATTR.findall(raw)).get("name", "") for _, raw in _INPUT.findall(page)}
    return {n for n in names if "_" in n}


def _walk(client: TestClient, pages: list[str]) -> list[str]:
    """Send every typed form of ``pages`` with :data:`JUNK`; the problems found."""
    problems: list[str] = []
    for url in pages:
        page = client.get(url)
        assert page.status_code == 200, (url, page.status_code)
        found = forms_of(page.text, url)
        assert found, f"{url} has no form to walk"
        for form in found:
            # A fresh copy of the page for each form: the CSRF token, and a page that an
            # earlier form changed.
            fresh = client.get(url).text
            token = re.search(r'name="csrf_token" value="([^"]+)"', fresh)
            data = {**form.fields, "csrf_token": token.group(1) if token else ""}
            r = client.post(form.action, data=data, follow_redirects=True)
            where = f"{url} -> {form.action} ({', '.join(form.typed)})"
            text = visible_text(r.text)
            for phrase in VALIDATOR_PHRASES:
                if phrase in text:
                    problems.append(f"{where}: shows {phrase!r}")
            for name in internal_names(r.text) | internal_names(page.text):
                if name != "csrf_token" and name in text:
                    problems.append(f"{where}: shows the field name {name!r}")
            if r.status_code >= 400:
                if 'class="field-error"' not in r.text and 'role="alert"' not in r.text:
                    problems.append(f"{where}: {r.status_code} without a message by the form")
                if f'action="{form.action}"' not in r.text:
                    problems.append(f"{where}: {r.status_code} answered by another page")
    return problems


def test_signed_out_forms(client: TestClient, settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("SZBENCH_ALLOW_SIGNUP", "true")
    # With mail on, "Forgot your password?" has a form (without it: ask an admin). Nothing
    # is sent: no address is valid here.
    settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
    settings_env.setenv("SZBENCH_SMTP_PORT", "9")
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    get_settings.cache_clear()
    _assert_plain(_walk(client, ["/signup", "/login", "/password/forgot"]))


def test_a_researchers_forms(client: TestClient, db_session: Session) -> None:
    user = f.user(db_session, email="walker@example.org", password=PASSWORD, name="Walker")
    algo = f.algorithm(db_session, user, name="walked", visibility=Visibility.PRIVATE)
    sign_in(client, "walker@example.org")
    r = client.post(
        "/teams", data={"name": "Walkers", "csrf_token": _token(client, "/teams")},
        follow_redirects=True,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    team_page = str(r.url).split("?")[0].removeprefix("http://testserver")
    assert team_page.startswith("/teams/"), team_page
    pages = [
        "/account",
        "/password",
        "/tokens",
        "/teams",
        team_page,
        "/account/notifications",
        f"/algorithms/{algo.id}/edit",
    ]
    _assert_plain(_walk(client, pages))


def test_an_admins_forms(client: TestClient, db_session: Session) -> None:
    f.user(db_session, Role.ADMIN, email="walking-admin@example.org", password=PASSWORD)
    ds = f.dataset(db_session, DatasetKind.HELD_OUT, slug="walked-data")
    f.dataset_version(db_session, ds, version="v1")
    f.phase(db_session, slug="walked-phase")
    sign_in(client, "walking-admin@example.org")
    _assert_plain(_walk(client, ["/admin/datasets", "/admin/phases", "/admin/users"]))


def test_the_walk_finds_what_it_looks_for() -> None:
    """The checks themselves: validator wording and a field's name are found in a page's
    text, not in its attributes."""
    page = (
        '<form method="post" action="/x"><input name="closes_at" value="a">'
        '<input type="hidden" name="csrf_token" value="t"></form>'
        "<p>closes_at: String should match pattern</p>"
    )
    assert [f.typed for f in forms_of(page, "/x")] == [["closes_at"]]
    assert internal_names(page) == {"closes_at", "csrf_token"}
    text = visible_text(page)
    assert "closes_at" in text
    assert "String should" in text
    assert "name=" not in text


def _assert_plain(problems: list[str]) -> None:
    assert not problems, "\n".join(problems)


def _token(client: TestClient, url: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get(url).text)
    assert found
    return found.group(1)
