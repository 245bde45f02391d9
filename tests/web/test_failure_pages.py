"""Issue 16 points 1, 2, 11 and 14 on the pages (served HTML; tests/web/test_honest_boards.py
walks the same in Chromium): failure badges and the unranked toggle, duplicates, times and
the "scoring" state, the admin overview's failed count, error pages, the home counts."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import EvaluationStatus, FailedRecordings, Role, RunOutcome
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in


def _seed(s: Session) -> dict[str, int]:
    f.user(s, Role.ADMIN, email="fp-admin@example.org", password=PASSWORD, name="Ada")
    owner = f.user(s, email="fp-owner@example.org", password=PASSWORD, name="Olga")
    ds = f.dataset(s, slug="fp-held", title="Held")
    dv = f.dataset_version(s, ds, version="1")
    recs = [f.recording(s, dv) for _ in range(2)]
    ids: dict[str, int] = {}
    digest = "sha256:" + "cd" * 32
    early = datetime.now(UTC) - timedelta(days=1)
    for name, outcome, f1, extra in (
        ("steady", RunOutcome.OK, 0.5, {"image_digest": digest, "created_at": early}),
        ("crashy", RunOutcome.CRASHED, 0.0, {}),
        ("copycat", RunOutcome.OK, 0.6, {"image_digest": digest}),
    ):
        algo = f.algorithm(s, owner, name=name)
        ev = f.evaluation(s, f.version(s, algo, **extra), dv,
                          started_at=early, finished_at=early + timedelta(hours=1))  # fmt: skip
        f.result(s, ev, {"01": {"event_f1": f1, "event_sensitivity": f1, "event_fp_rate": 0.0}})
        for rec in recs:
            f.run(s, ev, rec, outcome=outcome)
        ids[name] = ev.id
        ids[f"{name}-algo"] = algo.id
    scoring = f.evaluation(
        s, f.version(s, f.algorithm(s, owner, name="waiting")), dv,
        status=EvaluationStatus.RUNNING, recordings_total=3, recordings_done=3, started_at=early,
    )  # fmt: skip
    # Its runs finished before the progress clock's last tick: a non-admin's coarse view of
    # this held-out evaluation sees every recording run too.
    for rec in [*recs, f.recording(s, dv)]:
        f.run(s, scoring, rec, finished_at=early + timedelta(hours=1))
    ids["scoring"] = scoring.id
    return ids


def test_leaderboard_page_sets_failures_and_duplicates_apart(
    client: TestClient, db_session: Session
) -> None:
    ids = _seed(db_session)
    page = client.get("/leaderboards/fp-held").text
    assert "entries with failed recordings are not ranked on this dataset" in page
    assert f"?evaluation={ids['steady']}" in page
    assert f"?evaluation={ids['crashy']}" not in page
    assert f"?evaluation={ids['copycat']}" not in page
    assert "Show the 2 unranked entries" in page
    apart = client.get("/leaderboards/fp-held?unranked=true").text
    assert "2 failed recordings, not ranked" in apart
    assert 'class="badge warn duplicate-badge">duplicate</span>' in apart
    assert re.search(r"same image as <a [^>]*>steady [^<]+</a>, submitted earlier", apart)
    assert "Hide the 2 unranked entries" in apart
    # The home page counts what the leaderboard ranks by default, and what it sets apart.
    home = client.get("/").text
    assert re.search(r'<td class="num">1 <span class="muted">\(\+2 unranked\)</span></td>', home)
    # The algorithm page says that the copy is the same image as an earlier submission.
    copy = client.get(f"/algorithms/{ids['copycat-algo']}").text
    assert "is the same image (digest) as" in copy
    crashy = client.get(f"/algorithms/{ids['crashy-algo']}").text
    assert 'failed-badge">2 failed recordings</span>' in crashy
    assert "failed-badge" not in client.get(f"/algorithms/{ids['steady-algo']}").text


def test_no_detections_rule_is_shown_and_marks_ranked_failures(
    client: TestClient, db_session: Session
) -> None:
    ids = _seed(db_session)
    sign_in(client, "fp-admin@example.org")
    r = post_form(
        client,
        "/admin/datasets",
        "/admin/datasets/fp-held/failed-recordings",
        {"failed_recordings": "no_detections"},
    )
    assert "scores failed recordings as no detections" in r.text
    page = client.get("/leaderboards/fp-held").text
    assert "is scored as no detections, the SzCORE rule for a missing output file" in page
    assert "2 failed recordings, scored as no detections" in page
    assert f"?evaluation={ids['crashy']}" in page
    bad = post_form(
        client,
        "/admin/datasets",
        "/admin/datasets/fp-held/failed-recordings",
        {"failed_recordings": "zero"},
    )
    assert bad.status_code == 400
    assert "failed_recordings: unknown rule" in bad.text
    assert FailedRecordings.NO_DETECTIONS.value in client.get("/api/v1/datasets/fp-held").text


def test_evaluation_page_times_scoring_and_failures(
    client: TestClient, db_session: Session
) -> None:
    ids = _seed(db_session)
    sign_in(client, "fp-owner@example.org")
    crashed = client.get(f"/evaluations/{ids['crashy']}").text
    assert "2 failed recordings: not a normal result" in crashed
    assert "left off the leaderboard's ranking" in crashed
    # Held-out data for its owner: each time as the step of the progress clock it falls in.
    assert re.search(r"<dt>Started</dt><dd>between <time datetime=\"[^\"]+\">\d{4}-\d\d", crashed)
    assert re.search(r"<dt>Finished</dt><dd>between <time", crashed)
    waiting = client.get(f"/evaluations/{ids['scoring']}").text
    assert 'id="eval-state" data-field="state">scoring</span>' in waiting
    assert "all run, computing the scores" in waiting
    assert f'action="/evaluations/{ids["scoring"]}/cancel"' not in waiting
    listing = client.get("/submissions").text
    assert f'action="/evaluations/{ids["scoring"]}/cancel"' not in listing
    polled = client.get("/submissions/progress.json").json()
    states = {e["id"]: e["status"] for e in polled["evaluations"]}
    assert states[ids["scoring"]] == "scoring"


@pytest.mark.slow
def test_admin_overview_counts_done_with_failures_as_failed(
    client: TestClient, db_session: Session
) -> None:
    ids = _seed(db_session)
    sign_in(client, "fp-admin@example.org")
    page = client.get("/admin").text
    assert re.search(r'status-failed">failed</span> 1</li>', page)
    assert re.search(r'status-done">done</span> 2</li>', page)
    assert 'id="incomplete-note"' in page
    assert f'<a href="/evaluations/{ids["crashy"]}">' in page


def test_error_pages_keep_the_navigation_and_speak_plainly(
    client: TestClient, db_session: Session
) -> None:
    _seed(db_session)
    sign_in(client, "fp-owner@example.org")
    bad = client.get("/leaderboards/fp-held?order=up")
    assert bad.status_code == 400
    assert "The link gives order as &#39;up&#39;, which this page cannot use" in bad.text
    assert "query.order" not in bad.text
    missing = client.get("/algorithms/999999")
    for page in (bad, missing):
        assert 'href="/submissions"' in page.text  # the signed-in navigation
        assert 'id="account-link">Olga</a>' in page.text


def test_admin_phases_page_sets_a_phase_override(client: TestClient, db_session: Session) -> None:
    _seed(db_session)
    phase = f.phase(db_session, slug="fp-round")
    sign_in(client, "fp-admin@example.org")
    action = "/admin/phases/fp-round/failed-recordings"
    r = post_form(client, "/admin/phases", action, {"failed_recordings": "no_detections"})
    assert "Phase fp-round: failed recordings now follow no_detections." in r.text
    assert "Failed recordings: scored as no detections." in r.text
    db_session.refresh(phase)
    assert phase.failed_recordings == FailedRecordings.NO_DETECTIONS
    r = post_form(client, "/admin/phases", action, {"failed_recordings": ""})
    assert "Failed recordings: each dataset&#39;s own rule." in r.text
    assert post_form(client, "/admin/phases", action, {"failed_recordings": "x"}).status_code == 400
