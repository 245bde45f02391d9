"""Issue 30.4 in Chromium, at 1280 px and at 390 px wide: the evaluation page is coherent
for a coarse viewer (the owner of a held-out evaluation).

At 17:54 UTC it said "Started 18:00 UTC" for an evaluation submitted at 17:48 and started at
17:50, "progress as it stood at 17:45" for something submitted after 17:45, "0 / 8" with no
estimate for the whole run, and never that times are rounded or why. Now: no time shown on
the page lies ahead of the moment it is read (a rounded time is shown as the step it falls
in), an evaluation submitted since the last tick says when its first update comes, the count
is the range the shown step allows, an estimate is there from the start (from the smoke
test's speed on the public sample until a step is shown), and the page says that times are
rounded and why.

The app runs under uvicorn on loopback in this process, so the clock every coarse answer
reads (:func:`szbench.disclosure.progress.now`) is set to 17:54 for the whole test.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from szbench.db import session_scope
from szbench.disclosure import progress as timing
from szbench.models import DatasetKind, EvaluationKind, EvaluationStatus
from tests.platform import factories as f

from .browsing import Site, Watched, fits_and_passes_axe, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
OWNER = "coarse-owner@example.org"
NOW = datetime(2026, 3, 2, 17, 54, tzinfo=UTC)  # the last tick was 17:45, the next is 18:00
RECORDINGS = 8
DASH = "\u2013"


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "now", lambda: NOW)


def _at(hour: int, minute: int) -> datetime:
    return NOW.replace(hour=hour, minute=minute)


def seed() -> dict[str, int]:
    """The site the tests walk (conftest's ``site`` serves it)."""
    with session_scope() as s:
        owner = f.user(s, email=OWNER, password=PASSWORD, name="Cora")
        sample = f.dataset_version(
            s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample"), version="1"
        )
        held = f.dataset_version(s, f.dataset(s, slug="held", title="Held out"), version="1")
        recs = [f.recording(s, held, duration_s=3600.0) for _ in range(RECORDINGS)]
        algorithm = f.algorithm(s, owner, name="tidy", title="Tidy detector")
        version = f.version(s, algorithm, version="1.0")
        # Its smoke test ran 10 minutes of public EEG in 15 s: 90 s per hour of EEG.
        smoke = f.evaluation(
            s, version, sample, kind=EvaluationKind.SMOKE_TEST, recordings_total=1,
            finished_at=_at(17, 40),
        )  # fmt: skip
        f.run(s, smoke, f.recording(s, sample, duration_s=600.0), wall_time_s=15.0)
        ids: dict[str, int] = {}
        # Submitted at 17:48, taken up at 17:50, two runs stored since: the case.
        fresh = f.evaluation(
            s, version, held, status=EvaluationStatus.RUNNING, recordings_total=RECORDINGS,
            recordings_done=2, created_at=_at(17, 48), started_at=_at(17, 50),
        )  # fmt: skip
        for rec in recs[:2]:
            f.run(s, fresh, rec, finished_at=_at(17, 52))
        ids["fresh"] = fresh.id
        # Started at 17:20; three runs stored by 17:45 (two quarters are 4 of 8), one after.
        busy = f.evaluation(
            s, f.version(s, algorithm, version="1.1"), held, status=EvaluationStatus.RUNNING,
            recordings_total=RECORDINGS, recordings_done=4, created_at=_at(17, 10),
            started_at=_at(17, 20),
        )  # fmt: skip
        for i, rec in enumerate(recs[:4]):
            f.run(s, busy, rec, finished_at=_at(17, 30 + 6 * i))
        ids["busy"] = busy.id
        # Over: started 16:02, finished 17:51 (rounded up, 18:00 is ahead of 17:54).
        done = f.evaluation(
            s, f.version(s, algorithm, version="0.9"), held, recordings_total=RECORDINGS,
            recordings_done=RECORDINGS, created_at=_at(16, 0), started_at=_at(16, 2),
            finished_at=_at(17, 51),
        )  # fmt: skip
        f.result(s, done, {"01": {"event_f1": 0.5}})
        for rec in recs:
            f.run(s, done, rec, finished_at=_at(17, 0))
        ids["done"] = done.id
        return ids


def _times_not_ahead(page: Any) -> None:
    """No moment in the page's times block lies after the moment it is read."""
    for moment in page.locator("#times time").evaluate_all(
        "els => els.map(e => e.getAttribute('datetime'))"
    ):
        assert datetime.fromisoformat(moment) <= NOW, moment


@pytest.mark.parametrize("width", WIDTHS)
def test_the_evaluation_page_is_coherent_for_a_coarse_viewer(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, OWNER)

    page.goto(f"{site.url}/evaluations/{site.ids['fresh']}")
    main = page.inner_text("main")
    # Submitted after 17:45: no "as it stood at 17:45", no start shown before 18:00.
    assert page.locator("#eval-state").inner_text() == "queued"
    count = page.inner_text("[data-field='count']")
    assert count == "Submitted after the last update: its first update is at 18:00 UTC."
    assert "Times are rounded" in page.inner_text("#coarse-note")
    assert "exact times would carry that data out" in page.inner_text("#coarse-note")
    assert "17:45" not in page.inner_text("#live-progress")
    assert "18:00" not in page.inner_text("#times")
    assert "Started\nnot as of 17:45 UTC" in page.inner_text("#times")
    # An estimate from the start: 8 hours of EEG at the smoke test's 90 s per hour.
    eta = page.inner_text("#eta")
    assert eta.startswith("Expected to take about 12 min"), eta
    assert "smoke test on the public sample" in eta
    _times_not_ahead(page)
    assert "progress as it stood" not in main
    fits_and_passes_axe(page, "fresh evaluation")

    page.goto(f"{site.url}/evaluations/{site.ids['busy']}")
    assert page.locator("#eval-state").inner_text() == "running"
    # Three had run by 17:45: a quarter is 2 of 8, so 2 to 3 (an en dash between).
    count = page.inner_text("[data-field='count']")
    assert count == f"2{DASH}3 of 8 recordings run as of 17:45 UTC.", count
    assert "between 2026-03-02 17:15 and 17:30 UTC" in page.inner_text("#times")
    eta = page.inner_text("#eta")
    # A quarter in the 15 min from the (rounded) 17:30 start to 17:45: three more quarters.
    assert eta == (
        "Expected to finish around 18:30 UTC: an estimate from the share of recordings "
        "done since the start."
    )
    _times_not_ahead(page)
    fits_and_passes_axe(page, "running evaluation")

    page.goto(f"{site.url}/evaluations/{site.ids['done']}")
    assert page.locator("#eval-state").inner_text() == "done"
    times = page.inner_text("#times")
    assert "between 2026-03-02 16:00 and 16:15 UTC" in times
    # Finished at 17:51: after the last tick; the step's end (18:00) is still ahead.
    assert "Finished\nafter 2026-03-02 17:45 UTC" in times
    _times_not_ahead(page)
    assert "exact times would tell how long the algorithm ran" in page.inner_text("#rounded-note")
    fits_and_passes_axe(page, "finished evaluation")

    page.goto(f"{site.url}/submissions")
    row = page.locator(f"tr[data-evaluation-id='{site.ids['busy']}']")
    assert row.locator("[data-field='progress-text']").inner_text() == f"2{DASH}3 / 8"
    fresh_row = page.locator(f"tr[data-evaluation-id='{site.ids['fresh']}']")
    assert fresh_row.locator("[data-field='status']").inner_text() == "queued"
    assert fresh_row.locator("[data-field='progress-text']").inner_text() == "0 / 8"
    fits_and_passes_axe(page, "submissions")
