"""Per-recording overhead of the WHOLE pipeline, against a bare ``docker run --rm``.

Baseline (the floor), measured in the same run: the SzCORE contract's own command,
``docker run --rm --network none -v DIR:/data:ro -v OUT:/output -e INPUT -e OUTPUT IMAGE``,
once per recording, one after the other, for an image that writes a valid TSV and exits at
once. Contender: an evaluation of the same recordings through everything production uses:
the API's service enqueueing after commit, Redis, a ``celery worker`` process (solo pool,
prefetch 1, late acks), the start task, one task per recording (row lock, image check,
staging, the sandboxed DockerRunner, output validation, scoring against the reference,
storing counts and detections, progress), and the finalize task's aggregation. Time from
the commit to DONE, divided by the number of recordings. Goal: within 1.3x of the floor.

Scaling: the same evaluation on W worker processes (W recordings in flight), throughput
against one worker; its floor is W bare ``docker run`` in parallel (what the engine itself
allows on this machine). Pipeline and floor are measured in alternation, medians compared.

Whole benchmark (``--hours N``, issue 24.2): N one-hour 19-channel recordings and an image
whose own work costs about 10 s per hour of EEG (it sleeps 10 s per hour read from the EDF
header, writes its TSV and prints how long that took). One evaluation on one worker, from
the commit to DONE. Baseline: the algorithm's own container time, the sum over runs of
what the image itself measured. Everything else is overhead: staging, container create,
start, wait and removal, output checks, scoring, storing, task hand-offs, finalize. Goal:
overhead at most 5% of the algorithm's own time. The recordings are real one-hour files
(about 35 MB each); staging must link or bind-mount them, never copy.

Run (needs PostgreSQL, Redis, a Docker engine and the base image: scripts/test-services.sh)::

    python benchmarks/pipeline_overhead.py [--recordings 16] [--workers 1,2]
    python benchmarks/pipeline_overhead.py --hours 100 [--seconds-per-hour 10]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

import redis  # noqa: E402
from sqlalchemy import create_engine, select, text  # noqa: E402

from tests.worker._pipeline_factories import Rec, make_prepared_dataset  # noqa: E402
from tests.worker.conftest import BASE_IMAGE, write_edf  # noqa: E402

IMAGE = "szbench-bench/instant-tsv:latest"
# Writes a background-only TSV for the recording's real duration, then exits.
RUN_PY = """import os
from pathlib import Path
h = (Path('/data') / os.environ['INPUT']).read_bytes()[:256]
d = int(h[236:244]) * float(h[244:252])
(Path('/output') / os.environ['OUTPUT']).write_text(
    'onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n'
    f'0\\t{d}\\tbckg\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{d}\\n')
"""
PG_ADMIN = os.environ.get(
    "SZBENCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


# Works 10 s (SECONDS_PER_HOUR) per hour of EEG, then writes a background-only TSV; prints
# the time its own work took, which is the baseline of the --hours benchmark.
WORK_PY = """import os, time
t0 = time.monotonic()
from pathlib import Path
h = (Path('/data') / os.environ['INPUT']).read_bytes()[:256]
d = int(h[236:244]) * float(h[244:252])
time.sleep(d / 3600 * float(os.environ['SECONDS_PER_HOUR']))
(Path('/output') / os.environ['OUTPUT']).write_text(
    'onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n'
    f'0\\t{d}\\tbckg\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{d}\\n')
