"""The embedded mode for real: SQLite database, SQLite-backed queue, in-process worker.

No Redis here: the same task messages go through kombu's SQLAlchemy transport and the
same task code consumes them. The ``szbench evaluate`` command is tested end to end with
the trusted local-process runner (a tiny detector script); the Docker path is tested in
test_evaluate_cli.py and test_pipeline_celery.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, signals
from celery import _state as celery_state
from typer.testing import CliRunner

from szbench import db, migrate, queue
from szbench.cli.main import app
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import DatasetKind, Evaluation, EvaluationStatus, RunOutcome
from szbench_worker import pipeline
from szbench_worker.embedded import start_embedded_worker
from szbench_worker.runner import RunnerError

from ._pipeline_factories import Rec, events_tsv, make_prepared_dataset, seed_world
from .fakes import FakeRun, FakeRunner

pytestmark = pytest.mark.slow

RECS = [
    Rec("sub-01", "run-00", 600, ((100, 40),)),
    Rec("sub-02", "run-00", 600, ()),
    Rec("sub-02", "run-01", 600, ((30, 20),)),
]

DETECTOR = """
import os, sys
from pathlib import Path
inp, out = os.environ["INPUT"], os.environ["OUTPUT"]
if "sub-02_ses-01_task-szMonitoring_run-01" in inp:
    sys.exit(7)
raw = Path(inp).read_bytes()
n = int(raw[236:244]); d = float(raw[244:252])
dur = n * d
Path(out).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"105.0\\t20.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{dur:.1f}\\n"
)
"""


@pytest.fixture
def embedded(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Embedded settings: SQLite under a temporary data dir, no broker URL."""
    get_settings.cache_clear()
    db.reset_engine()
    queue.reset_celery()
    settings = get_settings()
    assert queue.is_embedded(settings)
    migrate.upgrade(settings.effective_database_url)
    yield Path(settings.data_dir)
    queue.reset_celery()
    pipeline.set_dependencies(None)


def wait_finished(evaluation_id: int, timeout_s: float = 60) -> Evaluation:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            ev = session.get_one(Evaluation, evaluation_id)
            if ev.status.finished:
                return ev
        time.sleep(0.1)
    raise AssertionError(f"evaluation {evaluation_id} did not finish in {timeout_s} s")


def test_embedded_worker_runs_the_tasks_through_the_sqlite_queue(
    embedded: Path, tmp_path: Path
) -> None:
    runner = FakeRunner(
        script=lambda rec: (
            FakeRun(outcome=RunOutcome.TIMEOUT)
            if "sub-02_ses-01_task-szMonitoring_run-00" in rec.name
            else FakeRun(tsv=events_tsv(600, [(100, 10)]))
        )
    )
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    with session_scope() as session:
        world = seed_world(session, prepared, RECS)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        ).id
    # The start message is persisted in the SQLite broker before any worker runs.
    broker = sqlite3.connect(embedded / "broker.sqlite3")
    try:
        (pending,) = broker.execute("SELECT count(*) FROM kombu_message WHERE visible").fetchone()
    finally:
        broker.close()
    assert pending == 1
    worker = start_embedded_worker(upgrade_database=False)
    try:
        ev = wait_finished(evaluation_id)
    finally:
        worker.stop()
    assert not worker.alive
    assert ev.status == EvaluationStatus.DONE
    assert len(runner.calls) == 3
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        outcomes = sorted(r.outcome.value for r in ev.runs if r.outcome)
        assert outcomes == ["ok", "ok", "timeout"]
        assert ev.result is not None
        assert ev.result.report["event_results"]["sensitivity"] is not None


