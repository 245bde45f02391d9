"""Load test of the read API: leaderboards and results with 10,000 results in PostgreSQL.

What it does, in one run:

1. creates a scratch PostgreSQL database, migrates it and fills it: 100 algorithms x 100
   dataset versions = 10,000 evaluations with their dataset results, 10 subject results
   each (100,000 rows) and one recording run each (provenance), plus a researcher with a
   read-scoped API token;
2. starts two uvicorn servers with the same options on loopback: the szbench API as it is
   served (``szbench.app:create_production_app``, as ``szbench serve`` and the API image
   run it) on that database, and the floor, a minimal FastAPI app whose one endpoint
   returns a constant;
3. drives each endpoint with 100 concurrent clients, anonymous and signed in with the
   token, and prints p50/p90/p99/p99.9 latency, requests/s and the ratio to the floor
   (the figure to compare between runs and machines: absolute ones move with the load).

Each scenario is warmed up first, untimed: one request per distinct path (the answers of a
cold server are computed then), then the same load as the measurement for
``--warmup-seconds``, so that the measurement sees the steady state of a busy server rather
than the catch-up after a slow sequential warm-up. ``--warmup-seconds 0`` measures from
just after the sequential pass.

Run: ``python benchmarks/api_load.py`` (PostgreSQL on 127.0.0.1:5432, trust auth; Debian's
``wrk`` is used when installed, else an httpx client, which on a small machine takes CPU
from the server). The scratch database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "scoring"), str(ROOT / "worker")]

from fastapi import FastAPI  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "SZBENCH_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

# The floor: the least a FastAPI endpoint can cost on this server setup.
floor_app = FastAPI()


@floor_app.get("/constant")
def constant() -> dict[str, str]:
    """A constant."""
    return {"status": "ok"}


def seed(url: str, *, algorithms: int, datasets: int, subjects: int) -> dict[str, list[int]]:
    from sqlalchemy import create_engine, insert, select

    from szbench.models import (
        Algorithm,
        AlgorithmVersion,
        Dataset,
        DatasetKind,
        DatasetResult,
        DatasetVersion,
        Disclosure,
        Evaluation,
        EvaluationKind,
        EvaluationStatus,
        Recording,
        RecordingRun,
        Role,
        RunOutcome,
        SubjectResult,
        User,
        VersionStatus,
    )

    rng = random.Random(0)
    now = datetime.now(UTC)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(User), [
            {"email": f"u{i}@bench.org", "name": f"user {i}", "role": Role.RESEARCHER}
            for i in range(10)
        ])  # fmt: skip
        users = list(conn.scalars(select(User.id).order_by(User.id)))
        conn.execute(insert(Algorithm), [
            {"owner_id": users[i % 10], "name": f"algo-{i:03d}", "title": f"Algorithm {i}"}
            for i in range(algorithms)
        ])  # fmt: skip
        algos = list(conn.scalars(select(Algorithm.id).order_by(Algorithm.id)))
        conn.execute(insert(AlgorithmVersion), [
            {"algorithm_id": a, "version": "1.0", "image_digest": f"sha256:{a:064x}",
             "status": VersionStatus.ACTIVE}
            for a in algos
        ])  # fmt: skip
        versions = list(conn.scalars(select(AlgorithmVersion.id).order_by(AlgorithmVersion.id)))
        conn.execute(insert(Dataset), [
            # Per-subject figures disclosed: the subjects scenario reads them anonymously.
            {"slug": f"ds-{d:03d}", "title": f"Dataset {d}", "kind": DatasetKind.HELD_OUT,
             "disclosure": Disclosure.SUBJECT}
            for d in range(datasets)
        ])  # fmt: skip
        ds_ids = list(conn.scalars(select(Dataset.id).order_by(Dataset.id)))
        conn.execute(insert(DatasetVersion), [
            {"dataset_id": d, "version": "1.0", "path": "/data"} for d in ds_ids
        ])  # fmt: skip
        dvs = list(conn.scalars(select(DatasetVersion.id).order_by(DatasetVersion.id)))
        conn.execute(insert(Recording), [
            {"dataset_version_id": dv, "key": "sub-01_run-00", "subject": "01",
             "duration_s": 3600.0, "checksum": f"{dv:064x}", "eeg_path": "e.edf",
             "annotations_path": "a.tsv"}
            for dv in dvs
        ])  # fmt: skip
        recordings = dict(conn.execute(select(Recording.dataset_version_id, Recording.id)).all())
        conn.execute(insert(Evaluation), [
            {"algorithm_version_id": v, "dataset_version_id": dv, "kind": EvaluationKind.FULL,
             "status": EvaluationStatus.DONE, "image_digest": f"sha256:{v:064x}",
             "scorer_version": "bench", "scoring_params": {}, "official": True,
             "published": True, "recordings_total": 1, "recordings_done": 1, "finished_at": now}
            for dv in dvs for v in versions
        ])  # fmt: skip
        evals = conn.execute(
            select(Evaluation.id, Evaluation.dataset_version_id, Evaluation.image_digest)
        ).all()
        metric_rows = []
        subject_rows = []
        run_rows = []
        for eid, dv, digest in evals:
            per = [
                {"f1": rng.random(), "sens": rng.random(), "prec": rng.random(),
                 "fp": rng.random() * 10}
                for _ in range(subjects)
            ]  # fmt: skip
            for s, m in enumerate(per):
                subject_rows.append({
                    "evaluation_id": eid, "subject": f"{s:02d}", "recordings": 1, "counts": {},
                    "event_f1": m["f1"], "event_sensitivity": m["sens"],
                    "event_precision": m["prec"], "event_fp_rate": m["fp"],
                })  # fmt: skip
            metric_rows.append({
                "evaluation_id": eid, "subjects": subjects, "recordings": subjects, "report": {},
                "event_f1": statistics.fmean(m["f1"] for m in per),
                "event_sensitivity": statistics.fmean(m["sens"] for m in per),
                "event_precision": statistics.fmean(m["prec"] for m in per),
                "event_fp_rate": statistics.fmean(m["fp"] for m in per),
            })  # fmt: skip
            run_rows.append({
                "evaluation_id": eid, "recording_id": recordings[dv], "image_digest": digest,
                "recording_checksum": f"{dv:064x}", "scorer_version": "bench",
                "outcome": RunOutcome.OK, "worker_host": f"worker-{eid % 4}",
                "wall_time_s": 60.0, "peak_memory_bytes": 10**9,
            })  # fmt: skip
        conn.execute(insert(DatasetResult), metric_rows)
        conn.execute(insert(SubjectResult), subject_rows)
        conn.execute(insert(RecordingRun), run_rows)
    engine.dispose()
    return {"evaluations": [e[0] for e in evals], "algorithms": algos}


def make_token(url: str) -> str:
    """A researcher's read-scoped API token, as a script of theirs would hold."""
    from sqlalchemy.orm import Session

    from szbench.auth import service
    from szbench.db import make_engine

    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        user = service.create_user(session, email="reader@bench.org", name="reader", password=None)
        _, secret = service.create_token(session, user, name="bench", scopes=["read"])
    engine.dispose()
    return secret


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    app: str, port: int, env: dict[str, str], workers: int, *, factory: bool = False
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), "--log-level", "warning", "--no-access-log",
        "--timeout-keep-alive", "120", *(["--factory"] if factory else []),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz" if "szbench" in app else
                      f"http://127.0.0.1:{port}/constant", timeout=1)  # fmt: skip
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"{app} did not start")


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def warm_each_path(base: str, paths: list[str], headers: dict[str, str]) -> None:
    """One request per distinct path: a cold server computes its answers now."""
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        for path in dict.fromkeys(paths):
            client.get(path)


