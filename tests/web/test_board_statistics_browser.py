"""Issue 23 points 4 and 5 in Chromium, at 1280 px and at 390 px wide: on a held-out dataset
disclosed at the aggregate level, a newcomer (signed in, not an admin) compares two entries
and gets the paired test without per-subject values, or is told why not and the smallest
p-value so few subjects can give; the leaderboard says why an entry shows no interval and
no rank stability instead of a bare dot and "n/a".

The app runs under uvicorn on loopback on a small seeded site (the real PostgreSQL, no
worker); every page is watched for console errors, must pass axe-core and must not need
sideways scrolling at either width.
"""

from __future__ import annotations

import pytest

from szbench.db import session_scope
from szbench.models import DatasetKind, Disclosure, Role
from tests.platform import factories as f

from .browsing import Site, Watched, fits_and_passes_axe, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
NEWCOMER = "bs-newcomer@example.org"

#: Twelve subjects each (the minimum for intervals and tests is 10), and one entry on four.
TWELVE = [f"{i:02d}" for i in range(1, 13)]
ENTRIES = {
    "alpha": {s: 0.55 + 0.03 * i for i, s in enumerate(TWELVE)},
    "beta": {s: 0.45 + 0.011 * i for i, s in enumerate(TWELVE)},
    "gamma": {s: 0.3 + 0.1 * i for i, s in enumerate(TWELVE[:4])},
}


def seed() -> dict[str, int]:
    """The site the tests walk (conftest's ``site`` serves it)."""
    with session_scope() as s:
        f.user(s, Role.ADMIN, email="bs-admin@example.org", password=PASSWORD)
        f.user(s, email=NEWCOMER, password=PASSWORD, name="Nina")
        ds = f.dataset(
            s, DatasetKind.HELD_OUT, slug="agg", title="Aggregate", disclosure=Disclosure.AGGREGATE
        )
        dv = f.dataset_version(s, ds, version="v1")
        ids = {}
        for name, values in ENTRIES.items():
            owner = f.user(s, name=name.title() + " Lab")
            version = f.version(s, f.algorithm(s, owner, name=name), version="1.0")
            ev = f.evaluation(s, version, dv)
            f.result(s, ev, {k: {"event_f1": v, "event_sensitivity": v} for k, v in values.items()})
            ids[name] = ev.id
        return ids


@pytest.mark.parametrize("width", WIDTHS)
def test_the_board_says_why_statistics_are_withheld(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, NEWCOMER)
    page.goto(f"{site.url}/leaderboards/agg")
    note = page.locator("#stats-withheld")
    assert note.is_visible()
    text = note.inner_text()
    assert "released from 10 subjects on (this result has 4" in text
    assert "withheld for 1 of the 3 entries shown" in page.locator("#stats-note").inner_text()
    rows = {
        row.locator("td").nth(1).locator("a").inner_text(): row
        for row in page.locator("table.leaderboard tbody tr").all()
    }
    gamma, alpha = rows["Gamma"], rows["Alpha"]
    assert gamma.locator("td").last.inner_text() == "withheld"
    assert gamma.locator("span.ci").count() == 0
    # The twelve-subject entries show their intervals and rank stability, rounded.
    assert alpha.locator("span.ci").first.inner_text().startswith("[")
    assert alpha.locator("td").last.inner_text().startswith("median")
    fits_and_passes_axe(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_newcomer_compares_at_the_aggregate_level(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, NEWCOMER)
    page.goto(f"{site.url}/leaderboards/agg")
    page.locator("#compare-link").click()
    page.wait_for_load_state()
    form = page.locator("#compare-form")
    form.locator(f"input[name=evaluation][value='{site.ids['alpha']}']").check()
    form.locator(f"input[name=evaluation][value='{site.ids['beta']}']").check()
    form.get_by_role("button", name="Compare").click()
    page.wait_for_load_state()
    # The test over twelve subjects, rounded, and why there are no per-subject values.
    assert "discloses aggregate figures only" in page.locator("#compare-hidden").inner_text()
    cells = page.locator("#paired-tests tbody tr").first.locator("td")
    assert cells.count() == 6
    # Every subject better under alpha: p = 2/2^12, released rounded up to 0.01.
    assert cells.nth(4).inner_text() == "0.01"
    assert cells.nth(5).inner_text() == "12"
    assert " to " in cells.nth(3).inner_text()
    assert page.locator("#subject-table").count() == 0
    fits_and_passes_axe(page)
    # With the four-subject entry: no test, why, and the smallest p four subjects can give.
    page.goto(f"{site.url}/compare?evaluation={site.ids['alpha']}&evaluation={site.ids['gamma']}")
    withheld = page.locator("#paired-tests .test-withheld")
    assert withheld.count() == 1
    reason = withheld.inner_text()
    assert "4 subjects have a value under both" in reason
    assert "smallest p-value this test can give is 0.125" in reason
    fits_and_passes_axe(page)
