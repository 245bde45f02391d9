"""What a worker on another host pays per recording, through the real endpoint, and what
the shared parts (database, broker) pay per run: the figures behind docs/deployment.md,
"Scale on paper".

Measured, against the API served by uvicorn (one process) on a fresh PostgreSQL database:

- **fetch**: recordings of one hour each (35 MB, the size of a standardised hour: 19
  channels x 256 Hz x 16 bits) fetched by checksum into an empty cache with a worker
  token, ``--parallel`` fetchers at once (one per worker process of a host), over loopback:
  MB/s and recordings per hour the endpoint serves. Over a network the link is the limit;
  this is the platform's own ceiling.
- **verify**: the per-run sha256 check of a cached recording (a warm cache: nothing fetched).
- **stage**: the hard link of the cached file into a run's ``data/`` folder.
- **database**: a run's writes in the shape of the pipeline's (claim: lock the run row and
  set attempts/started/claimed_by; store: lock it again and write the outcome, counts and
  a 2 KB detections TSV; progress: lock the evaluation and bump its counter), each its own
  transaction, one writer and ``--parallel`` writers: runs per second.
- **broker**: task messages sent to Redis (one per run), per second.

Run (PostgreSQL and Redis as in scripts/test-services.sh)::

    python benchmarks/remote_fetch.py [--recordings 8] [--parallel 4] [--runs 400]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

import httpx  # noqa: E402
from sqlalchemy import create_engine, select, text  # noqa: E402

HOUR_BYTES = 19 * 256 * 2 * 3600  # a standardised hour of EEG, 35 MB
PG_ADMIN = os.environ.get(
    "SZBENCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("SZBENCH_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepared(root: Path, n: int, size: int) -> Path:
    entries = []
    for i in range(n):
        key = f"sub-{i:02d}_ses-01_task-szMonitoring_run-00"
        eeg, ann = f"eeg/{key}_eeg.edf", f"annotations/{key}_events.tsv"
        (root / eeg).parent.mkdir(parents=True, exist_ok=True)
        (root / ann).parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(size)
        (root / eeg).write_bytes(data)
        (root / eeg).chmod(0o444)
        (root / ann).write_text(
            "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
            "0.0\t3600.0\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t3600.0\n"
        )
        entries.append(
            {
                "id": key,
                "subject": f"sub-{i:02d}",
                "duration_s": 3600.0,
                "checksum": "sha256:" + hashlib.sha256(data).hexdigest(),
                "eeg_path": eeg,
                "annotations_path": ann,
            }
        )
    manifest = {"format": 1, "name": "bench", "sfreq_hz": 256, "recordings": entries}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recordings", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0, help="per recording")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--runs", type=int, default=400, help="database/broker rounds")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="szbench-remote-fetch-"))
    name = f"szbench_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(["platform", "worker", "scoring"]),
        "SZBENCH_DATABASE_URL": url,
        "SZBENCH_DATA_DIR": str(tmp / "main"),
        "SZBENCH_LOG_LEVEL": "WARNING",
        "SZBENCH_WORKER_FETCHES_PER_MINUTE": "100000",
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith("SZBENCH_")})
    api = None
    try:
        from szbench import db, migrate
        from szbench.auth import service as auth
        from szbench.config import get_settings
        from szbench.datasets.service import create_dataset, register_dataset_version
        from szbench.models import DatasetKind, Recording, Role

        get_settings.cache_clear()
        db.reset_engine()
        migrate.upgrade(url)
        size = int(HOUR_BYTES * args.hours)
        root = prepared(tmp / "main" / "datasets" / "bench", args.recordings, size)
        with db.session_scope() as session:
            operator = auth.create_user(
                session, email="hosts@example.org", password=None, role=Role.ADMIN
            )
            _, token = auth.create_token(session, operator, scopes=["worker"])
            ds = create_dataset(session, slug="bench", kind=DatasetKind.HELD_OUT)
            dv = register_dataset_version(session, ds, version="1", prepared_path=root)
            checksums = list(
                session.scalars(
                    select(Recording.checksum).where(Recording.dataset_version_id == dv.id)
                )
            )
            dv_id = dv.id

        port = free_port()
        api = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "szbench.app:create_production_app"),
                *("--factory", "--host", "127.0.0.1", "--port", str(port)),
                *("--log-level", "warning"),
            ],
            cwd=REPO,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)

        from szbench_worker.docker_runner.staging import stage_recording
        from szbench_worker.recordings import Fetcher, RecordingCache

        report: dict[str, object] = {
            "recordings": args.recordings,
            "bytes_each": size,
            "cpus": os.cpu_count(),
        }
        fetcher = Fetcher(base, token, 60.0)

        def source_of(cache: RecordingCache, checksum: str) -> str:
            with cache.use(checksum, fetcher, name="rec_eeg.edf") as got:
                return got.source

        for parallel in sorted({1, args.parallel}):
            cache = RecordingCache(tmp / f"cache-{parallel}", cap_bytes=10**13)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(parallel) as pool:
                got = list(pool.map(lambda c, cache=cache: source_of(cache, c), checksums))
            wall = time.perf_counter() - t0
            assert all(g == "fetched" for g in got)
            report[f"fetch_p{parallel}"] = {
                "seconds": round(wall, 2),
                "MB_per_s": round(len(checksums) * size / wall / 1e6, 1),
                "recordings_per_hour": round(len(checksums) / wall * 3600),
            }
        cache = RecordingCache(tmp / f"cache-{args.parallel}", cap_bytes=10**13)
        t0 = time.perf_counter()
        warm = [source_of(cache, c) for c in checksums]
        verify = (time.perf_counter() - t0) / len(checksums)
        assert all(w == "cache" for w in warm)
        report["verify_s_per_recording"] = round(verify, 3)
        staging = 0.0
        for i, checksum in enumerate(checksums):
            run_dir = tmp / "runs" / str(i)
            run_dir.mkdir(parents=True)
            with cache.use(checksum, fetcher, name="rec_eeg.edf") as w:
                t0 = time.perf_counter()
                assert stage_recording(w.path, run_dir) is None
                staging += time.perf_counter() - t0
                staged = run_dir / w.path.name
                assert staged.stat().st_ino == w.path.stat().st_ino  # a link, not a copy
                staged.unlink()
        report["stage_ms_per_recording"] = round(staging / len(checksums) * 1e3, 2)

        report["database"] = database_rounds(dv_id, args.runs, args.parallel)
        report["broker"] = broker_rounds(args.runs)
        print(json.dumps(report, indent=1))
    finally:
        if api is not None:
            api.terminate()
            api.wait(30)
        from szbench import db

        db.reset_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


def database_rounds(dv_id: int, runs: int, parallel: int) -> dict[str, float]:
    """Runs per second through the pipeline's three write transactions per run."""
    from szbench import db
    from szbench.models import (
        Algorithm,
        AlgorithmVersion,
        Evaluation,
        EvaluationStatus,
        Recording,
        RecordingRun,
        RunOutcome,
        User,
        VersionStatus,
    )

    with db.session_scope() as session:
        owner = session.scalars(select(User)).first()
        algorithm = Algorithm(owner_id=owner.id, name="bench")
        session.add(algorithm)
        session.flush()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="1",
            image_digest="sha256:" + "a" * 64,
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        session.flush()
        # One recording row per run (a run is unique per evaluation and recording); one
        # evaluation, so its progress row is contended as in a real evaluation.
        recordings = [
            Recording(
                dataset_version_id=dv_id,
                key=f"bench-{i}",
                subject=f"sub-{i % 65:02d}",
                duration_s=3600.0,
                checksum=f"sha256:{uuid.uuid4().hex * 2}",
                eeg_path=f"eeg/bench-{i}.edf",
                annotations_path=f"annotations/bench-{i}.tsv",
            )
            for i in range(runs * 2)
        ]
        session.add_all(recordings)
        session.flush()
        evaluation = Evaluation(
            algorithm_version_id=version.id,
            dataset_version_id=dv_id,
            image_digest=version.image_digest,
            scorer_version="bench",
            status=EvaluationStatus.RUNNING,
            recordings_total=runs * 2,
            recordings_done=0,
        )
        session.add(evaluation)
        session.flush()
        ids = []
        for recording in recordings:
            run = RecordingRun(
                evaluation_id=evaluation.id,
                recording_id=recording.id,
                image_digest=version.image_digest,
                recording_checksum=recording.checksum,
                scorer_version="bench",
            )
            session.add(run)
            session.flush()
            ids.append(run.id)
        evaluation_id = evaluation.id
    detections = ("0.0\t10.0\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t3600.0\n" * 40)[:2048]

    def one(run_id: int) -> None:
        with db.session_scope() as session:  # claim
            run = session.get_one(RecordingRun, run_id, with_for_update=True)
            run.attempts += 1
            run.started_at = datetime.now(UTC)
            run.claimed_by = "bench"
        with db.session_scope() as session:  # store
            run = session.get_one(RecordingRun, run_id, with_for_update=True)
            run.outcome = RunOutcome.OK
            run.detections_tsv = detections
            run.event_tp = run.event_fp = run.event_fn = 1
            run.finished_at = datetime.now(UTC)
        with db.session_scope() as session:  # progress
            ev = session.get_one(Evaluation, evaluation_id, with_for_update=True)
            ev.recordings_done += 1

    out = {}
    for label, workers, batch in (("1_writer", 1, ids[:runs]), ("parallel", parallel, ids[runs:])):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, batch))
        out[f"runs_per_s_{label}"] = round(len(batch) / (time.perf_counter() - t0), 1)
    return out


def broker_rounds(runs: int) -> dict[str, float]:
    """Task messages per second into Redis (one per run), on a database of its own."""
    import redis
    from celery import Celery

    broker = redis.Redis.from_url(REDIS_URL)
    broker.flushdb()
    app = Celery("bench", broker=REDIS_URL)
    try:
        t0 = time.perf_counter()
        for i in range(runs):
            app.send_task("szbench.run_recording", kwargs={"run_id": i}, queue="bench")
        return {"messages_per_s": round(runs / (time.perf_counter() - t0), 1)}
    finally:
        broker.flushdb()
        broker.close()


if __name__ == "__main__":
    main()
