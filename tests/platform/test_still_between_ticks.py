"""Issue 28.3: nothing an owner can read moves between two ticks of the progress clock.

A container chooses how long it runs on each held-out recording, so anything its owner can
read that changes when a run starts or ends (a status, a start time, a count, a worker's
host or GPU, an estimate) carries bits of the hidden data out at the moment it changes. The
test below walks every GET route of the API and every page (enumerated from the app, as
tests/platform/test_disclosure_routes.py does), as the signed-in owner, while a held-out
evaluation starts, its runs are stored one by one (hosts, GPUs, outcomes, a crash, counts)
and it reaches its scoring, all between two ticks: no answer may change by a byte. Across
the next tick the progress does move (the test compares something that can change).

The clock every coarse answer reads (:func:`szbench.disclosure.progress.now`) is set by the
test; the rows carry the moments the pipeline would have written.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.app import create_app
from szbench.disclosure import progress as timing
from szbench.leaderboards import snapshots
from szbench.models import (
    DatasetKind,
    Disclosure,
    EvaluationKind,
    EvaluationStatus,
    NotificationEvent,
    Role,
    RunOutcome,
)
from szbench.notifications import events, kinds
from szbench.web import (
    account,
    admin,
    algorithms,
    compare,
    datasets,
    federation,
    pages,
    submit_help,
    teams,
)
from szbench.web import (
    notifications as notification_pages,
)
from szbench.web import (
    snapshots as snapshot_pages,
)
from tests.platform import factories as f
from tests.web.conftest import PASSWORD, sign_in

EMAIL = "ticks-owner@example.org"
RECORDINGS = 8
#: Routes whose answers move between two polls with nothing changed but the polls
#: themselves, and why; they show nothing of any evaluation.
SELF_MOVING: dict[str, str] = {
    "/how-to-submit/starter.tar.gz": "the gzip header's time: built at each request",
}


class Clock:
    """The moment every coarse answer is computed at."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    # A tick of the default 15-minute clock, a while ago (the rows below are dated from it).
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    fake = Clock(now)
    monkeypatch.setattr(timing, "now", fake)
    return fake


def _routes() -> list[str]:
    app = create_app()
    api = {path for path, ops in app.openapi()["paths"].items() if "get" in ops}
    routers = (
        pages, compare, algorithms, account, admin, datasets, submit_help, snapshot_pages,
        notification_pages, teams, federation,
    )  # fmt: skip
    web = {
        route.path
        for module in routers
        for route in module.router.routes
        if isinstance(route, APIRoute) and "GET" in route.methods
    }
    return sorted(api | web)


def _urls(values: dict[str, Any], extra: list[str]) -> list[str]:
    urls = []
    for path in _routes():

        def fill(match: re.Match[str], path: str = path) -> str:
            name = match.group(1)
            if name == "slug" and "/phases" in path:
                return str(values["phase"])
            return str(values[name])

        urls.append(re.sub(r"\{(\w+)\}", fill, path))
    return urls + extra


def _poll(client: TestClient, urls: list[str]) -> dict[str, tuple[int, bytes]]:
    answers = {}
    for url in urls:
        r = client.get(url, follow_redirects=False)
        answers[url] = (r.status_code, r.content + r.headers.get("etag", "").encode())
    return answers


def _moved(a: dict[str, tuple[int, bytes]], b: dict[str, tuple[int, bytes]]) -> set[str]:
    return {url for url in a if a[url] != b[url]}


