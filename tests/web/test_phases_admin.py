"""Phases in the web admin (create with dates, quota and disclosure; edit; close; publish)
and the deadline and remaining quota on the submit page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.models import Disclosure, Phase, Role
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in


def _admin(client: TestClient, db_session: Session) -> None:
    f.user(db_session, role=Role.ADMIN, email="phase-admin@example.org", password=PASSWORD)
    sign_in(client, "phase-admin@example.org")


def test_admin_creates_edits_closes_and_publishes_a_phase(
    client: TestClient, db_session: Session
) -> None:
    _admin(client, db_session)
    r = post_form(
        client,
        "/admin/phases",
        "/admin/phases",
        {
            "slug": "final",
            "title": "Final round",
            "opens_at": "2026-01-01T00:00",
            "closes_at": "2099-06-30T12:00",
            "submission_quota": "3",
            "disclosure": "subject",
            "hidden": "true",
        },
    )
    assert r.status_code == 200, r.text
    assert "Phase final created." in r.text
    assert "Open until 2099-06-30 12:00 UTC." in r.text
    phase = db_session.scalar(select(Phase).where(Phase.slug == "final"))
    assert phase is not None
    db_session.refresh(phase)
    assert phase.closes_at == datetime(2099, 6, 30, 12, 0, tzinfo=UTC)
    assert phase.submission_quota == 3
    assert phase.disclosure == Disclosure.SUBJECT
    assert phase.hidden is True
    # A deadline before the opening is refused with the field named; nothing changes.
    r = post_form(
        client, "/admin/phases", "/admin/phases/final/edit",
        {"opens_at": "2026-01-01T00:00", "closes_at": "2025-01-01T00:00", "submission_quota": "3"},
    )  # fmt: skip
    assert r.status_code == 400
    # Under the field, in the form's words, in that phase's own card (what was typed kept).
    assert re.search(
        r'<p class="field-error" id="phase-\d+-closes-at-error">2025-01-01 00:00 UTC is not after '
        r"the opening time 2026-01-01 00:00 UTC</p>",
        r.text,
    )
    assert 'value="2025-01-01T00:00"' in r.text
    r = post_form(
        client, "/admin/phases", "/admin/phases/final/edit",
        {"opens_at": "", "closes_at": "2099-07-01T00:00", "submission_quota": ""},
    )  # fmt: skip
    assert "Phase final updated." in r.text
    db_session.refresh(phase)
    assert phase.submission_quota is None
    assert phase.opens_at is None
    r = post_form(client, "/admin/phases", "/admin/phases/final/close")
    assert "Phase final is closed for submissions." in r.text
    assert "Phase &#39;final&#39; is closed for submissions." in r.text
    r = post_form(client, "/admin/phases", "/admin/phases/final/reopen")
    assert "taking submissions" in r.text
    r = post_form(client, "/admin/phases", "/admin/phases/final/publish", {"back": "phases"})
    assert "Phase final: 0 evaluations published." in r.text
    assert str(r.url).split("?")[0].endswith("/admin/phases")


def test_bad_form_values_sit_under_their_field_in_plain_words(
    client: TestClient, db_session: Session
) -> None:
    _admin(client, db_session)
    for data, field, expected in (
        ({"slug": "x", "closes_at": "tomorrow"}, "closes-at", "&#39;tomorrow&#39; is not a date"),
        ({"slug": "x", "submission_quota": "-1"}, "submission-quota", "&#39;-1&#39; is not a"),
        ({"slug": "Bad Slug"}, "slug", "Use lower-case letters, digits"),
        ({"slug": "x", "disclosure": "all"}, "disclosure", "Unknown level &#39;all&#39;"),
        (
            {"slug": "x", "opens_at": "2099-07-02T00:00", "closes_at": "2099-07-01T00:00"},
            "closes-at",
            "is not after the opening time",
        ),
    ):
        r = post_form(client, "/admin/phases", "/admin/phases", data)
        assert r.status_code == 400, data
        assert f'<p class="field-error" id="{field}-error">' in r.text, data
        assert expected in r.text, data
        assert "closes_at" not in _visible(r.text), data
        assert "opens_at" not in _visible(r.text), data
        assert 'value="x"' in r.text or data["slug"] != "x"  # what was typed stays
    assert db_session.scalar(select(Phase).where(Phase.slug == "x")) is None


def _visible(page: str) -> str:
    """The page's text without its tags (names in attributes are not shown)."""
    return re.sub(r"<[^>]*>", " ", page)


def test_non_admins_cannot_reach_the_phase_admin(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="phase-user@example.org", password=PASSWORD)
    sign_in(client, "phase-user@example.org")
    assert client.get("/admin/phases").status_code == 403


def test_the_submit_page_shows_deadlines_and_remaining_quota(
    client: TestClient, db_session: Session
) -> None:
    now = datetime.now(UTC)
    deadline = (now + timedelta(days=3)).replace(second=0, microsecond=0)
    f.phase(db_session, slug="round-1", title="Round 1", submission_quota=2, closes_at=deadline)
    f.phase(db_session, slug="round-0", closes_at=now - timedelta(days=1))
    f.phase(db_session, slug="round-2", opens_at=now + timedelta(days=1))
    f.phase(db_session, slug="open-ended")
    user = f.user(db_session, email="phase-sub@example.org", password=PASSWORD)
    f.version(
        db_session,
        f.algorithm(db_session, user),
        phase_id=db_session.scalar(select(Phase.id).where(Phase.slug == "round-1")),
    )
    sign_in(client, "phase-sub@example.org")
    page = client.get("/submit").text
    stamp = deadline.strftime("%Y-%m-%d %H:%M")
    assert (
        f"Phase <strong>Round 1</strong>:\n  deadline {stamp} UTC; 1 of 2 submissions left" in page
    )
    assert f'<option value="round-1">Round 1 (deadline {stamp} UTC)</option>' in page
    assert "Phase <strong>open-ended</strong>:\n  no deadline." in page
    # Phases past their deadline or not yet open are not offered.
    assert "round-0" not in page
    assert "round-2" not in page