def test_cli_evaluate_local_process_end_to_end(embedded: Path, tmp_path: Path) -> None:
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    detector = tmp_path / "detector.py"
    detector.write_text(DETECTOR)
    out = tmp_path / "scores.json"
    command = f"{sys.executable} {detector}"
    cli = CliRunner()
    result = cli.invoke(
        app,
        [
            "evaluate",
            "--local-process",
            command,
            "--dataset",
            str(prepared),
            "--json",
            str(out),
            "--name",
            "my-detector",
            "--dataset-name",
            "my-eeg",
            "--public-sample",
        ],
    )
    assert result.exit_code == 0, result.output
    with session_scope() as session:
        first = session.query(Evaluation).one()
        assert first.algorithm_version.algorithm.name == "my-detector"
        dataset = first.dataset_version.dataset
        assert (dataset.slug, dataset.kind) == ("my-eeg", DatasetKind.PUBLIC_SAMPLE)
    assert "NOT sandboxed" in result.output
    assert "sensitivity" in result.output
    payload = json.loads(out.read_text())
    assert set(payload) == {"sample_results", "event_results", "recordings"}
    assert "f1_std" in payload["event_results"]
    recs = {r["path"]: r for r in payload["recordings"]}
    assert len(recs) == 3
    crashed = recs["eeg/sub-02/ses-01/eeg/sub-02_ses-01_task-szMonitoring_run-01_eeg.edf"]
    assert crashed["outcome"] == "crashed"
    assert "7" in crashed["message"]
    assert str(tmp_path) not in json.dumps(payload["recordings"])
    hit = recs["eeg/sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"]
    assert hit["outcome"] == "ok"
    assert hit["event"] == {"tp": 1, "fp": 0, "fn": 0}
    # Per run, what the platform stored: exit code, wall time, the detections themselves.
    assert (hit["exit_code"], crashed["exit_code"]) == (0, 7)
    assert hit["wall_time_s"] > 0
    assert hit["peak_memory_bytes"] is None  # a local process is not measured
    assert hit["detections"] == [{"onset_s": 105.0, "duration_s": 20.0, "event_type": "sz"}]
    assert crashed["detections"] is None
    assert hit["reused"] is False
    # sub-01: 1/1; sub-02: 0/1 (the crash counts as no detections) -> mean 0.5.
    assert payload["event_results"]["sensitivity"] == pytest.approx(0.5)

    # The same command again reuses every finished run: no process is started.
    detector.write_text("raise SystemExit('must not run')")
    again = cli.invoke(
        app,
        ["evaluate", "--local-process", command, "--dataset", str(prepared), "--name", "other"],
    )
    # The detector's text changed, so its digest changed: a *different* algorithm, run anew.
    assert again.exit_code == 0, again.output
    with session_scope() as session:
        evs = session.query(Evaluation).order_by(Evaluation.id).all()
        assert len(evs) == 2
        assert evs[0].image_digest != evs[1].image_digest
        assert all(r.outcome == RunOutcome.CRASHED for r in evs[1].runs)
        # Without --dataset-name the slug derives from the manifest's checksum.
        assert evs[1].dataset_version.dataset.slug.startswith("local-")
        assert evs[1].algorithm_version.algorithm.name == "other"


def test_cli_evaluate_rejects_two_sources(embedded: Path, tmp_path: Path) -> None:
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    result = CliRunner().invoke(
        app, ["evaluate", "--image", "x", "--local-process", "y", "--dataset", str(prepared)]
    )
    assert result.exit_code == 2
    assert "exactly one" in result.output


