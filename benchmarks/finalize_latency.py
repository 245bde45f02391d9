"""How long a finished evaluation waits to be DONE while other work is queued (issue 29.9).

Many evaluations are queued at once on real Redis, PostgreSQL and ``celery worker``
processes in the docker-compose shape: one run worker (``-Q cpu``, one slot) and the
scheduler (``--beat -Q maintenance``). Each evaluation has a few recordings, run by the
trusted local-process runner (a detector that works ``--run-s`` per recording: the routing
is measured here, not the engine). For every evaluation it takes, from the stored times (the
database's clock), the wait from its last stored run to DONE: the finalize's time in the
queue plus the aggregation.

Two routings, the same workload, in one run:

- **baseline (cpu)**: the finalize goes to the evaluation's ``cpu`` queue, as before issue
  29.9: behind every run queued there before it;
- **score queue**: the finalize goes to ``score`` (``szbench.queue.SCORE_TASKS``), which
  every worker consumes beside its own queues; the scheduler takes it while the run slot is
  busy.

It prints the waits per routing (median, mean, max) and the ratios baseline / score queue.

Run: ``python benchmarks/finalize_latency.py [--evaluations 8] [--recordings 4]
[--run-s 0.5]`` (PostgreSQL on 127.0.0.1:5432 with trust auth; ``redis-server`` installed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from sqlalchemy import create_engine, text  # noqa: E402

PG_ADMIN = os.environ.get(
    "SZBENCH_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DETECTOR = """import os, sys, time
from pathlib import Path
time.sleep(float(sys.argv[1]))
h = Path(os.environ["INPUT"]).read_bytes()[:256]
d = int(h[236:244]) * float(h[244:252])
Path(os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"100.0\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{d:.1f}\\n")
"""
#: ``python -c`` for a worker: the baseline arm puts the finalize back on the evaluation's
#: queue (every process that sends it: the run worker and the scheduler's reconciler).
WORKER = """import os, sys
if os.environ.get("BENCH_BASELINE_ROUTING") == "1":
    import szbench.queue
    szbench.queue.SCORE_TASKS = frozenset()
from celery.__main__ import main
sys.argv[0] = "celery"
main()
"""
ROUTINGS = {"baseline (cpu)": True, "score queue": False}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """A scratch PostgreSQL database, a scratch redis-server and the worker processes."""

    def __init__(self, tmp: Path) -> None:
        from szbench import migrate

        self.tmp = tmp
        self.db = f"szbench_bench_{uuid.uuid4().hex[:8]}"
        self.admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db}"'))
        self.url = PG_ADMIN.rsplit("/", 1)[0] + f"/{self.db}"
        migrate.upgrade(self.url)
        port = free_port()
        self.redis_url = f"redis://127.0.0.1:{port}/0"
        self.redis = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                *("--port", str(port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "no", "--dir", str(tmp)),
            ],
            stdout=subprocess.DEVNULL,
        )
        self.detector = tmp / "detector.py"
        self.detector.write_text(DETECTOR)
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
            "SZBENCH_DATABASE_URL": self.url,
            "SZBENCH_BROKER_URL": self.redis_url,
            "SZBENCH_DATA_DIR": str(tmp / "data"),
            "SZBENCH_RUNNER_BACKEND": "local",
            "SZBENCH_WORKER_HOST": f"bench-{uuid.uuid4().hex[:6]}",
            "SZBENCH_LOG_LEVEL": "INFO",
        }
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("SZBENCH_")})
        from szbench import db, queue
        from szbench.config import get_settings

        get_settings.cache_clear()
        db.reset_engine()
        queue.reset_celery()
        self.procs: list[subprocess.Popen[bytes]] = []
        self._wait_redis()

    def _wait_redis(self) -> None:
        import redis

        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if redis.Redis.from_url(self.redis_url).ping():
                    return
            time.sleep(0.1)
        raise SystemExit("redis-server did not start")

    def command(self, run_s: float) -> str:
        return f"python3 {self.detector} {run_s}"

    def start_workers(self, *, baseline: bool, run_s: float) -> None:
        env = {
            **self.env,
            "SZBENCH_RUNNER_LOCAL_COMMAND": self.command(run_s),
            "BENCH_BASELINE_ROUTING": "1" if baseline else "0",
        }
        arms = (
            ("run", ["-Q", "cpu", "--pool", "solo", "--concurrency", "1"]),
            ("scheduler", ["--beat", "-Q", "maintenance", "--pool", "solo"]),
        )
        for name, args in arms:
            log = self.tmp / f"{name}-{len(self.procs)}.log"
            cmd = [sys.executable, "-c", WORKER, "-A", "szbench_worker.celery_app", "worker"]
            cmd += [*args, "-n", f"{name}{len(self.procs)}@%h", "--without-mingle"]
            cmd += ["--without-gossip", "--loglevel", "INFO"]
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
                )
            self.procs.append(proc)
            deadline = time.monotonic() + 90
            while b"ready." not in log.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise SystemExit(f"worker {name} did not start:\n{tail}")
                time.sleep(0.2)

    def stop_workers(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(60)
        self.procs = []

    def close(self) -> None:
        from szbench import db

        self.stop_workers()
        self.redis.kill()
        self.redis.wait()
        db.reset_engine()
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)'))
        self.admin.dispose()


def seed(stack: Stack, evaluations: int, recordings: int, run_s: float) -> tuple[int, list[int]]:
    """The trusted local command's version and ``evaluations`` held-out dataset versions."""
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, User, VersionStatus
    from szbench_worker.local_runner import LocalProcessRunner
    from tests.worker._pipeline_factories import Rec, make_prepared_dataset

    digest = LocalProcessRunner(stack.command(run_s)).digest
    with session_scope() as session:
        user = User(email="bench@example.org")
        session.add(user)
        session.flush()
        algorithm = Algorithm(owner_id=user.id, name="local")
        session.add(algorithm)
        session.flush()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="1",
            image_digest=digest,
            image_reference=stack.command(run_s),
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        dataset_versions = []
        for i in range(evaluations):
            recs = [Rec(f"sub-{j:02d}", "run-00", 120, ((60, 20),)) for j in range(recordings)]
            prepared = make_prepared_dataset(stack.tmp / f"prepared-{i}", recs, seed=i)
            dataset = create_dataset(session, slug=f"bench-{i}")
            dataset_versions.append(
                register_dataset_version(session, dataset, version="1", prepared_path=prepared)
            )
        session.flush()
        return version.id, [dv.id for dv in dataset_versions]