print(f'own_s={time.monotonic() - t0:.6f}')
"""
WORK_IMAGE = "szbench-bench/ten-s-per-hour:latest"


def build(tmp: Path, *, run_py: str = RUN_PY, tag: str = IMAGE, env: str = "") -> str:
    from szbench_worker.docker_runner import build_image, connect

    ctx = tmp / f"image-{tag.replace('/', '_').replace(':', '_')}"
    ctx.mkdir()
    (ctx / "run.py").write_text(run_py)
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nENV PYTHONDONTWRITEBYTECODE=1{env}\nCOPY run.py /run.py\n"
        'CMD ["python3", "/run.py"]\n'
    )
    return build_image(ctx, tag, connect()).digest


def dataset(tmp: Path, n: int, duration_s: int = 30) -> Path:
    recs = [Rec(f"sub-{i:02d}", "run-00", duration_s) for i in range(1, n + 1)]
    root = make_prepared_dataset(tmp / "prepared", recs)
    # Real 19-channel EDFs (the fake-runner factory writes one-channel ones).
    for i, rec in enumerate(recs):
        path = root / f"eeg/{rec.subject}/ses-01/eeg/{rec.edf_name}"
        write_edf(path, duration_s=duration_s, seed=i)
    import hashlib
    import json

    manifest = json.loads((root / "manifest.json").read_text())
    for entry in manifest["recordings"]:
        entry["checksum"] = (
            "sha256:" + hashlib.sha256((root / entry["eeg_path"]).read_bytes()).hexdigest()
        )
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


#: (wall, the image's own time) of each bare run of the --hours image.
_BARE_OWN: list[tuple[float, float]] = []


def bare_run(edf: Path, out: Path, image: str = IMAGE) -> float:
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o777)  # the image's user must be able to write its output
    output = edf.name.replace("_eeg.edf", "_events.tsv")
    t0 = time.perf_counter()
    done = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{edf.parent}:/data:ro",
            "-v",
            f"{out}:/output",
            "-e",
            f"INPUT={edf.name}",
            "-e",
            f"OUTPUT={output}",
            image,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - t0
    found = re.search(r"own_s=([0-9.]+)", done.stdout)
    if found is not None:
        _BARE_OWN.append((elapsed, float(found.group(1))))
    assert (out / output).is_file()
    return elapsed


def floor(edfs: list[Path], tmp: Path, parallel: int = 1) -> float:
    """Seconds of wall time for all recordings with ``parallel`` bare runs at a time."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        list(
            pool.map(lambda i: bare_run(edfs[i], tmp / f"out-{uuid.uuid4().hex}"), range(len(edfs)))
        )
    return time.perf_counter() - t0


