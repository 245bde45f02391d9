"""Faults for real: worker processes killed with SIGKILL, Redis restarted empty.

Each test starts its own Redis (``redis-server`` on a free port, no persistence) so that it
can stop it without touching the shared one, and real ``celery worker`` processes on the
real PostgreSQL and Docker engine. The broker's visibility timeout stays at two hours, as
in production: whatever comes back within the test came back through the reconciler or a
restarted worker, never through Redis's own re-delivery.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import func, select

from szbench import queue
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import DatasetResult, Evaluation, EvaluationStatus, RecordingRun, RunOutcome

from ._live_services import child_env, free_port, log_dir_for, remove_leftovers, use_settings
from ._pipeline_factories import Rec, make_prepared_dataset, seed_world
from .test_pipeline_celery import (
    LIMITS,
    SLOW_GOOD,
    Workers,
    add_version,
    our_containers,
    wait_until,
)

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


class OwnRedis:
    """A ``redis-server`` of this test's own, which it may kill and start again empty."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (scripts/setup.sh installs it)"
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.workdir)]
        self.proc = subprocess.Popen(
            [binary, *args],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise AssertionError("the test's redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def faults(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[tuple[Workers, str, OwnRedis]]:
    host = f"reconcile-test-{uuid.uuid4().hex[:8]}"
    broker = OwnRedis(tmp_path)
    broker.start()
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_BROKER_URL": broker.url,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(tmp_path / "work"),
        "SZBENCH_WORKER_HOST": host,
        # Production's: Redis's own re-delivery cannot be what brings anything back here.
        "SZBENCH_QUEUE_VISIBILITY_TIMEOUT_S": "7200",
        "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "2",
        # Seconds instead of minutes.
        "SZBENCH_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
        "SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S": "5",
        "SZBENCH_RECONCILE_INTERVAL_S": "1",
        "SZBENCH_RECONCILE_STALE_S": "3",
        "SZBENCH_RECONCILE_CLAIM_GRACE_S": "10",
    }
    use_settings(settings_env, values)
    # Resetting the Celery app (use_settings) renews its connection pool but not its
    # producer pool, which stays bound to the previous test's broker (gone): drop it too.
    amqp = queue.get_celery().__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None
    workers = Workers(child_env(), log_dir_for(tmp_path, host))
    try:
        yield workers, host, broker
    finally:
        workers.stop_all()
        queue.reset_celery()
        broker.kill()
        remove_leftovers(docker_client, host)


@pytest.fixture
def slow_image(test_images: dict[str, str], docker_client: Any, tmp_path: Path) -> str:
    from szbench_worker.docker_runner import build_image

    context = tmp_path / "slow-image"
    context.mkdir()
    (context / "run.py").write_text(SLOW_GOOD)
    (context / "Dockerfile").write_text(
        'FROM szbench/python-numpy:bookworm\nCOPY run.py /run.py\nCMD ["python3", "/run.py"]\n'
    )
    return build_image(context, "szbench-test/pipeline-slow:latest", docker_client).digest


def _evaluation(slow_image: str, docker_client: Any, tmp_path: Path, n: int) -> int:
    recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in range(1, n + 1)]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(session, data, recs, run_limits={**LIMITS, "timeout_s": 60})
        version = add_version(session, slow_image, docker_client)
        return evaluations.create_evaluation(
            session, algorithm_version=version, dataset_version=world.dataset_version
        ).id


def _finished(evaluation_id: int) -> Callable[[], bool]:
    def check() -> bool:
        with session_scope() as session:
            return session.get_one(Evaluation, evaluation_id).status.finished

    return check


def _assert_done_exactly_once(evaluation_id: int, n: int) -> None:
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE, ev.message
        assert (ev.recordings_done, ev.recordings_total) == (n, n)
        runs = ev.runs
        assert len(runs) == n
        assert all(r.outcome == RunOutcome.OK for r in runs)
        # The scores of an undisturbed run: every seizure found.
        assert all(r.event_tp == 1 for r in runs)
        results = select(func.count(DatasetResult.id)).where(
            DatasetResult.evaluation_id == evaluation_id
        )
        assert session.scalar(results) == 1
        assert ev.result is not None
        assert ev.result.event_sensitivity == pytest.approx(1.0)


def _running(docker_client: Any, host: str) -> Callable[[], bool]:
    return lambda: any(c.status == "running" for c in our_containers(docker_client, host))


def test_a_killed_workers_runs_come_back_when_a_worker_starts_on_its_host(
    faults: tuple[Workers, str, OwnRedis], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host, _broker = faults
    # The dead worker's heartbeat stays fresh for the whole test: no reconciler pass may
    # judge it dead, only the start-up reclaim on its host (which checks the process).
    workers.env["SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S"] = "600"
    evaluation_id = _evaluation(slow_image, docker_client, tmp_path, 3)
    first = workers.start("first")
    wait_until(_running(docker_client, host), 60, "a running container", workers)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    with session_scope() as session:
        held = session.scalars(
            select(RecordingRun).where(
                RecordingRun.evaluation_id == evaluation_id,
                RecordingRun.started_at.is_not(None),
                RecordingRun.finished_at.is_(None),
            )
        ).all()
        assert len(held) == 1
        assert held[0].claimed_by.startswith(f"{host}:")
    # The killed worker's message stays unacknowledged in Redis for the visibility timeout
    # (two hours): only the new worker's start-up reclaim can bring the run back now.
    workers.start("second")
    wait_until(_finished(evaluation_id), 120, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 3)
    assert not [c for c in our_containers(docker_client, host) if c.status == "running"]


def test_a_killed_pool_process_leaves_nothing_behind_and_its_run_comes_back(
    faults: tuple[Workers, str, OwnRedis], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host, _broker = faults
    evaluation_id = _evaluation(slow_image, docker_client, tmp_path, 2)
    parent = workers.start("prefork", pool="prefork")
    wait_until(_running(docker_client, host), 60, "a running container", workers)
    (container,) = [c for c in our_containers(docker_client, host) if c.status == "running"]
    owner = container.labels["org.szbench.owner"]
    child = int(owner.split(".")[0])
    assert child != parent.pid
    staging = [p for p in (tmp_path / "runs").iterdir() if owner in p.name]
    assert staging, "the run's staging folder"
    os.kill(child, signal.SIGKILL)

    def swept() -> bool:
        left = [
            c
            for c in our_containers(docker_client, host)
            if c.labels.get("org.szbench.owner") == owner
        ]
        return not left and not any(p.exists() for p in staging)

    # The dead child's container would otherwise stay (exited, never removed) until the
    # next worker start; its staging folder too.
    wait_until(swept, 30, "the dead pool process's container and staging folder", workers)
    assert parent.poll() is None, "the worker itself lives on"
    wait_until(_finished(evaluation_id), 120, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 2)


def test_redis_restarted_empty_mid_evaluation_the_reconciler_finishes_it(
    faults: tuple[Workers, str, OwnRedis], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host, broker = faults
    evaluation_id = _evaluation(slow_image, docker_client, tmp_path, 3)
    # One worker process that also runs celery beat and consumes the maintenance queue.
    workers.start("beat", queues="cpu,maintenance", beat=True)
    wait_until(_running(docker_client, host), 60, "a running container", workers)
    broker.kill()
    broker.start()  # empty: the queued run tasks are gone
    assert redis.Redis.from_url(broker.url).llen("cpu") == 0
    wait_until(_finished(evaluation_id), 180, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 3)
    with session_scope() as session:
        assert session.get_one(Evaluation, evaluation_id).reconcile_rounds >= 1
