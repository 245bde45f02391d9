"""Time comes from the database (issue 29.3): one worker process on a skewed clock.

libfaketime (the Debian package ``faketime``) moves one real ``celery worker`` process's
clock, as another host's clock would be off; PostgreSQL, Redis and the Docker engine are the
real ones. A worker an hour ahead that dies must give its run back within the heartbeat
timeout (with its own clock, its heartbeat looked fresh for an hour); one ten minutes behind
must write start and finish times after the submission's, and count as serving its queue
while it runs (with its own clock, the page said no worker served it).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from szbench import clock
from szbench.broker import broker_was_emptied
from szbench.db import session_scope
from szbench.evaluations.holds import platform_hold
from szbench.models import Evaluation, RecordingRun, WorkerHeartbeat

from . import _live_services as live
from .test_reconcile_celery import (
    OwnRedis,
    Workers,
    _assert_done_exactly_once,
    _evaluation,
    _finished,
    _running,
    faults,  # noqa: F401 (a fixture)
    slow_image,  # noqa: F401 (a fixture)
    wait_until,
)
from .test_sick_host import long_image  # noqa: F401 (a fixture)

#: How far a stored time may be from the database's clock: the test's own polling, on a
#: loaded machine; a skewed clock is 600 s or 3600 s off.
SLACK_S = 60


def _skewed(workers: Workers, offset: str, host: str) -> Workers:
    """Workers whose processes run ``offset`` from this host's clock, as host ``host``."""
    env = {**workers.env, **live.faketime_env(offset), "SZBENCH_WORKER_HOST": host}
    return Workers(env, workers.log_dir)


def _off_by_s(when: datetime | None) -> float:
    assert when is not None
    when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return abs((when - clock.now()).total_seconds())


def _no_first_pass_resend(broker: OwnRedis) -> None:
    """Set the broker's marker, as an earlier pass of the reconciler leaves it: a first pass
    would take the test's fresh Redis for one that lost its contents and send the queued
    work again (docs/operations.md), a second message that would hide what is tested."""
    broker_was_emptied(broker.url)


def _assert_in_order(evaluation_id: int) -> None:
    """Submission, then each run's start and finish, then the evaluation's finish."""
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.started_at is not None
        assert ev.finished_at is not None
        assert ev.created_at <= ev.started_at <= ev.finished_at
        for run in ev.runs:
            assert run.started_at is not None
            assert run.finished_at is not None
            assert ev.created_at <= run.started_at <= run.finished_at <= ev.finished_at


def test_the_clock_is_the_databases_not_the_hosts(pg_url: str) -> None:
    """A process an hour ahead reads the database's time (and its own clock is skewed)."""
    code = (
        "from datetime import UTC, datetime\n"
        "from szbench import clock\n"
        "print(clock.now().timestamp(), datetime.now(UTC).timestamp())\n"
    )
    env = {**live.child_env(), **live.faketime_env("+1h"), "SZBENCH_DATABASE_URL": pg_url}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    database, own = (float(x) for x in out.split())
    real = time.time()
    assert own - real > 3500, "the child's own clock is an hour ahead"
    assert abs(database - real) < SLACK_S


def test_a_worker_an_hour_ahead_that_dies_gives_its_run_back_within_the_heartbeat_timeout(
    faults: tuple[Workers, str, OwnRedis],  # noqa: F811
    long_image: str,  # noqa: F811
    docker_client: Any,
    tmp_path: Path,
) -> None:
    workers, host, broker = faults
    skewed_host = f"{host}-ahead"
    ahead = _skewed(workers, "+1h", skewed_host)
    evaluation_id = _evaluation(long_image, docker_client, tmp_path, 1)
    _no_first_pass_resend(broker)
    try:
        proc = ahead.start("ahead")
        wait_until(_running(docker_client, skewed_host), 60, "the run's container", ahead)
        with session_scope() as session:
            (run,) = session.scalars(
                select(RecordingRun).where(RecordingRun.evaluation_id == evaluation_id)
            ).all()
            beat = session.scalars(
                select(WorkerHeartbeat).where(WorkerHeartbeat.host == skewed_host)
            ).one()
            assert run.claimed_by == beat.id
            # Written on the database's clock, not the worker's an hour ahead.
            assert _off_by_s(run.started_at) < SLACK_S
            assert _off_by_s(beat.last_seen_at) < SLACK_S
            assert _off_by_s(beat.started_at) < SLACK_S
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed = time.monotonic()
        # A worker on the shipped clock, with the scheduler: its start-up reclaim covers its
        # own host only, so only the reconciler, judging the dead worker by its heartbeat's
        # age (timeout 5 s here), can send the run again. The run's image sleeps 20 s.
        workers.start("reconciler", queues="cpu,maintenance", beat=True)
        wait_until(_finished(evaluation_id), 90, "the evaluation", workers)
        assert time.monotonic() - killed < 90
        _assert_done_exactly_once(evaluation_id, 1)
        _assert_in_order(evaluation_id)
        with session_scope() as session:
            (run,) = session.scalars(
                select(RecordingRun).where(RecordingRun.evaluation_id == evaluation_id)
            ).all()
            assert run.attempts == 2
            assert run.claimed_by.startswith(f"{host}:")
    finally:
        ahead.stop_all()
        from szbench_worker.docker_runner import cleanup_orphans

        # The killed worker's staging directory too: its /output tmpfs stays mounted until
        # a sweep unmounts it (a worker's start-up sweep on that host, in production).
        cleanup_orphans(
            docker_client, host=skewed_host, everything=True, work_dir=tmp_path / "runs"
        )


def test_a_worker_ten_minutes_behind_writes_times_in_order_and_serves_its_queue(
    faults: tuple[Workers, str, OwnRedis],  # noqa: F811
    long_image: str,  # noqa: F811
    docker_client: Any,
    tmp_path: Path,
) -> None:
    workers, host, broker = faults
    behind = _skewed(workers, "-10m", host)
    evaluation_id = _evaluation(long_image, docker_client, tmp_path, 1)
    _no_first_pass_resend(broker)
    try:
        # It runs the scheduler too: the reconciler's judgments on a skewed host's clock.
        behind.start("behind", queues="cpu,maintenance", beat=True)
        wait_until(_running(docker_client, host), 60, "the run's container", behind)
        with session_scope() as session:
            evaluation = session.get_one(Evaluation, evaluation_id)
            assert not evaluation.status.finished
            # Its heartbeat is fresh on the database's clock: it serves the queue.
            assert platform_hold(session, evaluation) is None
            beat = session.scalars(
                select(WorkerHeartbeat).where(WorkerHeartbeat.host == host)
            ).one()
            assert _off_by_s(beat.last_seen_at) < SLACK_S
            # Started with -Q cpu,maintenance, it finishes evaluations too (issue 29.9).
            assert "score" in beat.queues
        wait_until(_finished(evaluation_id), 90, "the evaluation", behind)
        _assert_done_exactly_once(evaluation_id, 1)
        _assert_in_order(evaluation_id)
        with session_scope() as session:
            ev = session.get_one(Evaluation, evaluation_id)
            assert ev.finished_at is not None
            assert _off_by_s(ev.finished_at) < SLACK_S + 30
            # Nothing sent again: a skewed clock made no live work look lost.
            assert ev.reconcile_rounds == 0
            (run,) = ev.runs
            assert run.attempts == 1
            assert timedelta(0) <= run.finished_at - run.started_at  # type: ignore[operator]
    finally:
        behind.stop_all()