class Stack:
    """A scratch PostgreSQL database, a Redis DB and worker processes."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        from szbench import migrate

        self.tmp = tmp
        self.db = f"szbench_bench_{uuid.uuid4().hex[:8]}"
        self.admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db}"'))
        self.url = PG_ADMIN.rsplit("/", 1)[0] + f"/{self.db}"
        migrate.upgrade(self.url)
        self.redis_url = redis_url
        redis.Redis.from_url(redis_url).flushdb()
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(["platform", "worker", "scoring"]),
            "SZBENCH_DATABASE_URL": self.url,
            "SZBENCH_BROKER_URL": redis_url,
            "SZBENCH_DATA_DIR": str(tmp / "data"),
            "SZBENCH_RUNNER_BACKEND": "docker",
            "SZBENCH_RUNNER_WORK_DIR": str(tmp / "runs"),
            "SZBENCH_WORKER_HOST": f"bench-{uuid.uuid4().hex[:6]}",
            "SZBENCH_RUNNER_MEMORY_BYTES": str(256 * 1024**2),
            "SZBENCH_RUNNER_CPUS": "1",
        }
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("SZBENCH_")})
        from szbench import db, queue
        from szbench.config import get_settings

        get_settings.cache_clear()
        db.reset_engine()
        queue.reset_celery()
        self.procs: list[subprocess.Popen[bytes]] = []

    def start_workers(self, n: int) -> None:
        for i in range(n):
            log = self.tmp / f"worker-{len(self.procs)}.log"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "szbench_worker.celery_app",
                    "worker",
                    "--pool",
                    "solo",
                    "-Q",
                    "cpu",
                    "-n",
                    f"bench{len(self.procs)}-{i}@%h",
                    "--without-mingle",
                    "--without-gossip",
                    "--loglevel",
                    "WARNING",
                ],
                cwd=REPO,
                env=self.env,
                stdout=open(log, "wb"),  # noqa: SIM115 (closed with the process)
                stderr=subprocess.STDOUT,
            )
            self.procs.append(proc)
        # Ready when the broker has consumers for the queue: simplest is to wait a moment
        # and check the processes are alive.
        time.sleep(4)
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError("a worker exited; see its log under " + str(self.tmp))

    def stop_workers(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(60)
        self.procs = []

    def close(self) -> None:
        from szbench import db

        self.stop_workers()
        db.reset_engine()
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)'))
        self.admin.dispose()
        redis.Redis.from_url(self.redis_url).flushdb()


def seed(prepared: Path, digest: str, image: str = IMAGE) -> tuple[int, int]:
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, User, VersionStatus

    with session_scope() as session:
        user = User(email="bench@example.org")
        session.add(user)
        session.flush()
        algorithm = Algorithm(owner_id=user.id, name="instant")
        session.add(algorithm)
        session.flush()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="1",
            image_digest=digest,
            image_reference=image,
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        dataset = create_dataset(session, slug="bench")
        dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
        session.flush()
        return version.id, dv.id


def pipeline_seconds(version_id: int, dv_id: int) -> float:
    """Wall time of one fresh evaluation (no reuse), from its commit to DONE."""
    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import AlgorithmVersion, DatasetVersion, Evaluation, EvaluationStatus

    with session_scope() as session:
        ev = create_evaluation(
            session,
            algorithm_version=session.get_one(AlgorithmVersion, version_id),
            dataset_version=session.get_one(DatasetVersion, dv_id),
            reuse=False,
        )
        evaluation_id = ev.id
        t0 = time.perf_counter()  # the send happens at this commit
    while True:
        with session_scope() as session:
            ev = session.get_one(Evaluation, evaluation_id)
            if ev.status.finished:
                elapsed = time.perf_counter() - t0
                if ev.status != EvaluationStatus.DONE:
                    raise RuntimeError(f"evaluation {evaluation_id} {ev.status}: {ev.message}")
                bad = [r.outcome for r in ev.runs if r.outcome is None or r.outcome.value != "ok"]
                if bad:
                    raise RuntimeError(f"runs did not end ok: {bad}")
                busy = sum((r.finished_at - r.started_at).total_seconds() for r in ev.runs)
                container = sum(r.wall_time_s or 0 for r in ev.runs)
                print(
                    f"  evaluation {evaluation_id}: {elapsed:.2f} s wall, runs in flight on "
                    f"average {busy / elapsed:.2f}, container share of a run "
                    f"{container / busy:.0%}",
                    flush=True,
                )
                return elapsed
        time.sleep(0.02)


def whole_benchmark(hours: int, seconds_per_hour: float, redis_url: str) -> None:
    """One evaluation of ``hours`` one-hour recordings on one worker (issue 24.2)."""
    from szbench.db import session_scope
    from szbench.models import Evaluation

    with tempfile.TemporaryDirectory(prefix="szbench-bench-") as tmp_s:
        tmp = Path(tmp_s)
        os.chmod(tmp, 0o755)
        digest = build(
            tmp,
            run_py=WORK_PY,
            tag=WORK_IMAGE,
            env=f"\nENV SECONDS_PER_HOUR={seconds_per_hour}",
        )
        t0 = time.perf_counter()
        prepared = dataset(tmp, hours, duration_s=3600)
        print(f"wrote {hours} one-hour recordings in {time.perf_counter() - t0:.0f} s", flush=True)
        stack = Stack(tmp, redis_url)
        try:
            version_id, dv_id = seed(prepared, digest, WORK_IMAGE)
            # The engine's own floor, for context: bare `docker run --rm` of the same image.
            edfs = sorted(prepared.glob("eeg/*/ses-01/eeg/*_eeg.edf"))
            for edf in edfs[: min(5, hours)]:
                bare_run(edf, tmp / f"out-{uuid.uuid4().hex}", WORK_IMAGE)
            stack.start_workers(1)
            wall = pipeline_seconds(version_id, dv_id)
            with session_scope() as session:
                ev = session.scalars(
                    select(Evaluation).order_by(Evaluation.id.desc()).limit(1)
                ).one()
                runs = list(ev.runs)
                own = []
                for r in runs:
                    found = re.search(r"own_s=([0-9.]+)", r.admin_log)
                    if found is None:
                        raise RuntimeError(f"run {r.id}: the image's own time is not in its log")
                    own.append(float(found.group(1)))
                container = sum(r.wall_time_s or 0.0 for r in runs)
                busy = sum((r.finished_at - r.started_at).total_seconds() for r in runs)
        finally:
            stack.close()
    algorithm = sum(own)
    overhead = wall - algorithm
    print(
        f"\n{hours} one-hour recordings (19 ch, 256 Hz, about 35 MB each), image working "
        f"{seconds_per_hour:g} s per hour of EEG, one worker"
    )
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"algorithm's own time (baseline): {algorithm:.1f} s")
    print(f"commit to DONE:                  {wall:.1f} s")
    print(
        f"  in the container runtime (start to exit: the run's duration_s): "
        f"{(container - algorithm) / algorithm:.2%} of the baseline"
    )
    print(
        f"  in the task around it (claim, stage, create, remove, check, score, store): "
        f"{(busy - container) / algorithm:.2%}"
    )
    print(f"  between runs (hand-offs, start and finalize tasks): {(wall - busy) / algorithm:.2%}")
    bare_wall = sum(w for w, _ in _BARE_OWN)
    bare_own = sum(o for _, o in _BARE_OWN)
    print(
        f"  for context, a bare `docker run --rm` of the same image ({len(_BARE_OWN)} runs): "
        f"{(bare_wall - bare_own) / bare_own:.2%} over the image's own time"
    )
    print(
        f"\ngoal: whole-benchmark overhead at most 5% of the algorithm's own time -> "
        f"{overhead / algorithm:.2%} ({overhead / len(runs):.2f} s per recording)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recordings", type=int, default=16)
    parser.add_argument("--workers", default="1,2", help="worker process counts to compare")
    parser.add_argument("--repeat", type=int, default=3, help="timed pairs per worker count")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/10")
    parser.add_argument(
        "--hours", type=int, default=0, help="whole-benchmark mode: this many 1 h recordings"
    )
    parser.add_argument("--seconds-per-hour", type=float, default=10.0)
    args = parser.parse_args()
    if args.hours:
        whole_benchmark(args.hours, args.seconds_per_hour, args.redis_url)
        return
    counts = [int(x) for x in args.workers.split(",")]
    n = args.recordings
    with tempfile.TemporaryDirectory(prefix="szbench-bench-") as tmp_s:
        tmp = Path(tmp_s)
        os.chmod(tmp, 0o755)
        digest = build(tmp)
        prepared = dataset(tmp, n)
        edfs = sorted(prepared.glob("eeg/*/ses-01/eeg/*_eeg.edf"))
        bare_run(edfs[0], tmp / "warm")  # warm the engine's caches
        stack = Stack(tmp, args.redis_url)
        try:
            version_id, dv_id = seed(prepared, digest)
            rows = []
            single = None
            for w in counts:
                stack.start_workers(w)
                pipeline_seconds(version_id, dv_id)  # warm-up: images inspected, pools open
                # Interleaved with the floor, so that a change in the machine's load hits
                # both alike (the medians of the pairs are compared).
                runs, floors = [], []
                for _ in range(args.repeat):
                    runs.append(pipeline_seconds(version_id, dv_id))
                    floors.append(floor(edfs, tmp, parallel=w))
                per_rec = statistics.median(runs) / n
                floor_w = statistics.median(floors) / n
                if single is None:
                    single = per_rec
                rows.append((w, per_rec, floor_w, single / per_rec))
                stack.stop_workers()
        finally:
            stack.close()
    print(f"\n{n} recordings (30 s, 19 ch), image exits at once after writing its TSV\n")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"{'workers':>7}  {'pipeline ms/rec':>15}  {'floor ms/rec':>18}  "
        f"{'ratio vs floor':>14}  {'speed-up':>8}  {'efficiency':>10}"
    )
    for w, per_rec, floor_w, speedup in rows:
        print(
            f"{w:>7}  {per_rec * 1000:>15.0f}  {floor_w * 1000:>18.0f}  "
            f"{per_rec / floor_w:>13.2f}x  {speedup:>7.2f}x  {speedup / w:>9.0%}"
        )
    first = rows[0]
    print(
        f"\ngoal: pipeline within 1.3x of the floor -> {first[1] / first[2]:.2f}x "
        f"with {first[0]} worker(s); speed-up and efficiency are against the first row"
    )


if __name__ == "__main__":
    main()