async def load(
    base: str,
    paths: list[str],
    headers: dict[str, str],
    *,
    seconds: float,
    concurrency: int,
) -> dict[str, float]:
    """``concurrency`` clients (httpx, keep-alive), each sending its next request as soon as
    the last is answered, for ``seconds``."""
    latencies: list[float] = []
    errors = 0
    counter = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base, limits=limits, timeout=30, headers=headers
    ) as client:
        started = time.perf_counter()
        deadline = started + seconds

        async def worker() -> None:
            nonlocal errors, counter
            while time.perf_counter() < deadline:
                path = paths[counter % len(paths)]
                counter += 1
                sent = time.perf_counter()
                try:
                    response = await client.get(path)
                except httpx.HTTPError as exc:
                    errors += 1
                    print(f"  {type(exc).__name__} on {path}", file=sys.stderr)
                    continue
                latencies.append(time.perf_counter() - sent)
                if response.status_code != 200:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        **{f"p{q:g}_ms": 1000 * percentile(latencies, q) for q in (50, 90, 99, 99.9)},
        "rps": len(latencies) / elapsed,
        "errors": errors,
    }


WRK_SCRIPT = """
paths = {%(paths)s}
headers = {%(headers)s}
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", paths[(counter %% #paths) + 1], headers)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("SZBENCH %%f %%f %%f %%f %%d %%d %%d %%d\\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def load_wrk(
    base: str,
    paths: list[str],
    headers: dict[str, str],
    *,
    seconds: float,
    concurrency: int,
) -> dict[str, float]:
    """The same load from wrk (C, two threads): the client costs far less CPU than httpx, so
    on a small machine the figures say more about the server."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(
            WRK_SCRIPT
            % {
                "paths": ", ".join(f'"{p}"' for p in paths),
                "headers": ", ".join(f'["{k}"] = "{v}"' for k, v in headers.items()),
            }
        )
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "30s",
             "-s", script.name, base],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(script.name)
    line = next(ln for ln in out.splitlines() if ln.startswith("SZBENCH "))
    p50, p90, p99, p999, n, duration_us, errors, non_2xx = (float(x) for x in line.split()[1:])
    return {
        "p50_ms": p50 / 1000,
        "p90_ms": p90 / 1000,
        "p99_ms": p99 / 1000,
        "p99.9_ms": p999 / 1000,
        "rps": n / (duration_us / 1e6),
        "errors": int(errors + non_2xx),
    }


