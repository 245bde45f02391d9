"""The Celery path for real: Redis broker, PostgreSQL, Docker, worker processes.

The worker is a real ``celery worker`` process started by the test; containers run in the
real engine. Covered: the hostile images' outcomes through the whole pipeline with the
other results intact; a worker SIGKILLed while a container runs (after a restart the
evaluation completes with every recording scored exactly once); a warm shutdown (SIGTERM)
that finishes the run in progress; a cold shutdown (SIGQUIT) that hands the run back and
leaves no container, wherever in the run the signal lands; a Docker daemon that cannot be
reached (retried, then recorded as the platform's fault); and a smoke test that loads an
uploaded tarball the engine has never seen (or rejects a broken one).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from szbench import queue
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    DatasetResult,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    RecordingRun,
    RunOutcome,
    User,
    VersionStatus,
    WorkerHeartbeat,
)
from tests.redis_urls import redis_url

from . import _live_services as live
from ._pipeline_factories import Rec, make_prepared_dataset, seed_world, truncate_all

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = redis_url(9)
MiB = 1024**2
VISIBILITY_S = 8
LIMITS = {
    "timeout_s": 4,
    "memory_bytes": 96 * MiB,
    "cpus": 1,
    "pids": 64,
    "tmpfs_bytes": 16 * MiB,
    "output_bytes": 1 * MiB,
    "log_bytes": 64 * 1024,
}

SLOW_GOOD = """
import os, time
from pathlib import Path
time.sleep(float(os.environ.get("SLOW_S", "2")))
edf = Path("/data") / os.environ["INPUT"]
h = edf.read_bytes()[:256]
dur = int(h[236:244]) * float(h[244:252])
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"100.0\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{dur:.1f}\\n"
)
"""


class Workers:
    """Starts and stops real ``celery worker`` processes for one test."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        name: str,
        *,
        timeout_s: float = 60,
        entry: str = "celery",
        pool: str = "solo",
        queues: str = "cpu",
        beat: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start ``python -m <entry> worker`` (``entry``: celery's, or a test's wrapper)."""
        log = self.log_dir / f"{name}.log"
        cmd = [sys.executable, "-m", entry, "-A", "szbench_worker.celery_app", "worker"]
        cmd += ["--pool", pool, "--concurrency", "1", "-Q", queues, "-n", f"{name}@%h"]
        cmd += ["--without-mingle", "--without-gossip", "--loglevel", "INFO"]
        if beat:
            cmd += ["--beat"]
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=self.env,
            stdout=open(log, "wb"),  # noqa: SIM115 (closed with the process)
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "ready." in log.read_text(errors="replace"):
                return proc
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"worker {name} did not start:\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in self.log_dir.glob("*.log")
        )

    def stop_all(self) -> None:
        live.stop_processes(self.procs)


@pytest.fixture
def celery_env(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[tuple[Workers, str]]:
    """Settings for this process and the workers: Redis, PostgreSQL, Docker, one host label."""
    host = f"pipeline-test-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_BROKER_URL": REDIS_URL,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(tmp_path / "work"),
        "SZBENCH_WORKER_HOST": host,
        # Short, so that a killed worker's task comes back within the test.
        "SZBENCH_QUEUE_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S),
        "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "2",
    }
    live.use_settings(settings_env, values)
    broker = live.empty_broker(REDIS_URL)
    workers = Workers(live.child_env(), live.log_dir_for(tmp_path, host))
    try:
        yield workers, host
    finally:
        workers.stop_all()
        live.release_broker(broker)
        live.remove_leftovers(docker_client, host)


def add_version(session: Any, tag: str, docker_client: Any) -> AlgorithmVersion:
    from szbench_worker.docker_runner import inspect_image

    user = session.scalars(select(User)).first()
    algorithm = Algorithm(owner_id=user.id, name=tag.replace("/", "-").replace(":", "-"))
    session.add(algorithm)
    session.flush()
    version = AlgorithmVersion(
        algorithm_id=algorithm.id,
        version="1",
        image_reference=tag,
        image_digest=inspect_image(tag, docker_client).digest,
        status=VersionStatus.ACTIVE,
    )
    session.add(version)
    session.flush()
    return version


def wait_until(
    predicate: Callable[[], bool], timeout_s: float, what: str, workers: Workers
) -> None:
    live.wait_for(predicate, timeout_s, what, logs=workers.logs)


def all_finished(ids: list[int]) -> Callable[[], bool]:
    def check() -> bool:
        with session_scope() as session:
            statuses = session.scalars(select(Evaluation.status).where(Evaluation.id.in_(ids)))
            return all(s.finished for s in statuses)

    return check


HOSTILE = {
    "sleeper": (RunOutcome.TIMEOUT, "time limit"),
    "memhog": (RunOutcome.OUT_OF_MEMORY, "memory limit"),
    "crasher": (RunOutcome.CRASHED, "exited with code 3"),
    "silent": (RunOutcome.NO_OUTPUT, "wrote no /output/"),
    "malformed": (RunOutcome.INVALID_OUTPUT, "row 2"),
    "network": (RunOutcome.OK, ""),
    "escape": (RunOutcome.OK, ""),
    "forkbomb": (RunOutcome.TIMEOUT, "time limit"),
    "chatty": (RunOutcome.TIMEOUT, "time limit"),
    "bigoutput": (RunOutcome.INVALID_OUTPUT, "/output"),
}


def test_hostile_images_through_the_pipeline_leave_other_results_intact(
    celery_env: tuple[Workers, str], test_images: dict[str, str], docker_client: Any, tmp_path: Path
) -> None:
    workers, _host = celery_env
    one = [Rec("sub-01", "run-00", 600, ((1, 2),))]
    two = [Rec("sub-01", "run-00", 600, ((1, 2),)), Rec("sub-02", "run-00", 600, ((300, 20),))]
    hostile_data = make_prepared_dataset(tmp_path / "one", one)
    good_data = make_prepared_dataset(tmp_path / "two", two, seed=1)
    with session_scope() as session:
        good_world = seed_world(
            session, good_data, two, slug="good", digest="sha256:" + "1" * 64, run_limits=LIMITS
        )
        hostile_world = seed_world(
            session,
            hostile_data,
            one,
            slug="hostile",
            digest="sha256:" + "2" * 64,
            run_limits=LIMITS,
        )
        # Near its limit a cgroup reclaims page cache before it kills: on a loaded machine
        # that is slow, so the memory hog gets a dataset with a generous time limit.
        mem_data = make_prepared_dataset(tmp_path / "mem", one, seed=2)
        mem_world = seed_world(
            session,
            mem_data,
            one,
            slug="hostile-mem",
            digest="sha256:" + "3" * 64,
            run_limits={**LIMITS, "timeout_s": 120},
        )
        good = add_version(session, test_images["good"], docker_client)
        ids = {
            "good-first": evaluations.create_evaluation(
                session, algorithm_version=good, dataset_version=good_world.dataset_version
            ).id
        }
        for name in HOSTILE:
            version = add_version(session, test_images[name], docker_client)
            world = mem_world if name == "memhog" else hostile_world
            ids[name] = evaluations.create_evaluation(
                session, algorithm_version=version, dataset_version=world.dataset_version
            ).id
        ids["good-last"] = evaluations.create_evaluation(
            session,
            algorithm_version=good,
            dataset_version=good_world.dataset_version,
            reuse=False,
        ).id
    worker = workers.start("hostile")
    wait_until(all_finished(list(ids.values())), 240, "every evaluation", workers)
    assert worker.poll() is None, "the worker must survive every hostile image"
    with session_scope() as session:
        for name, (outcome, text) in HOSTILE.items():
            ev = session.get_one(Evaluation, ids[name])
            assert ev.status == EvaluationStatus.DONE, (name, ev.message)
            (run,) = ev.runs
            assert run.outcome == outcome, (name, run.submitter_message, run.admin_log[-500:])
            assert text in run.submitter_message, (name, run.submitter_message)
            assert str(tmp_path) not in run.submitter_message
            assert run.worker_host == _host
            # The submitter's faults are outcomes, never retried.
            assert run.attempts == 1
            assert ev.result is not None
        for key in ("good-first", "good-last"):
            ev = session.get_one(Evaluation, ids[key])
            assert ev.status == EvaluationStatus.DONE
            assert [r.outcome for r in ev.runs] == [RunOutcome.OK, RunOutcome.OK]
            # sub-01's seizure (1-3 s) is found; sub-02's (300-320 s) is not.
            assert [r.event_tp for r in ev.runs] == [1, 0]
            assert ev.result is not None
            assert ev.result.event_sensitivity == pytest.approx(0.5)
            assert all(r.reused_from_id is None for r in ev.runs)


@pytest.fixture
def slow_image(test_images: dict[str, str], docker_client: Any, tmp_path: Path) -> str:
    from szbench_worker.docker_runner import build_image

    context = tmp_path / "slow-image"
    context.mkdir()
    (context / "run.py").write_text(SLOW_GOOD)
    (context / "Dockerfile").write_text(
        'FROM szbench/python-numpy:bookworm\nCOPY run.py /run.py\nCMD ["python3", "/run.py"]\n'
    )
    tag = "szbench-test/pipeline-slow:latest"
    build_image(context, tag, docker_client)
    return tag


def our_containers(docker_client: Any, host: str) -> list[Any]:
    # ignore_removed: the SDK inspects each listed container; the worker may remove one in
    # between (a finished run's), which is then simply not there.
    return docker_client.containers.list(
        all=True, filters={"label": f"org.szbench.worker-host={host}"}, ignore_removed=True
    )


def test_worker_killed_mid_evaluation_completes_after_restart_exactly_once(
    celery_env: tuple[Workers, str], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host = celery_env
    recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in range(1, 5)]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(session, data, recs, run_limits={**LIMITS, "timeout_s": 60})
        version = add_version(session, slow_image, docker_client)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=version, dataset_version=world.dataset_version
        ).id
    first = workers.start("first")

    def container_running() -> bool:
        return any(c.status == "running" for c in our_containers(docker_client, host))

    wait_until(container_running, 60, "a running container", workers)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.RUNNING
        assert ev.recordings_done < 4
        interrupted = session.scalars(
            select(RecordingRun.id).where(
                RecordingRun.evaluation_id == evaluation_id,
                RecordingRun.started_at.is_not(None),
                RecordingRun.finished_at.is_(None),
            )
        ).all()
    assert len(interrupted) == 1
    # The killed worker's container is still there until a worker on this host starts.
    assert our_containers(docker_client, host)

    # Redis hands an unacknowledged message back once it is older than the visibility
    # timeout (8 s here, hours in production), checked when a worker starts and every
    # 100 s after: restart the worker once it is due, as an operator's restart would be.
    time.sleep(VISIBILITY_S + 1)
    workers.start("second")
    wait_until(all_finished([evaluation_id]), 90, "the evaluation", workers)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE, ev.message
        assert (ev.recordings_done, ev.recordings_total) == (4, 4)
        runs = ev.runs
        assert len(runs) == 4
        assert all(r.outcome == RunOutcome.OK and r.finished_at is not None for r in runs)
        assert all(r.event_tp == 1 for r in runs)
        by_id = {r.id: r for r in runs}
        assert by_id[interrupted[0]].attempts == 2
        assert sum(r.attempts for r in runs) == 5
        assert (
            session.scalar(
                select(func.count(DatasetResult.id)).where(
                    DatasetResult.evaluation_id == evaluation_id
                )
            )
            == 1
        )
        assert ev.result is not None
        assert ev.result.event_sensitivity == pytest.approx(1.0)
    assert not [c for c in our_containers(docker_client, host) if c.status == "running"]


def _slow_evaluation_running(
    workers: Workers,
    host: str,
    slow_image: str,
    docker_client: Any,
    tmp_path: Path,
    *,
    recordings: int,
    worker: str,
) -> tuple[int, subprocess.Popen[bytes]]:
    """An evaluation of the slow image, with a worker started and a container running."""
    recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in range(1, recordings + 1)]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(session, data, recs, run_limits={**LIMITS, "timeout_s": 60})
        version = add_version(session, slow_image, docker_client)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=version, dataset_version=world.dataset_version
        ).id
    process = workers.start(worker)
    wait_until(
        lambda: any(c.status == "running" for c in our_containers(docker_client, host)),
        60,
        "a running container",
        workers,
    )
    return evaluation_id, process


def test_warm_shutdown_finishes_the_run_in_progress(
    celery_env: tuple[Workers, str], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host = celery_env
    evaluation_id, first = _slow_evaluation_running(
        workers, host, slow_image, docker_client, tmp_path, recordings=3, worker="warm"
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0
    with session_scope() as session:
        runs = session.scalars(
            select(RecordingRun).where(RecordingRun.evaluation_id == evaluation_id)
        ).all()
        started = [r for r in runs if r.started_at is not None]
        # The run in progress was finished and stored, not abandoned.
        assert started
        assert all(r.finished_at is not None for r in started)
        assert all(r.attempts == 1 for r in started)
        assert all(r.attempts == 0 for r in runs if r.started_at is None)
    assert our_containers(docker_client, host) == []
    workers.start("after")
    wait_until(all_finished([evaluation_id]), 60, "the evaluation", workers)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        assert all(r.attempts == 1 for r in ev.runs)


def test_a_worker_without_its_engine_takes_no_runs_and_says_why(
    celery_env: tuple[Workers, str], tmp_path: Path
) -> None:
    """The Docker daemon unreachable: the worker takes no run (no attempt, no retry spent on
    the algorithm), says why in its heartbeat, and the evaluation waits (issue 21 point 8)."""
    workers, _host = celery_env
    recs = [Rec("sub-01", "run-00", 600, ((100, 20),))]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(session, data, recs, digest="sha256:" + "9" * 64)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        ).id
    workers.env = {
        **workers.env,
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock",
        "SZBENCH_TASK_MAX_RETRIES": "2",
        "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "1",
    }
    workers.start("nodocker")
    wait_until(lambda: "taking no runs" in workers.logs(), 60, "the host check", workers)
    time.sleep(5)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status in (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING)
        assert all(run.attempts == 0 and run.finished_at is None for run in ev.runs)
        (fault,) = session.scalars(select(WorkerHeartbeat.fault)).all()
        assert fault == "the container engine of this host does not answer"
    log = (workers.log_dir / "nodocker.log").read_text(errors="replace")
    assert "retry: Retry in" not in log


@pytest.fixture
def direct_docker(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """The pipeline called directly (no broker: sends captured) with the real Docker runner."""
    from szbench_worker import pipeline

    host = f"pipeline-test-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_WORKER_HOST": host,
    }
    live.use_settings(settings_env, values)
    pipeline.set_dependencies(None)
    sent: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    try:
        yield sent
    finally:
        queue.set_sender(None)
        pipeline.set_dependencies(None)
        with session_scope() as session:
            truncate_all(session)


def test_smoke_test_loads_the_uploaded_tarball_and_activates(
    direct_docker: list[Any], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    from szbench_worker import pipeline
    from szbench_worker.docker_runner import build_image, inspect_image
    from szbench_worker.runner import ImageError

    # A fresh image, saved as an upload and removed from the engine: the worker must load it.
    context = tmp_path / "upload-image"
    context.mkdir()
    (context / "run.py").write_text(SLOW_GOOD)
    (context / "Dockerfile").write_text(
        f'FROM {slow_image}\nENV SLOW_S=0 MARKER={uuid.uuid4().hex}\nCMD ["python3", "/run.py"]\n'
    )
    tag = f"szbench-test/pipeline-upload:{uuid.uuid4().hex[:8]}"
    digest = build_image(context, tag, docker_client).digest
    (tmp_path / "uploads" / "images").mkdir(parents=True)
    tarball = tmp_path / "uploads" / "images" / "upload.tar"
    subprocess.run(["docker", "save", "-o", str(tarball), tag], check=True)
    docker_client.images.remove(tag, force=True)
    with pytest.raises(ImageError):
        inspect_image(digest, docker_client)

    recs = [Rec("sub-01", "run-00", 600, ((100, 20),))]
    sample = make_prepared_dataset(tmp_path / "sample", recs)
    held = make_prepared_dataset(tmp_path / "held", recs, seed=3)
    with session_scope() as session:
        world = seed_world(
            session,
            sample,
            recs,
            slug="public-sample",
            kind=DatasetKind.PUBLIC_SAMPLE,
            digest=digest,
            status=VersionStatus.PENDING,
        )
        world.version.image_reference = None
        world.version.tarball_path = "images/upload.tar"
        bad = AlgorithmVersion(
            algorithm_id=world.version.algorithm_id,
            version="broken",
            image_digest="sha256:" + "e" * 64,
            tarball_path="images/broken.tar",
            status=VersionStatus.PENDING,
        )
        session.add(bad)
        seed_world(session, held, recs, slug="held", digest=digest)
        version_id, bad_id = world.version.id, bad.id
    (tmp_path / "uploads" / "images" / "broken.tar").write_bytes(b"not an image archive")
    try:
        outcome = pipeline.smoke_test(version_id)
        assert outcome.status == VersionStatus.ACTIVE, outcome.message
        assert outcome.evaluations_queued == 1
        assert inspect_image(digest, docker_client).digest == digest
        with session_scope() as session:
            smoke = session.scalars(
                select(Evaluation).where(
                    Evaluation.algorithm_version_id == version_id,
                    Evaluation.kind == EvaluationKind.SMOKE_TEST,
                )
            ).one()
            (run,) = smoke.runs
            assert run.outcome == RunOutcome.OK
            assert run.event_tp == 1
        assert queue.TASK_START_EVALUATION in [name for name, _, _ in direct_docker]

        rejected = pipeline.smoke_test(bad_id)
        assert rejected.status == VersionStatus.REJECTED
        assert "broken.tar" in rejected.message
        assert str(tmp_path) not in rejected.message
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(digest, force=True)


def test_cold_shutdown_hands_the_run_back_and_removes_its_container(
    celery_env: tuple[Workers, str], slow_image: str, docker_client: Any, tmp_path: Path
) -> None:
    workers, host = celery_env
    evaluation_id, first = _slow_evaluation_running(
        workers, host, slow_image, docker_client, tmp_path, recordings=2, worker="cold"
    )
    first.send_signal(signal.SIGQUIT)
    first.wait(60)
    # The interrupted run's container and staging are gone with the worker.
    assert our_containers(docker_client, host) == []
    assert list((tmp_path / "runs").glob("run-*")) == []
    with session_scope() as session:
        unfinished = session.scalars(
            select(RecordingRun).where(
                RecordingRun.evaluation_id == evaluation_id, RecordingRun.finished_at.is_(None)
            )
        ).all()
        assert unfinished
    # Handed back to the queue at once (no visibility timeout to wait for).
    workers.start("cold-after")
    wait_until(all_finished([evaluation_id]), 90, "the evaluation", workers)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        assert ev.recordings_done == 2
        assert all(r.outcome == RunOutcome.OK for r in ev.runs)
        assert sorted(r.attempts for r in ev.runs) == [1, 2]
    assert "handed back" in (workers.log_dir / "cold.log").read_text(errors="replace")


@pytest.mark.parametrize("moment", ["created", "watchdog", "removing"])
def test_cold_shutdown_leaves_no_container_wherever_it_lands(
    celery_env: tuple[Workers, str],
    slow_image: str,
    docker_client: Any,
    tmp_path: Path,
    moment: str,
) -> None:
    """SIGQUIT raises into the task on whatever line it is: here, just after the engine
    created the container (before the runner holds it), before the runner's watchdog thread
    has run (the failure once seen on a loaded machine), or in the runner's own cleanup."""
    workers, host = celery_env
    recs = [Rec("sub-01", "run-00", 600, ((100, 20),))]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(session, data, recs, run_limits={**LIMITS, "timeout_s": 60})
        version = add_version(session, slow_image, docker_client)
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=version, dataset_version=world.dataset_version
        ).id
    workers.env = {**workers.env, "SZBENCH_TEST_INTERRUPT_AT": moment}
    worker = workers.start(moment, entry="tests.worker._interrupting_worker")
    worker.wait(60)
    log = (workers.log_dir / f"{moment}.log").read_text(errors="replace")
    assert "handed back" in log, workers.logs()
    assert our_containers(docker_client, host) == [], workers.logs()
    assert list((tmp_path / "runs").glob("run-*")) == []
    with session_scope() as session:
        (run,) = session.get_one(Evaluation, evaluation_id).runs
        assert run.finished_at is None
        assert run.attempts == 1