@pytest.mark.slow
def test_nothing_an_owner_reads_moves_between_two_ticks(
    client: TestClient, db_session: Session, clock: Clock
) -> None:
    s = db_session
    t0 = clock.moment
    owner = f.user(s, email=EMAIL, password=PASSWORD, name="Ticks")
    admin = f.headers(s, f.user(s, Role.ADMIN))
    sample = f.dataset_version(
        s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample"), version="1"
    )
    # Per-recording disclosure: the runs would be listed, were the evaluation over.
    held_ds = f.dataset(s, slug="held", disclosure=Disclosure.RECORDING)
    held = f.dataset_version(s, held_ds, version="1")
    recordings = [
        f.recording(s, held, subject=f"0{i % 2 + 1}", duration_s=3600.0, checksum=f"{i:064x}")
        for i in range(RECORDINGS)
    ]
    phase = f.phase(s, slug="continuous")
    phase.dataset_versions = [held]
    algorithm = f.algorithm(s, owner, name="ticker")
    earlier = f.version(s, algorithm, version="1", phase_id=phase.id)
    before = f.evaluation(s, earlier, held, finished_at=t0 - timedelta(days=1))
    f.result(s, before, {"01": {"event_f1": 0.4}, "02": {"event_f1": 0.4}})
    version = f.version(s, algorithm, version="2", phase_id=phase.id)
    smoke = f.evaluation(s, version, sample, kind=EvaluationKind.SMOKE_TEST, recordings_total=1)
    f.run(s, smoke, f.recording(s, sample, duration_s=600.0), wall_time_s=30.0)
    snapshot, _ = snapshots.take(s, "held", "1")
    created = t0 + timedelta(minutes=1)
    ev = f.evaluation(
        s, version, held, status=EvaluationStatus.QUEUED, recordings_total=RECORDINGS,
        created_at=created,
    )  # fmt: skip
    sign_in(client, EMAIL)
    values = {
        "evaluation_id": ev.id,
        "algorithm_id": algorithm.id,
        "version_id": version.id,
        "run_id": 0,
        "slug": "held",
        "phase": "continuous",
        "version": "1",
        "key": recordings[0].key,
        "snapshot_id": snapshot.id,
        "team_id": 1,
        "upload_id": "0" * 32,
        "user_id": owner.id,
        "checksum": recordings[0].checksum,
        "name": "a-centre",
        "bundle_id": 0,
        "result_id": 0,
    }
    urls = _urls(
        values,
        [
            "/api/v1/evaluations?mine=true",
            f"/api/v1/evaluations?algorithm_id={algorithm.id}&status=running",
            "/api/v1/leaderboards/held?versions=all&unranked=true",
            "/submissions?fragment=1",
            f"/algorithms/{algorithm.id}?evaluation={ev.id}",
            f"/api/v1/evaluations/{ev.id}/recordings/download?format=json",
        ],
    )
    assert len(urls) > 80

    clock.moment = t0 + timedelta(minutes=2)
    first = _poll(client, urls)
    clock.moment = t0 + timedelta(minutes=3)
    second = _poll(client, urls)
    self_moving = _moved(first, second)
    assert self_moving == set(SELF_MOVING), self_moving
    for url in urls:
        # /readyz answers 503 here: the test's own database is no migrated default one.
        assert first[url][0] < 500 or url == "/readyz", (url, first[url])
    page = second[f"/evaluations/{ev.id}"][1].decode()
    assert "Submitted after the last update" in page

    def still(at: datetime, what: str) -> None:
        s.flush()
        clock.moment = at
        now = _poll(client, urls)
        moved = _moved(second, now) - self_moving
        assert not moved, f"{what}: {sorted(moved)}"

    detail = f"/api/v1/evaluations/{ev.id}"
    seen_by_admin = {client.get(detail, headers=admin).text}
    # The worker takes the evaluation up and creates its runs.
    ev.status, ev.started_at = EvaluationStatus.RUNNING, t0 + timedelta(minutes=4)
    runs = [f.run(s, ev, rec, outcome=None, worker_host="", wall_time_s=None) for rec in recordings]
    still(t0 + timedelta(minutes=5), "started")
    # Runs are claimed and stored: hosts, GPUs, outcomes and counts appear, one crashes.
    for i, run in enumerate(runs):
        run.started_at = t0 + timedelta(minutes=5, seconds=10 * i)
        run.worker_host = f"gpu-host-{i % 2}"
        run.gpu_model, run.gpu_driver = "NVIDIA H200", "580.1"
        run.outcome = RunOutcome.CRASHED if i == 3 else RunOutcome.OK
        run.finished_at = t0 + timedelta(minutes=6, seconds=40 * i)
        run.wall_time_s = 40.0 * i + 1
        run.event_tp, run.event_fp, run.event_fn, run.event_ref_true = 1, i, 0, 1
        ev.recordings_done = i + 1
        still(t0 + timedelta(minutes=6, seconds=40 * i + 20), f"run {i} stored")
        seen_by_admin.add(client.get(detail, headers=admin).text)
    # Every run stored: the worker switches to scoring.
    ev.status = EvaluationStatus.SCORING
    still(t0 + timedelta(minutes=14, seconds=59), "scoring")

    # What the owner was shown stood still while the admin's full view moved with each run.
    assert len(seen_by_admin) == RECORDINGS + 1
    # Across the tick, the progress moves: all run, scoring.
    clock.moment = t0 + timedelta(minutes=15, seconds=30)
    after = _poll(client, urls)
    progress = f"/api/v1/evaluations/{ev.id}/progress"
    assert progress in _moved(second, after)
    body = client.get(progress).json()
    assert (body["status"], body["recordings_done"], body["fraction_done"]) == (
        "scoring",
        RECORDINGS,
        1.0,
    )


def test_a_notification_about_a_held_out_evaluation_carries_rounded_times(
    db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    """Webhook and mail payloads carried the event's created_at to the microsecond while
    finished_at was rounded."""
    s = db_session
    owner = f.user(s)
    held = f.dataset_version(s, f.dataset(s, slug="held-news"), version="1")
    finished = datetime(2026, 1, 1, 12, 7, 31, 123456, tzinfo=UTC)
    ev = f.evaluation(s, f.version(s, f.algorithm(s, owner)), held, finished_at=finished)
    f.result(s, ev, {"01": {"event_f1": 0.5}})
    event_id = events.record_evaluation_end(s, ev)
    assert event_id is not None
    event = s.get_one(NotificationEvent, event_id)
    payload = kinds.of(event.kind).compose(s, event, owner)
    assert payload is not None
    step = 900
    for moment in (payload["created_at"], payload["evaluation"]["finished_at"]):
        parsed = datetime.fromisoformat(moment)
        assert parsed.timestamp() % step == 0, moment