def main() -> None:
    # `timeout` and Ctrl-C must still stop the servers and drop the scratch database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="Measured seconds per scenario."
    )
    parser.add_argument(
        "--warmup-seconds", type=float, default=3.0, help="Untimed load before each scenario."
    )
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn processes (both servers).")
    parser.add_argument("--algorithms", type=int, default=100)
    parser.add_argument("--datasets", type=int, default=100)
    parser.add_argument("--subjects", type=int, default=10)
    parser.add_argument(
        "--driver",
        choices=["httpx", "wrk"],
        default="wrk" if shutil.which("wrk") else "httpx",
        help="Load generator: wrk (Debian's package; default when installed) or httpx.",
    )
    parser.add_argument(
        "--only", default="", help="Run only the scenarios whose label contains this text."
    )
    args = parser.parse_args()

    from sqlalchemy import create_engine, text

    from szbench import migrate

    name = f"szbench_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        migrate.upgrade(url)
        t0 = time.perf_counter()
        ids = seed(url, algorithms=args.algorithms, datasets=args.datasets, subjects=args.subjects)
        signed_in = {"Authorization": f"Bearer {make_token(url)}"}
        print(f"seeded {len(ids['evaluations'])} results in {time.perf_counter() - t0:.1f} s")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "platform"), str(ROOT / "scoring"), str(ROOT / "benchmarks")]
            ),
            "SZBENCH_DATABASE_URL": url,
            "SZBENCH_BROKER_URL": "",
            "SZBENCH_DATA_DIR": f"/tmp/{name}",
            "SZBENCH_LOG_LEVEL": "WARNING",
        }
        api_port, floor_port = free_port(), free_port()
        procs.append(
            start_server(
                "szbench.app:create_production_app", api_port, env, args.workers, factory=True
            )
        )
        procs.append(start_server("api_load:floor_app", floor_port, env, args.workers))
        rng = random.Random(1)
        evals = ids["evaluations"]
        boards = [f"/api/v1/leaderboards/ds-{d:03d}" for d in range(args.datasets)]
        results = [f"/api/v1/evaluations/{rng.choice(evals)}/result" for _ in range(500)]
        subjects = [f"/api/v1/evaluations/{rng.choice(evals)}/subjects" for _ in range(500)]
        side_by_side = [f"/api/v1/algorithms/{a}/results" for a in ids["algorithms"]]
        scenarios: dict[str, tuple[int, list[str], dict[str, str]]] = {
            "floor GET /constant": (floor_port, ["/constant"], {}),
            "GET /leaderboards/{dataset}": (api_port, boards, {}),
            "GET /evaluations/{id}/result": (api_port, results, {}),
            "GET /evaluations/{id}/subjects": (api_port, subjects, {}),
            "GET /algorithms/{id}/results": (api_port, side_by_side, {}),
            "signed in: /leaderboards/{dataset}": (api_port, boards, signed_in),
            "signed in: /evaluations/{id}/result": (api_port, results, signed_in),
            "signed in: /algorithms/{id}/results": (api_port, side_by_side, signed_in),
        }
        chosen = {
            label: scenario
            for label, scenario in scenarios.items()
            if label.startswith("floor") or args.only in label
        }
        measured = {}
        for label, (port, paths, headers) in chosen.items():
            print(f"loading {label} ...", file=sys.stderr)
            base = f"http://127.0.0.1:{port}"
            warm_each_path(base, paths, headers)

            def run(seconds: float, base: str = base, paths: list[str] = paths,
                    headers: dict[str, str] = headers) -> dict[str, float]:  # fmt: skip
                if args.driver == "wrk":
                    return load_wrk(
                        base, paths, headers, seconds=seconds, concurrency=args.concurrency
                    )
                return asyncio.run(
                    load(base, paths, headers, seconds=seconds, concurrency=args.concurrency)
                )

            if args.warmup_seconds > 0:
                run(args.warmup_seconds)
            measured[label] = run(args.seconds)
        floor = measured["floor GET /constant"]
        print(
            f"\n{args.driver}: {args.concurrency} concurrent clients, {args.seconds:g} s per "
            f"scenario after {args.warmup_seconds:g} s of warm-up, {args.workers} uvicorn "
            f"worker(s), {len(evals)} results in PostgreSQL\n"
        )
        print(f"{'scenario':38} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
              f"{'req/s':>7} {'x floor':>7} {'errors':>6}")  # fmt: skip
        for label, r in measured.items():
            ratio = r["rps"] / floor["rps"]
            print(
                f"{label:38} {r['p50_ms']:7.1f} {r['p90_ms']:7.1f} {r['p99_ms']:7.1f} "
                f"{r['p99.9_ms']:8.1f} {r['rps']:7.0f} {ratio:7.2f} {r['errors']:6d}"
            )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
