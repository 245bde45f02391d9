"""Issue 16 points 1, 2, 11 and 14 in Chromium, at 1280 px and at 390 px wide: failed and
duplicate entries set apart on the leaderboard (and the toggle that shows them), the home
page's counts, an evaluation's times, estimate and "scoring" state, the admin overview's
failed count, and error pages that keep the signed-in navigation and speak plainly.

The app runs under uvicorn on loopback on a small seeded site (the real PostgreSQL, no
worker); every page is watched for console errors, and the pages checked must pass
axe-core and not need sideways scrolling at either width.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from szbench.db import session_scope
from szbench.models import DatasetKind, EvaluationStatus, Role, RunOutcome
from tests.platform import factories as f

from .browsing import Site, Watched, fits_and_passes_axe, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
ADMIN = "hb-admin@example.org"
OWNER = "hb-owner@example.org"


def seed() -> dict[str, int]:
    """The site the tests walk (conftest's ``site`` serves it)."""
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Ada")
        owner = f.user(s, email=OWNER, password=PASSWORD, name="Olga")
        ds = f.dataset(s, DatasetKind.HELD_OUT, slug="held", title="Held out")
        dv = f.dataset_version(s, ds, version="v1")
        recs = [f.recording(s, dv) for _ in range(3)]
        digest = "sha256:" + "ef" * 32
        early = datetime.now(UTC) - timedelta(days=1)
        ids: dict[str, int] = {}
        for name, outcome, f1, extra in (
            ("steady", RunOutcome.OK, 0.5, {"image_digest": digest, "created_at": early}),
            ("crashy", RunOutcome.CRASHED, 0.0, {}),
            ("copycat", RunOutcome.OK, 0.7, {"image_digest": digest}),
        ):
            algo = f.algorithm(s, owner, name=name, title=name.title())
            version = f.version(s, algo, version="1.0", **extra)
            ended = early + timedelta(minutes=50)
            ev = f.evaluation(s, version, dv, started_at=early, finished_at=ended)
            f.result(s, ev, {"01": {"event_f1": f1, "event_sensitivity": f1}})
            for rec in recs:
                f.run(s, ev, rec, outcome=outcome)
            ids[name] = ev.id
        waiting = f.evaluation(
            s, f.version(s, f.algorithm(s, owner, name="waiting")), dv,
            status=EvaluationStatus.RUNNING, recordings_total=3, recordings_done=3,
            started_at=early,
        )  # fmt: skip
        # Run long before the progress clock's last tick, so even the coarse view the owner
        # gets on held-out data shows every recording run.
        for rec in recs:
            f.run(s, waiting, rec, finished_at=early + timedelta(minutes=40))
        running = f.evaluation(
            s, f.version(s, f.algorithm(s, owner, name="busy")), dv,
            status=EvaluationStatus.RUNNING, recordings_total=3, recordings_done=1,
            started_at=datetime.now(UTC) - timedelta(hours=2),
        )  # fmt: skip
        f.run(s, running, recs[0], finished_at=datetime.now(UTC) - timedelta(hours=1))
        ids["waiting"], ids["running"] = waiting.id, running.id
        return ids


@pytest.mark.parametrize("width", WIDTHS)
def test_failed_and_duplicate_entries_are_set_apart(watched: Watched, site: Site) -> None:
    page = watched.page()
    page.goto(f"{site.url}/")
    counts = page.locator("table.data tbody tr").first.locator("td").last
    assert counts.inner_text() == "1 (+2 unranked)"
    fits_and_passes_axe(page)
    page.get_by_role("link", name="Held out").click()
    page.wait_for_load_state()
    rows = page.locator("table.leaderboard tbody tr")
    assert rows.count() == 1  # as the home page said
    assert "Steady" in rows.first.inner_text()
    assert "not ranked on this dataset" in page.locator("#failure-rule").inner_text()
    fits_and_passes_axe(page)
    page.get_by_role("link", name="Show the 2 unranked entries").click()
    page.wait_for_load_state()
    assert rows.count() == 3
    crashy = rows.filter(has_text="Crashy")
    assert crashy.locator(".failed-badge").inner_text() == "3 failed recordings, not ranked"
    # A dash for the eye, "unranked" for a screen reader.
    assert crashy.locator("td").first.inner_text().split() == ["—", "unranked"]
    copy = rows.filter(has_text="Copycat")
    assert copy.locator(".duplicate-badge").is_visible()
    assert "same image as Steady" not in copy.inner_text()  # names the algorithm, not title
    assert "same image as steady 1.0, submitted earlier" in copy.inner_text()
    fits_and_passes_axe(page)
    # The filter form's checkbox does the same without the link (and without JavaScript).
    page.get_by_role("link", name="Hide the 2 unranked entries").click()
    page.wait_for_load_state()
    assert rows.count() == 1
    page.get_by_label("Show unranked entries").check()
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()
    assert rows.count() == 3


@pytest.mark.parametrize("width", WIDTHS)
def test_times_estimate_and_scoring_state(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, OWNER)
    page.goto(f"{site.url}/evaluations/{site.ids['waiting']}")
    assert page.locator("#eval-state").inner_text() == "scoring"
    assert page.get_by_role("button", name="Cancel").count() == 0
    assert "3 of 3 recordings run as of " in page.inner_text("main")
    assert "all run, computing the scores" in page.inner_text("main")
    page.goto(f"{site.url}/evaluations/{site.ids['running']}")
    assert page.locator("#eval-state").inner_text() == "running"
    eta = page.locator("#eta").inner_text()
    # Held-out data: the owner's coarse view shows a quarter done (1 of 3 run an hour ago)
    # and estimates from that share and the rounded start, never from run times.
    # As of the tick, so it does not move before the next one: a moment, not a countdown.
    assert eta.startswith("Expected to finish around ")
    assert "an estimate from the share of recordings done since the start" in eta
    assert page.get_by_role("button", name="Cancel").count() == 1
    page.goto(f"{site.url}/evaluations/{site.ids['crashy']}")
    times = page.locator("#times").inner_text()
    for label in ("Submitted", "Started", "Finished"):
        assert label in times
    assert " UTC" in page.locator("#times dd").nth(2).inner_text()
    assert "3 failed recordings: not a normal result" in page.inner_text("main")
    fits_and_passes_axe(page)
    page.goto(f"{site.url}/submissions")
    row = page.locator(f"tr[data-evaluation-id='{site.ids['waiting']}']")
    assert row.locator("[data-field='status']").inner_text() == "scoring"
    assert row.get_by_role("button", name=f"Cancel evaluation {site.ids['waiting']}").count() == 0
    fits_and_passes_axe(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_admin_overview_and_error_pages(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, ADMIN)
    page.goto(f"{site.url}/admin")
    counts = page.locator("ul.counts").inner_text()
    assert "failed 1" in " ".join(counts.split())
    assert "finished with failed recordings" in page.locator("#incomplete-note").inner_text()
    fits_and_passes_axe(page)
    watched.allowed.append("status of 4")  # the error pages answer 4xx, as they should
    page.goto(f"{site.url}/leaderboards/held?order=up")
    main = page.inner_text("main")
    assert "The link gives order as 'up', which this page cannot use" in main
    assert "query.order" not in main
    # The signed-in navigation stays (collapsed behind "Menu" on a phone).
    assert page.locator("nav a[href='/admin']").count() == 1
    assert page.locator("nav a[href='/submissions']").count() == 1
    assert page.locator("#account-link").text_content() == "Ada (admin)"
    fits_and_passes_axe(page)
    page.goto(f"{site.url}/algorithms/abc")
    assert "The address gives algorithm_id as 'abc'" in page.inner_text("main")
    assert page.locator("nav a[href='/submissions']").count() == 1
