#!/usr/bin/env python3
"""Fault drill: run evaluations through the real pipeline while breaking its parts.

Starts its own PostgreSQL (``initdb``/``pg_ctl``) and Redis (``redis-server``) on free
ports under a scratch folder, a Docker engine of its own (a second ``dockerd`` in a network
namespace of its own, with its own data-root, exec-root, pidfile and socket: the drill stops
it, never the host's engine), a prefork ``celery worker`` (concurrency 1) for the ``cpu``
and ``score`` queues and the scheduler (``worker --beat -Q maintenance,score``), as
docker-compose.yml does. The
runner's work directory (``SZBENCH_RUNNER_WORK_DIR``) is a tmpfs of the drill's own, 64 MiB
over the default ``SZBENCH_WORKER_MIN_FREE_BYTES``, so that it can be filled. The algorithm
is a small image built from the local base image that sleeps a few seconds and writes one
detection per recording. First an undisturbed evaluation (the reference), then one fresh
evaluation (no reuse) per fault:

- ``malformed-message``: a message that is not JSON pushed onto the ``cpu`` queue just
  before the evaluation is submitted (the worker must dead-letter it and go on);
- ``full-work-dir``: the runner's work directory filled to its last byte mid-run for
  ``--full-s`` seconds (default 120), then emptied;
- ``engine-outage``: the drill's Docker engine stopped mid-run for ``--engine-outage-s``
  seconds (default 180), then started again;

- ``worker-kill``: the whole worker (main process and pool) killed with SIGKILL mid-run,
  then started again on the same host;
- ``child-kill``: the pool process running the container killed with SIGKILL;
- ``redis-empty``: Redis killed mid-evaluation and started again empty;
- ``postgres-stop``: PostgreSQL stopped (immediate) for ``--pg-outage-s`` mid-run;
- ``broker-down-submit``: Redis down while the evaluation is submitted (its start task
  cannot be sent), started again empty a few seconds later;
- ``clock-ahead-killed``: a worker whose clock runs an hour ahead (libfaketime, as another
  host's clock would be off) takes a run and is killed with SIGKILL, never to return; the
  regular worker starts again, and only the reconciler, judging the dead worker by its
  heartbeat's age on the database's clock, can give the run back;
- ``clock-behind``: a worker whose clock runs ten minutes behind does the whole
  evaluation; the drill checks that every stored time is in order and that the
  evaluation's page never said that no worker served its queue.

Every timer is the shipped default (heartbeat, reconciler, retry backoff, visibility
timeout) unless an option below sets it; the header of the output says which were changed.

Per fault it prints: recovered (DONE within ``--timeout-s``), seconds from the fault to
DONE, stored results per recording (must be 1), containers started per recording (the
run's ``attempts``), and whether every recording's counts and the dataset's scores equal
the undisturbed run's. Exit status 1 when any fault did not recover or changed a score.

Run (root, with the Docker engine and the base image: scripts/test-services.sh)::

    .venv/bin/python scripts/fault_drill.py [--recordings 4] [--pg-outage-s 60] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from tests.worker._pipeline_factories import Rec, make_prepared_dataset  # noqa: E402

BASE_IMAGE = "szbench/python-numpy:bookworm"
IMAGE = "szbench-drill/slow-detector:latest"
RUN_PY = """import os, time
from pathlib import Path
time.sleep(float(os.environ.get("SLOW_S", "3")))
h = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
d = int(h[236:244]) * float(h[244:252])
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"100.0\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{d:.1f}\\n")
"""
FAULTS = (
    "malformed-message",
    "full-work-dir",
    "engine-outage",
    "worker-kill",
    "child-kill",
    "redis-empty",
    "postgres-stop",
    "broker-down-submit",
    "clock-ahead-killed",
    "clock-behind",
)
#: Timers the drill may shorten: option name -> setting. None (the default): shipped value.
TIMERS = {
    "heartbeat_s": "SZBENCH_WORKER_HEARTBEAT_INTERVAL_S",
    "heartbeat_timeout_s": "SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S",
    "reconcile_interval_s": "SZBENCH_RECONCILE_INTERVAL_S",
    "stale_s": "SZBENCH_RECONCILE_STALE_S",
    "claim_grace_s": "SZBENCH_RECONCILE_CLAIM_GRACE_S",
    "backoff_max_s": "SZBENCH_TASK_RETRY_BACKOFF_MAX_S",
}
MiB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise SystemExit(f"{name} not found (install postgresql)")


class Postgres:
    """A scratch PostgreSQL cluster (run as the ``postgres`` user when this is root)."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "pg"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        # Never a pipe: the server that pg_ctl starts would hold it open, and we would wait.
        subprocess.run(
            [*self._as, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def init(self) -> None:
        self.dir.mkdir()
        if self._as:
            shutil.chown(self.dir, "postgres", "postgres")
            (self.dir.parent / "postgres.log").touch()
            shutil.chown(self.dir.parent / "postgres.log", "postgres", "postgres")
            os.chmod(self.dir.parent, 0o755)  # noqa: S103 (postgres must reach its cluster)
        self._run(_pg_bin("initdb"), "-D", str(self.dir), "-U", "postgres", "--auth=trust")
        self.start()

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        log = str(self.dir.parent / "postgres.log")
        self._run(_pg_bin("pg_ctl"), "-D", str(self.dir), "-o", opts, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.dir), "-m", "immediate", "-w", "stop")


class Redis:
    """A scratch ``redis-server`` without persistence: a restart starts it empty."""

    def __init__(self, root: Path) -> None:
        self.dir = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.dir)]
        binary = shutil.which("redis-server") or "redis-server"
        self.proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if redis.Redis.from_url(self.url).ping():
                    return
            time.sleep(0.1)
        raise SystemExit("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Dockerd:
    """A second dockerd of the drill's own, which it may stop and start (never the host's
    engine, never the host's network: ``--bridge none`` in the host's network namespace
    would delete the host's docker0)."""

    def __init__(self) -> None:
        # Short: containerd's sockets live under the exec-root (a path length limit).
        self.root = Path(tempfile.mkdtemp(prefix="szdrill-", dir="/tmp"))
        self.url = f"unix://{self.root / 'docker.sock'}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import docker

        args = ["unshare", "--net", "--", "dockerd", "--data-root", str(self.root / "data")]
        args += ["--exec-root", str(self.root / "x"), "--pidfile", str(self.root / "docker.pid")]
        args += ["-H", self.url, "--bridge", "none", "--iptables=false", "--ip6tables=false"]
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                docker.DockerClient(base_url=self.url, timeout=5).ping()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"the drill's dockerd did not start; see {self.root / 'dockerd.log'}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        import docker

        with contextlib.suppress(Exception):
            client = docker.DockerClient(base_url=self.url, timeout=30)
            for container in client.containers.list(all=True):
                container.remove(force=True)
        self.stop()
        subprocess.run(["umount", "-R", "-l", str(self.root)], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


class SmallDisk:
    """A tmpfs just over the default free-space floor, for a work directory to fill."""

    def __init__(self, root: Path, size_bytes: int) -> None:
        self.path = root / "small-disk"
        self.path.mkdir()
        size = f"size={size_bytes}"
        subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(self.path)], check=True)
        self.filler = self.path / "filler"

    def fill(self) -> None:
        st = os.statvfs(self.path)
        # The last byte: whatever else the runner tries to write there fails (ENOSPC).
        free = st.f_bavail * st.f_frsize
        subprocess.run(["fallocate", "-l", str(free), str(self.filler)], check=True)

    def empty(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remove(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


class Worker:
    """A ``celery worker`` process in its own session (so kill -9 can take its pool too)."""

    def __init__(self, name: str, env: dict[str, str], log: Path, *args: str) -> None:
        self.name, self.env, self.log, self.args = name, env, log, args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
        cmd += ["-n", f"{self.name}@%h", "--without-mingle", "--without-gossip", *self.args]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        size = self.log.stat().st_size
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(max(0, size - 200))
                if b"ready." in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"worker {self.name} did not start; see {self.log}")

    def kill_all(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill_all()


@dataclass
class Outcome:
    fault: str
    recovered: bool
    seconds: float
    results_per_recording: set[int]
    attempts_max: int
    scores_equal: bool
    status: str
    note: str = ""


def build_image() -> str:
    """The drill's image, built on the host's engine (where the base image is)."""
    from szbench_worker.docker_runner import build_image as build
    from szbench_worker.docker_runner import connect

    with tempfile.TemporaryDirectory() as ctx:
        (Path(ctx) / "run.py").write_text(RUN_PY)
        (Path(ctx) / "Dockerfile").write_text(
            f'FROM {BASE_IMAGE}\nCOPY run.py /run.py\nCMD ["python3", "/run.py"]\n'
        )
        return build(Path(ctx), IMAGE, connect()).digest


def load_image(digest: str, engine: Dockerd) -> None:
    """The image (with its base layers) into the drill's engine, by the same id."""
    import docker

    from szbench_worker.docker_runner import connect

    saved = connect().api.get_image(digest)
    client = docker.DockerClient(base_url=engine.url, timeout=300)
    client.api.load_image(b"".join(saved))
    client.images.get(digest)  # raises when the load did not give it


def seed(prepared: Path, digest: str, timeout_s: int) -> tuple[int, int]:
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, User, VersionStatus

    with session_scope() as session:
        user = User(email="drill@example.org")
        session.add(user)
        session.flush()
        algorithm = Algorithm(owner_id=user.id, name="slow-detector")
        session.add(algorithm)
        session.flush()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="1",
            image_digest=digest,
            image_reference=IMAGE,
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        limits = {"timeout_s": timeout_s, "memory_bytes": 256 * 1024**2, "cpus": 1}
        dataset = create_dataset(session, slug="drill", run_limits=limits)
        dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
        session.flush()
        return version.id, dv.id


def submit(version_id: int, dv_id: int) -> int:
    """A fresh evaluation (no reuse); its id even when its start task could not be sent."""
    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import AlgorithmVersion, DatasetVersion, Evaluation

    created: list[int] = []
    try:
        with session_scope() as session:
            evaluation = create_evaluation(
                session,
                algorithm_version=session.get_one(AlgorithmVersion, version_id),
                dataset_version=session.get_one(DatasetVersion, dv_id),
                reuse=False,
            )
            created.append(evaluation.id)
    except Exception as exc:  # the broker is down: committed, not sent
        print(f"    submit: {type(exc).__name__}: {exc}")
    if created:
        return created[0]
    with session_scope() as session:
        from sqlalchemy import func, select

        return int(session.scalar(select(func.max(Evaluation.id))) or 0)


def _retrying(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None while the database is away."""
    import sqlalchemy.exc

    from szbench import db

    try:
        return fn()
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError):
        db.reset_engine()
        return None


def status(evaluation_id: int) -> str | None:
    from szbench.db import session_scope
    from szbench.models import Evaluation

    def read() -> str:
        with session_scope() as session:
            return session.get_one(Evaluation, evaluation_id).status.value

    return _retrying(read)


def wait_finished(evaluation_id: int, timeout_s: float) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = status(evaluation_id)
        if state in ("done", "failed", "cancelled"):
            return state == "done", state
        time.sleep(0.5)
    return False, str(status(evaluation_id))


def running_container(host: str, timeout_s: float = 120) -> Any:
    from szbench_worker.docker_runner import LABEL_HOST, connect

    client = connect()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in client.containers.list(filters={"label": f"{LABEL_HOST}={host}"}):
            if c.status == "running":
                return c
        time.sleep(0.2)
    raise SystemExit("no container started")


def snapshot(
    evaluation_id: int,
) -> tuple[dict[int, tuple[Any, ...]], dict[str, Any], dict[int, int], int]:
    """Per recording: counts; dataset metrics; results per recording; max attempts."""
    from sqlalchemy import func, select

    from szbench.db import session_scope
    from szbench.models import DatasetResult, Evaluation, RecordingRun

    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        counts = {
            r.recording_id: (
                r.outcome.value if r.outcome else None,
                r.event_tp,
                r.event_fp,
                r.event_fn,
                r.sample_tp,
                r.sample_fp,
                r.sample_fn,
            )
            for r in ev.runs
        }
        per_recording = dict(
            session.execute(
                select(RecordingRun.recording_id, func.count(RecordingRun.id))
                .where(
                    RecordingRun.evaluation_id == evaluation_id,
                    RecordingRun.finished_at.is_not(None),
                )
                .group_by(RecordingRun.recording_id)
            ).all()
        )
        results = session.scalar(
            select(func.count(DatasetResult.id)).where(DatasetResult.evaluation_id == evaluation_id)
        )
        metrics = {}
        if ev.result is not None:
            metrics = {
                k: getattr(ev.result, k)
                for k in (
                    "event_sensitivity",
                    "event_precision",
                    "event_f1",
                    "event_fp_rate",
                    "sample_sensitivity",
                    "sample_precision",
                    "sample_f1",
                    "sample_fp_rate",
                )
            }
        metrics["dataset_results"] = results
        attempts = max((r.attempts for r in ev.runs), default=0)
        return counts, metrics, per_recording, attempts


@contextlib.contextmanager
def stack(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    from szbench.config import Settings

    root = Path(tempfile.mkdtemp(prefix="szbench-drill-"))
    pg, broker = Postgres(root), Redis(root)
    engine = Dockerd()
    disk: SmallDisk | None = None
    workers: list[Worker] = []
    other_hosts: list[str] = []  # hosts of workers a fault started (removed at the end)
    try:
        pg.init()
        broker.start()
        engine.start()
        load_image(args.digest, engine)
        disk = SmallDisk(root, Settings().worker_min_free_bytes + 64 * MiB)
        host = f"drill-{uuid.uuid4().hex[:6]}"
        timers = {
            setting: str(getattr(args, option))
            for option, setting in TIMERS.items()
            if getattr(args, option) is not None
        }
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(["platform", "worker", "scoring"]),
            "SZBENCH_DATA_DIR": str(root / "data"),
            "SZBENCH_DATABASE_URL": pg.url,
            "SZBENCH_BROKER_URL": broker.url,
            "SZBENCH_RUNNER_BACKEND": "docker",
            "SZBENCH_RUNNER_WORK_DIR": str(disk.path / "runs"),
            "SZBENCH_PIPELINE_WORK_DIR": str(root / "work"),
            "SZBENCH_WORKER_HOST": host,
            "SZBENCH_LOG_LEVEL": "INFO",
            "DOCKER_HOST": engine.url,
            **timers,
        }
        # Shipped defaults for every timer not named above, whatever this shell exports.
        for setting in (*TIMERS.values(), "SZBENCH_QUEUE_VISIBILITY_TIMEOUT_S"):
            if setting not in timers:
                env.pop(setting, None)
                os.environ.pop(setting, None)
        env.pop("SZBENCH_WORKER_MIN_FREE_BYTES", None)
        os.environ.pop("SZBENCH_WORKER_MIN_FREE_BYTES", None)
        os.environ.update(
            {k: v for k, v in env.items() if k.startswith("SZBENCH_") or k == "DOCKER_HOST"}
        )
        from szbench import db, migrate, queue
        from szbench.config import get_settings

        get_settings.cache_clear()
        db.reset_engine()
        queue.reset_celery()
        migrate.upgrade(pg.url)
        run = Worker(
            "run",
            env,
            root / "worker.log",
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "-Q",
            "cpu,score",
            "--loglevel",
            "INFO",
        )
        scheduler = Worker(
            "scheduler",
            env,
            root / "scheduler.log",
            "--pool",
            "solo",
            "--beat",
            "-Q",
            "maintenance,score",
            "--loglevel",
            "INFO",
        )
        workers += [run, scheduler]
        run.start()
        scheduler.start()
        yield {
            "root": root,
            "pg": pg,
            "redis": broker,
            "engine": engine,
            "disk": disk,
            "run": run,
            "scheduler": scheduler,
            "host": host,
            "env": env,
            "workers": workers,
            "other_hosts": other_hosts,
        }
    finally:
        for w in workers:
            w.stop()
        broker.kill()
        with contextlib.suppress(Exception):
            pg.stop()
        if "host" in locals():
            with contextlib.suppress(Exception):
                from szbench_worker.docker_runner import cleanup_orphans

                cleanup_orphans(host=host, everything=True)
                for other in other_hosts:
                    cleanup_orphans(host=other, everything=True)
        engine.remove()
        if disk is not None:
            disk.remove()
        if args.keep:
            print(f"scratch folder kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def apply(
    fault: str, s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    """Submit an evaluation, apply ``fault``; return its id and the moment of the fault."""
    from szbench import queue

    if fault in CLOCK_FAULTS:
        return clock_skew(fault, s, submit_it)
    if fault == "malformed-message":
        import redis

        # Onto the list the worker consumes, ahead of the evaluation's tasks.
        redis.Redis.from_url(s["redis"].url).lpush("cpu", b"{not json, no task")
        t = time.monotonic()
        return submit_it(), t
    if fault == "broker-down-submit":
        s["redis"].kill()
        t = time.monotonic()
        evaluation_id = submit_it()
        time.sleep(5)
        s["redis"].start()
        queue.reset_celery()
        return evaluation_id, t
    evaluation_id = submit_it()
    container = running_container(s["host"])
    t = time.monotonic()
    if fault == "worker-kill":
        s["run"].kill_all()
        s["run"].start()
    elif fault == "child-kill":
        os.kill(int(container.labels["org.szbench.owner"].split(".")[0]), signal.SIGKILL)
    elif fault == "redis-empty":
        s["redis"].kill()
        s["redis"].start()
        queue.reset_celery()
    elif fault == "postgres-stop":
        s["pg"].stop()
        time.sleep(args.pg_outage_s)
        s["pg"].start()
    elif fault == "full-work-dir":
        s["disk"].fill()
        time.sleep(args.full_s)
        s["disk"].empty()
    elif fault == "engine-outage":
        s["engine"].stop()
        time.sleep(args.engine_outage_s)
        s["engine"].start()
    return evaluation_id, t


# --- clock skew on one worker (issue 29.3) ------------------------------------------------

CLOCK_FAULTS = {"clock-ahead-killed": "+1h", "clock-behind": "-10m"}


def clock_skew(fault: str, s: dict[str, Any], submit_it: Callable[[], int]) -> tuple[int, float]:
    """The regular run worker gives way to one on a skewed clock (libfaketime: the Debian
    package ``faketime``, scripts/test-services.sh). ``clock-ahead-killed``: it takes a run
    and is killed, and the regular worker starts again; the fault's moment is the kill.
    ``clock-behind``: it does the whole evaluation; the moment is the submission, and the
    drill reads the evaluation's hold while the container runs."""
    from tests.worker._live_services import faketime_env

    ahead = fault == "clock-ahead-killed"
    host = f"{s['host']}-{'ahead' if ahead else 'behind'}"
    s["other_hosts"].append(host)
    env = {**s["env"], **faketime_env(CLOCK_FAULTS[fault]), "SZBENCH_WORKER_HOST": host}
    # The regular worker's own options, on the skewed clock.
    skewed = Worker(fault, env, s["root"] / f"{fault}.log", *s["run"].args)
    s["run"].stop()
    s["workers"].append(skewed)
    skewed.start()
    s["skewed"] = skewed
    submitted = time.monotonic()
    evaluation_id = submit_it()
    running_container(host)
    if ahead:
        t = time.monotonic()
        skewed.kill_all()
        s["run"].start()
        return evaluation_id, t
    s["holds"] = []
    from szbench.db import session_scope
    from szbench.evaluations.holds import platform_hold
    from szbench.models import Evaluation

    while status(evaluation_id) not in ("done", "failed", "cancelled", None):
        with session_scope() as session:
            evaluation = session.get_one(Evaluation, evaluation_id)
            s["holds"].append(platform_hold(session, evaluation))
        time.sleep(1)
    return evaluation_id, submitted


def clock_skew_check(fault: str, s: dict[str, Any], evaluation_id: int) -> tuple[str, bool]:
    """After the evaluation: every stored time in order (submission <= each run's start <=
    its finish <= the evaluation's finish), what held it, and the regular worker back."""
    from szbench.db import session_scope
    from szbench.models import Evaluation

    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        in_order = ev.started_at is not None and ev.finished_at is not None
        in_order = in_order and ev.created_at <= ev.started_at <= ev.finished_at
        for run in ev.runs:
            in_order = in_order and run.started_at is not None and run.finished_at is not None
            in_order = in_order and ev.created_at <= run.started_at <= run.finished_at
            in_order = in_order and run.finished_at <= ev.finished_at
    note = f"times in order: {'yes' if in_order else 'NO'}"
    if fault == "clock-behind":
        holds = sorted({h for h in s.pop("holds", []) if h})
        note += f", held while running: {holds[0] if holds else 'never'}"
        in_order = in_order and not holds
        s["skewed"].stop()
        s["run"].start()
    return note, in_order


def dead_letters(s: dict[str, Any]) -> int:
    import redis

    from szbench.broker import DEAD_LETTER_KEY

    with contextlib.suppress(redis.RedisError):
        return int(redis.Redis.from_url(s["redis"].url).llen(DEAD_LETTER_KEY))
    return -1


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--recordings", type=int, default=4)
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--pg-outage-s", type=float, default=60)
    p.add_argument("--full-s", type=float, default=120)
    p.add_argument("--engine-outage-s", type=float, default=180)
    p.add_argument("--timeout-s", type=float, default=1800)
    # Timers: the shipped defaults unless set (a shortened run says so in its header).
    for option in TIMERS:
        p.add_argument("--" + option.replace("_", "-"), type=float, default=None)
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (logs)")
    args = p.parse_args()
    changed = {o: getattr(args, o) for o in TIMERS if getattr(args, o) is not None}
    print(
        "timers: "
        + (
            "SHORTENED " + ", ".join(f"{TIMERS[o]}={v:g}" for o, v in changed.items())
            if changed
            else "the shipped defaults"
        )
    )
    faults = [f for f in args.faults.split(",") if f]
    for f in faults:
        if f not in FAULTS:
            raise SystemExit(f"unknown fault {f!r}; one of {', '.join(FAULTS)}")
    args.digest = digest = build_image()
    outcomes: list[Outcome] = []
    with stack(args) as s:
        recs = [
            Rec(f"sub-{i:02d}", "run-00", 600, ((100, 20),) if i % 2 else ((400, 20),))
            for i in range(1, args.recordings + 1)
        ]
        prepared = make_prepared_dataset(s["root"] / "prepared", recs)
        version_id, dv_id = seed(prepared, digest, timeout_s=120)
        t0 = time.monotonic()
        reference = submit(version_id, dv_id)
        ok, state = wait_finished(reference, args.timeout_s)
        undisturbed_s = time.monotonic() - t0
        if not ok:
            raise SystemExit(f"the undisturbed evaluation ended {state}; see the worker logs")
        ref_counts, ref_metrics, _, _ = snapshot(reference)
        print(f"undisturbed: {args.recordings} recordings in {undisturbed_s:.1f} s", flush=True)
        for fault in faults:
            print(f"== {fault}", flush=True)
            letters = dead_letters(s)
            worker_pid = s["run"].proc.pid
            evaluation_id, t = apply(fault, s, args, lambda: submit(version_id, dv_id))
            ok, state = wait_finished(evaluation_id, args.timeout_s)
            seconds = time.monotonic() - t
            counts, metrics, per_recording, attempts = _retrying(
                lambda eid=evaluation_id: snapshot(eid)
            ) or ({}, {}, {}, 0)
            outcome = Outcome(
                fault=fault,
                recovered=ok,
                seconds=seconds,
                results_per_recording=set(per_recording.values()) or {0},
                attempts_max=attempts,
                scores_equal=ok
                and metrics == ref_metrics
                and (sorted(counts.values()) == sorted(ref_counts.values())),
                status=state,
            )
            if fault == "malformed-message":
                outcome.note = f"dead letters +{dead_letters(s) - letters}, worker process " + (
                    "the same"
                    if s["run"].proc.pid == worker_pid and s["run"].proc.poll() is None
                    else "CHANGED"
                )
                if not outcome.note.startswith("dead letters +1,") or "CHANGED" in outcome.note:
                    outcome.scores_equal = False
            if fault in CLOCK_FAULTS:
                outcome.note, in_order = clock_skew_check(fault, s, evaluation_id)
                outcome.scores_equal = outcome.scores_equal and in_order
            outcomes.append(outcome)
            print(f"   {outcome}", flush=True)
    print()
    print(
        f"{'fault':20} {'recovered':9} {'to DONE (s)':>11} {'results/rec':>11} "
        f"{'max attempts':>12} {'scores equal':>12}"
    )
    for o in outcomes:
        per = ",".join(str(n) for n in sorted(o.results_per_recording))
        print(
            f"{o.fault:20} {'yes' if o.recovered else 'NO (' + o.status + ')':9} "
            f"{o.seconds:11.1f} {per:>11} {o.attempts_max:12d} "
            f"{'yes' if o.scores_equal else 'NO':>12}  {o.note}"
        )
    bad = [
        o
        for o in outcomes
        if not (o.recovered and o.scores_equal and o.results_per_recording == {1})
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
