"""A sick host spends no algorithm's retries (issue 21 points 8 and 10).

Real ``celery worker`` processes on a Redis of the test's own and the real PostgreSQL. A full
work directory is a small tmpfs the test fills; an engine outage is a second dockerd of the
test's own (its own data-root, exec-root, pidfile, socket and no bridge), stopped and
started again under the worker's feet. The shared engine is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from szbench.db import session_scope
from szbench.models import Evaluation, RecordingRun, WorkerHeartbeat

from . import _live_services as live
from .test_reconcile_celery import (
    OwnRedis,
    Workers,
    _assert_done_exactly_once,
    _evaluation,
    _finished,
    faults,  # noqa: F401 (a fixture)
    slow_image,  # noqa: F401 (a fixture)
    wait_until,
)

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

MiB = 1024**2


def _runs(evaluation_id: int) -> list[RecordingRun]:
    with session_scope() as session:
        runs = session.scalars(
            select(RecordingRun).where(RecordingRun.evaluation_id == evaluation_id)
        ).all()
        for run in runs:
            session.expunge(run)
        return list(runs)


def _faults() -> list[str]:
    with session_scope() as session:
        return [f for f in session.scalars(select(WorkerHeartbeat.fault)) if f]


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 48 MiB tmpfs of the test's own, for a work directory that can be filled."""
    path = Path(tempfile.mkdtemp(prefix="szbench-small-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


def test_a_full_work_dir_stops_the_worker_taking_runs_until_it_has_room(
    faults: tuple[Workers, str, OwnRedis],  # noqa: F811
    slow_image: str,  # noqa: F811
    docker_client: Any,
    tmp_path: Path,
    small_disk: Path,
) -> None:
    workers, _host, _broker = faults
    workers.env["SZBENCH_RUNNER_WORK_DIR"] = str(small_disk / "runs")
    workers.env["SZBENCH_WORKER_MIN_FREE_BYTES"] = str(16 * MiB)
    filler = small_disk / "filler"
    subprocess.run(["fallocate", "-l", "40MiB", str(filler)], check=True)
    workers.start("sick")
    evaluation_id = _evaluation(slow_image, docker_client, tmp_path, 2)
    wait_until(lambda: bool(_faults()), 30, "the heartbeat's fault", workers)
    assert "work directory (SZBENCH_RUNNER_WORK_DIR)" in _faults()[0]
    time.sleep(8)  # many heartbeats: nothing may be taken meanwhile
    assert all(run.attempts == 0 for run in _runs(evaluation_id)), "no run spent on a full disk"
    filler.unlink()
    wait_until(_finished(evaluation_id), 120, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 2)
    assert [run.attempts for run in _runs(evaluation_id)] == [1, 1]
    assert _faults() == []
    log = (workers.log_dir / "sick.log").read_text(errors="replace")
    assert "taking no runs" in log
    assert "can run containers again" in log


# --- an engine of the test's own -------------------------------------------------------------


@pytest.fixture
def long_image(slow_image: str, docker_client: Any, tmp_path: Path) -> str:  # noqa: F811
    """The slow image running 20 s a recording: long enough that the engine is always
    stopped under a running container, however loaded the host (at 2 s the run could end
    between the test seeing it running and the engine going away)."""
    from szbench_worker.docker_runner import build_image

    context = tmp_path / "long-image"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {slow_image}\nENV SLOW_S=20\n")
    return build_image(context, "szbench-test/pipeline-long:latest", docker_client).digest


@pytest.fixture
def own_dockerd(docker_client: Any, long_image: str) -> Iterator[live.PrivateEngine]:
    # Containers die with the engine at once: the run's PID 1 ignores SIGTERM, so with the
    # default grace period a 2 s run could finish during shutdown and not be interrupted.
    engine = live.PrivateEngine(extra_args=["--shutdown-timeout", "0"])
    engine.start(timeout_s=60)
    try:
        # The long image (and its base) into the test's engine, by id as the runs use it.
        saved = docker_client.api.get_image(long_image)
        engine.client().api.load_image(b"".join(saved))
        yield engine
    finally:
        engine.remove()


def test_an_engine_outage_spends_no_retry_and_leaves_no_exited_container(
    faults: tuple[Workers, str, OwnRedis],  # noqa: F811
    long_image: str,
    docker_client: Any,
    tmp_path: Path,
    own_dockerd: live.PrivateEngine,
) -> None:
    workers, host, _broker = faults
    workers.env["DOCKER_HOST"] = own_dockerd.url
    workers.start("engine", timeout_s=90)
    evaluation_id = _evaluation(long_image, docker_client, tmp_path, 2)
    engine = own_dockerd.client()

    def ours() -> list[Any]:
        return engine.containers.list(
            all=True, filters={"label": f"org.szbench.worker-host={host}"}, ignore_removed=True
        )

    wait_until(lambda: any(c.status == "running" for c in ours()), 90, "a run", workers)
    own_dockerd.stop()  # ends the run's container; the worker cannot remove it now
    wait_until(lambda: bool(_faults()), 30, "the heartbeat's fault", workers)
    assert "container engine" in _faults()[0]
    time.sleep(5)  # a few heartbeats with the engine away
    own_dockerd.start()
    engine = own_dockerd.client()
    wait_until(_finished(evaluation_id), 180, "the evaluation", workers)
    _assert_done_exactly_once(evaluation_id, 2)
    # The interrupted run was tried again once the engine was back: one more attempt, no
    # retry spent while the engine was away (the task was handed back, not retried).
    assert sorted(run.attempts for run in _runs(evaluation_id)) == [1, 2]
    # The container the engine's restart ended is removed by the running worker (within the
    # heartbeat timeout, 5 s here), not left Exited until the next worker start.
    wait_until(lambda: ours() == [], 30, "the ended container's removal", workers)
    assert workers.procs[0].poll() is None
    log = (workers.log_dir / "engine.log").read_text(errors="replace")
    assert "handed back" in log
    assert "can run containers again" in log
    with session_scope() as session:
        assert session.get_one(Evaluation, evaluation_id).reconcile_rounds == 0