def one_arm(version_id: int, dv_ids: list[int], timeout_s: float) -> tuple[list[float], float]:
    """Queue one fresh evaluation per dataset version at once; the waits from each one's
    last stored run to DONE (seconds), and the arm's wall time."""
    from sqlalchemy import func, select

    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import AlgorithmVersion, DatasetVersion, Evaluation, RecordingRun

    t0 = time.perf_counter()
    with session_scope() as session:
        version = session.get_one(AlgorithmVersion, version_id)
        ids = [
            create_evaluation(
                session,
                algorithm_version=version,
                dataset_version=session.get_one(DatasetVersion, dv_id),
                reuse=False,
            ).id
            for dv_id in dv_ids
        ]
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            evaluations = session.scalars(select(Evaluation).where(Evaluation.id.in_(ids))).all()
            if all(e.status.finished for e in evaluations):
                break
        if time.monotonic() > deadline:
            raise SystemExit("the evaluations did not finish; see the worker logs")
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    waits = []
    with session_scope() as session:
        for evaluation in session.scalars(select(Evaluation).where(Evaluation.id.in_(ids))):
            if evaluation.status.value != "done" or evaluation.finished_at is None:
                raise SystemExit(f"evaluation {evaluation.id}: {evaluation.status.value}")
            last_run = session.scalar(
                select(func.max(RecordingRun.finished_at)).where(
                    RecordingRun.evaluation_id == evaluation.id
                )
            )
            waits.append((evaluation.finished_at - last_run).total_seconds())
    return waits, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evaluations", type=int, default=8)
    p.add_argument("--recordings", type=int, default=4)
    p.add_argument("--run-s", type=float, default=0.5, help="the detector's time per recording")
    p.add_argument("--timeout-s", type=float, default=900)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="szbench-finalize-") as tmp_s:
        stack = Stack(Path(tmp_s))
        try:
            version_id, dv_ids = seed(stack, args.evaluations, args.recordings, args.run_s)
            print(
                f"{args.evaluations} evaluations x {args.recordings} recordings queued at once, "
                f"{args.run_s:g} s per run; one run worker (-Q cpu, one slot) and the scheduler",
                flush=True,
            )
            results = {}
            for name, baseline in ROUTINGS.items():
                stack.start_workers(baseline=baseline, run_s=args.run_s)
                try:
                    waits, wall = one_arm(version_id, dv_ids, args.timeout_s)
                finally:
                    stack.stop_workers()
                results[name] = waits
                print(
                    f"{name:15} last run stored -> DONE: median {statistics.median(waits):7.2f} s"
                    f"  mean {statistics.mean(waits):7.2f} s  max {max(waits):7.2f} s"
                    f"  (all {args.evaluations} DONE after {wall:.1f} s)",
                    flush=True,
                )
        finally:
            stack.close()
    base, ours = results["baseline (cpu)"], results["score queue"]
    for label, fn in (("median", statistics.median), ("mean", statistics.mean), ("max", max)):
        print(f"ratio baseline / score queue, {label}: {fn(base) / max(fn(ours), 1e-3):.1f}x")


if __name__ == "__main__":
    main()
