"""Issue 23.8 and the run-time side channel of issue 20: progress on held-out data.

A container decides how long it runs on each held-out recording, so a submitter who could
follow each recording's finish could read bits of the hidden data off the clock. A
non-admin follows a held-out evaluation coarsely (szbench.disclosure.progress.shown_progress):
two evaluations whose recordings take different times get the same answers at every moment
as long as they reach each quarter between the same two ticks of the progress clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.disclosure import bits
from szbench.disclosure import progress as timing
from szbench.evaluations import queries
from szbench.models import (
    DatasetKind,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Role,
    RunOutcome,
    User,
    VersionStatus,
)
from szbench.quotas import service as quotas
from tests.platform import factories as f

# A tick of the default 15 min clock.
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RECORDINGS = 4


def _running(s: Session, owner: User, finishes_min: list[float], **dataset: Any) -> Evaluation:
    ds = f.dataset(s, DatasetKind.HELD_OUT, **dataset)
    dv = f.dataset_version(s, ds)
    ev = f.evaluation(
        s, f.version(s, f.algorithm(s, owner)), dv,
        status=EvaluationStatus.RUNNING, recordings_total=RECORDINGS, started_at=T0,
    )  # fmt: skip
    for minutes in finishes_min:
        f.run(s, ev, f.recording(s, dv), finished_at=T0 + timedelta(minutes=minutes))
    return ev


def _answer(s: Session, ev: Evaluation, viewer: User, now: datetime) -> dict[str, Any]:
    """What ``viewer`` is told at ``now`` of ``ev`` (the worker has counted every run that
    finished by then)."""
    ev.recordings_done = sum(1 for r in ev.runs if r.finished_at and r.finished_at <= now)
    if ev.recordings_done == RECORDINGS:
        ev.status = EvaluationStatus.SCORING
    s.flush()
    progress = queries.progress(s, ev, viewer=viewer, now=now).model_dump()
    progress.pop("held_by")  # the platform's state, the same for both
    shown = queries.shown_progress(s, [ev], viewer=viewer, now=now)[ev.id][1]
    return {**progress, "shown": shown}


def test_a_submitter_cannot_tell_per_recording_durations(db_session: Session) -> None:
    s = db_session
    owner = f.user(s)
    admin = f.user(s, Role.ADMIN)
    # Same quarters within the same 15 min windows, very different durations per recording.
    quick = _running(s, owner, [1, 2, 16, 31])
    slow = _running(s, owner, [14, 14.5, 29, 44])
    differ = 0
    for minute in range(0, 50):
        now = T0 + timedelta(minutes=minute, seconds=30)
        a, b = _answer(s, quick, owner, now), _answer(s, slow, owner, now)
        assert a == b, minute
        assert a["detail"] == "coarse"
        assert a["recordings_done"] in (0, 1, 2, 3, 4)
        assert a["as_of"] == timing.progress_clock(now)
        full_a, full_b = _answer(s, quick, admin, now), _answer(s, slow, admin, now)
        differ += full_a["recordings_done"] != full_b["recordings_done"]
        assert full_a["detail"] == "full"
    # The admin's full answers do tell them apart: the test compares something that moves.
    assert differ > 10


def test_coarse_steps_and_rounded_times(db_session: Session) -> None:
    s = db_session
    owner = f.user(s)
    ev = _running(s, owner, [1, 2, 3])
    now = T0 + timedelta(minutes=20)
    answer = _answer(s, ev, owner, now)
    # Three of four ran within the first window: at the 12:15 tick, 3/4.
    assert (answer["recordings_done"], answer["fraction_done"]) == (3, 0.75)
    assert answer["state"] == "running"
    # The estimate rests on the shown figures only: a quarter left, 15 min for three; as of
    # the tick (12:15), so that it does not move before the next one.
    assert answer["estimate_basis"] == "share of recordings done since the start"
    assert answer["estimated_remaining_s"] == pytest.approx(900, abs=1)
    assert answer["estimated_finish_at"] == T0 + timedelta(minutes=30)
    assert answer["outcomes"] == {}
    assert answer["failed_recordings"] is None
    ev.status, ev.finished_at = EvaluationStatus.DONE, T0 + timedelta(minutes=47, seconds=3)
    s.flush()
    out = queries.to_out(ev, queries.shown_progress(s, [ev], viewer=owner)[ev.id])
    assert out.finished_at == T0 + timedelta(minutes=60)  # rounded up to the clock
    admin = f.user(s, Role.ADMIN)
    out = queries.to_out(ev, queries.shown_progress(s, [ev], viewer=admin)[ev.id])
    assert out.finished_at == T0 + timedelta(minutes=47, seconds=3)


def test_the_api_answers_coarse_progress_with_an_etag(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    # A day's clock: the two polls below see the same tick.
    settings_env.setattr(timing, "PROGRESS_STEP_S", 86400)
    s = db_session
    owner = f.user(s)
    ev = _running(s, owner, [1], disclosure=Disclosure.RECORDING)
    ev.recordings_done = 1
    s.flush()
    url = f"/api/v1/evaluations/{ev.id}/progress"
    r = client.get(url, headers=f.headers(s, owner))
    assert r.status_code == 200
    body = r.json()
    # One of four ran before the clock's last tick: a whole quarter.
    assert body["detail"] == "coarse"
    assert body["recordings_done"] == 1
    # Per-recording disclosure: still no run's outcome or row while it runs.
    assert body["outcomes"] == {}
    runs = client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=f.headers(s, owner))
    assert runs.status_code == 403
    assert "shown when it has finished" in runs.json()["detail"]
    again = client.get(url, headers={**f.headers(s, owner), "If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304
    listed = client.get("/api/v1/evaluations?mine=true", headers=f.headers(s, owner)).json()
    assert [e["recordings_done"] for e in listed["items"] if e["id"] == ev.id] == [1]
    admin = client.get(url, headers=f.headers(s, f.user(s, Role.ADMIN))).json()
    assert (admin["detail"], admin["recordings_done"]) == ("full", 1)


def test_public_sample_progress_is_full(db_session: Session) -> None:
    s = db_session
    owner = f.user(s)
    ds = f.dataset(s, DatasetKind.PUBLIC_SAMPLE)
    dv = f.dataset_version(s, ds)
    ev = f.evaluation(
        s, f.version(s, f.algorithm(s, owner)), dv,
        status=EvaluationStatus.RUNNING, recordings_total=4, recordings_done=1, started_at=T0,
    )  # fmt: skip
    answer = queries.progress(s, ev, viewer=owner)
    assert (answer.detail, answer.recordings_done) == ("full", 1)


def test_the_timing_bound_follows_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    default = bits.timing_bits_per_evaluation(recordings=100, run_timeout_s=900)
    monkeypatch.setattr(timing, "PROGRESS_STEP_S", 3600)
    coarser = bits.timing_bits_per_evaluation(recordings=100, run_timeout_s=900)
    assert coarser < default
    # Per-recording finishes seen to the second would be about 16 bits per recording.
    assert default < 100 * 16 / 10


def test_a_rejected_version_uses_no_held_out_slot(db_session: Session) -> None:
    s = db_session
    owner = f.user(s)
    algo = f.algorithm(s, owner)
    f.version(s, algo, status=VersionStatus.REJECTED)
    f.version(s, algo, status=VersionStatus.ACTIVE)
    assert quotas.held_out_usage(s, owner).used == 1
    assert quotas.submissions_usage(s, owner).used == 2


def test_smoke_rejection_is_one_clear_page(client: TestClient, db_session: Session) -> None:
    from tests.web.conftest import PASSWORD, sign_in

    s = db_session
    owner = f.user(s, email="smoke-owner@example.org", password=PASSWORD)
    algo = f.algorithm(s, owner, name="smoky")
    version = f.version(
        s, algo, status=VersionStatus.REJECTED,
        status_message="Smoke test failed (crashed): the container exited with code 1",
    )  # fmt: skip
    sample = f.dataset_version(s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE))
    smoke = f.evaluation(s, version, sample, kind=EvaluationKind.SMOKE_TEST, recordings_total=1)
    f.run(s, smoke, f.recording(s, sample), outcome=RunOutcome.CRASHED,
          submitter_message="exit code 1")  # fmt: skip
    sign_in(client, "smoke-owner@example.org")
    page = client.get(f"/evaluations/{smoke.id}").text
    assert 'id="smoke-rejected"' in page
    assert "It was rejected because the container exited with code 1 (crashed)." in page
    assert 'id="upload-fixed"' in page
    assert "hidden until published" not in page
    assert 'id="eval-state">rejected</span>' in page
    assert ">done</span>" not in page


def test_no_re_run_when_the_held_out_quota_is_spent(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    from tests.web.conftest import PASSWORD, sign_in

    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    s = db_session
    owner = f.user(s, email="quota-owner@example.org", password=PASSWORD)
    version = f.version(s, f.algorithm(s, owner))
    dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT))
    ev = f.evaluation(s, version, dv)
    sign_in(client, "quota-owner@example.org")
    page = client.get(f"/evaluations/{ev.id}").text
    assert f'action="/evaluations/{ev.id}/rerun"' not in page
    assert 'id="rerun-refused">No re-run: held-out evaluations: you have used all 1' in page
    listing = client.get("/submissions").text
    assert f'action="/evaluations/{ev.id}/rerun"' not in listing
    assert f'id="rerun-why-{ev.id}"' in listing