class _FailsFirst(FakeRunner):
    """A runner whose first run hits an infrastructure fault (the engine went away)."""

    def run(self, **kwargs: Any) -> Any:
        if not self.calls:
            self.calls.append({"fault": True})
            raise RunnerError("injected: the Docker engine did not answer")
        return super().run(**kwargs)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_embedded_retry_goes_through_the_sqlite_queue(
    embedded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    # Before: the retry was sent by Celery's default app (the worker thread had no current
    # app), i.e. to amqp://localhost:5672; the run was lost and the evaluation stayed running.
    # `szbench evaluate` imports celery.worker before the worker's app, so Celery's fallback
    # app is not ours there; start from that state here too.
    monkeypatch.setattr(celery_state, "default_app", None)
    monkeypatch.setenv("SZBENCH_TASK_RETRY_BACKOFF_MAX_S", "1")
    get_settings.cache_clear()
    connections: list[tuple[str, str]] = []
    opened = Celery._connection

    def recording_connection(app: Celery, *args: Any, **kwargs: Any) -> Any:
        conn = opened(app, *args, **kwargs)
        connections.append((app.main, conn.as_uri()))
        return conn

    monkeypatch.setattr(Celery, "_connection", recording_connection)
    retries: list[str] = []

    def on_retry(request: Any, **_: Any) -> None:
        retries.append(request.task)

    signals.task_retry.connect(on_retry, weak=False)
    runner = _FailsFirst()
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    recs = RECS[:1]
    prepared = make_prepared_dataset(tmp_path / "prepared", recs)
    with session_scope() as session:
        world = seed_world(session, prepared, recs)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        ).id
    worker = start_embedded_worker(upgrade_database=False, concurrency=concurrency)
    try:
        ev = wait_finished(evaluation_id)
    finally:
        worker.stop()
        signals.task_retry.disconnect(on_retry)
    assert ev.status == EvaluationStatus.DONE
    assert retries == ["szbench.recording.run"]
    assert len(runner.calls) == 2  # the fault, then the retried run
    with session_scope() as session:
        (run,) = session.get_one(Evaluation, evaluation_id).runs
        assert (run.outcome, run.attempts) == (RunOutcome.OK, 2)
    # One app, one broker: every connection of this test went to the SQLite queue.
    from szbench_worker import tasks

    assert tasks.run_recording.app is queue.get_celery()
    assert connections
    assert {main for main, _ in connections} == {"szbench"}
    assert all(uri.startswith("sqlite:") for _, uri in connections), connections


def test_embedded_worker_resends_lost_work_only_as_the_sole_worker(
    embedded: Path, tmp_path: Path
) -> None:
    # A start message lost with the process that had taken it (the SQLite transport never
    # gives a taken message back): the next embedded worker sends it again, unless another
    # live embedded process works on this data directory.
    from szbench_worker.embedded import _lock_data_dir, _share

    runner = FakeRunner()
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    recs = RECS[:2]
    prepared = make_prepared_dataset(tmp_path / "prepared", recs)
    queue.set_sender(lambda *_: None)  # the message is lost
    try:
        with session_scope() as session:
            world = seed_world(session, prepared, recs)
            evaluation_id = evaluations.create_evaluation(
                session, algorithm_version=world.version, dataset_version=world.dataset_version
            ).id
    finally:
        queue.set_sender(None)
    settings = get_settings()
    # Another live embedded worker on this data directory (past its own start-up).
    other, sole = _lock_data_dir(settings)
    assert sole
    _share(other)
    try:
        worker = start_embedded_worker(upgrade_database=False)
        worker.stop()
    finally:
        os.close(other)
    assert (worker.recovery.sole_worker, worker.recovery.resent) == (False, [])
    assert runner.calls == []
    worker = start_embedded_worker(upgrade_database=False)
    try:
        ev = wait_finished(evaluation_id)
    finally:
        worker.stop()
    assert worker.recovery.sole_worker
    assert worker.recovery.resent == [("szbench.evaluation.start", evaluation_id)]
    assert ev.status == EvaluationStatus.DONE
    assert len(runner.calls) == 2  # each recording once

    # The transport only hides what was consumed; the next sole worker deletes it, so the
    # queue file does not grow with every message ever sent.
    broker = sqlite3.connect(settings.data_dir / "broker.sqlite3")
    try:
        hidden = broker.execute("SELECT count(*) FROM kombu_message WHERE NOT visible").fetchone()
        assert hidden[0] >= 4  # start, two runs, finalize
        worker = start_embedded_worker(upgrade_database=False)
        worker.stop()
        assert worker.recovery.consumed_deleted >= hidden[0]
        assert (
            broker.execute("SELECT count(*) FROM kombu_message WHERE NOT visible").fetchone()[0]
            == 0
        )
    finally:
        broker.close()
