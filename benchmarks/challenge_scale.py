"""The challenge's size in PostgreSQL: pages built after a new result, cached answers, bytes.

The SzCORE 2025 challenge: 28 algorithms on 4,360 one-hour recordings of 65 subjects
(issue 24.3). What it does, in one run:

1. creates a scratch PostgreSQL database (``szbench_bench_<pid>``, dropped at the end) and a
   prepared held-out dataset of ``--recordings`` one-hour recordings over ``--subjects``
   subjects with about 400 reference seizures (tiny one-channel EDFs: only their headers
   and checksums matter here);
2. seeds it through the services, as production does, never by SQL: users
   (``auth.service.create_user``), algorithms and versions (``create_algorithm``,
   ``register_trusted_version``), the dataset (``create_dataset``,
   ``register_dataset_version``), one evaluation per algorithm (``create_evaluation``), its
   runs (the worker's ``start_evaluation``), every recording's result (the worker's
   ``store_result``: lock, score against the reference, count; the detections are
   synthetic, better for better algorithms) and the aggregation (``finalize_evaluation``).
   Storing result by result runs at tens of results per second on a busy 2-core machine
   (hours for 122,080), so only the first ``--donors`` algorithms are stored that way; the
   others run one of the donors' images, and ``start_evaluation`` reuses the donor's
   finished runs (the platform's own reuse by image digest, recording checksum and scorer
   version: each run copied and scored again). The rows are then those of full
   evaluations, in number and shape; scores repeat per donor (ties on the leaderboard);
3. at each checkpoint (a number of algorithms seeded), right after a new result (the change
   counters bumped as storing one bumps them), times each page's first build and then its
   cached answer, in process through the real app: the leaderboard (intervals and rank
   stability), the comparison of the two best, the dataset page, the newest evaluation's
   page (its owner signed in) and the algorithm page (its rank stability). The baseline,
   measured in the same run, is the static definitions page: ratios against it are the
   figures to compare between machines; absolute times are context;
4. prints rows and bytes per result (``pg_total_relation_size`` over rows).

Seeding stops at whole algorithms when ``--budget-s`` is spent; the seeding rate and
the checkpoints' trend are printed so that a larger size can be extrapolated honestly.

Run: ``python benchmarks/challenge_scale.py [--algorithms 28] [--recordings 4360]
[--budget-s 900]`` (PostgreSQL on 127.0.0.1:5432, trust auth).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from sqlalchemy import create_engine, select, text  # noqa: E402

PG_ADMIN = os.environ.get(
    "SZBENCH_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
PASSWORD = "correct-horse-9"
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
PAGES = ("leaderboard", "comparison", "dataset", "evaluation", "algorithm")
# The same subjects through the REST API, whose answers are kept (szbench.stamped_cache).
APIS = ("api leaderboard", "api comparison", "api result", "api subjects", "api algorithm")


def prepared_dataset(root: Path, recordings: int, subjects: int, rng: random.Random) -> dict:
    """A prepared folder (manifest, tiny EDFs, references); returns seizures per key."""
    from tests.worker._pipeline_factories import Rec, make_prepared_dataset

    recs = []
    for i in range(recordings):
        subject = f"sub-{i % subjects + 1:02d}"
        seizures: tuple[tuple[float, float], ...] = ()
        if rng.random() < 0.08:  # about 350 recordings with 1-2 seizures: ~400 in all
            onsets = sorted(rng.uniform(60, 3300) for _ in range(rng.choice((1, 1, 1, 2))))
            seizures = tuple((round(o), float(rng.randint(20, 150))) for o in onsets)
        recs.append(Rec(subject, f"run-{i // subjects:02d}", 3600, seizures))
    make_prepared_dataset(root, recs)
    return {r.key: r.seizures for r in recs}


def detections(seizures: tuple, skill: float, rng: random.Random) -> str:
    """An algorithm's TSV for one recording: each seizure found with probability ``skill``,
    false alarms fewer for better algorithms."""
    rows = [
        f"{max(0.0, onset + rng.uniform(-10, 20)):.1f}\t{dur:.1f}\tsz\t0.9\tn/a\t"
        f"2020-01-01 00:00:00\t3600.0\n"
        for onset, dur in seizures
        if rng.random() < skill
    ]
    for _ in range(int(rng.expovariate(1.0) * (1.2 - skill) * 2)):
        rows.append(
            f"{rng.uniform(0, 3500):.1f}\t{rng.uniform(5, 60):.1f}\tsz\t0.6\tn/a\t"
            "2020-01-01 00:00:00\t3600.0\n"
        )
    if not rows:
        rows = ["0.0\t3600.0\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t3600.0\n"]
    rows.sort(key=lambda r: float(r.split("\t", 1)[0]))
    return HEADER + "".join(rows)


class Bench:
    def __init__(self, tmp: Path) -> None:
        from szbench import db, migrate, queue
        from szbench.config import get_settings

        self.tmp = tmp
        self.name = f"szbench_bench_{os.getpid()}"
        self.admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        self.url = PG_ADMIN.rsplit("/", 1)[0] + f"/{self.name}"
        migrate.upgrade(self.url)
        os.environ.update(
            {
                "SZBENCH_DATABASE_URL": self.url,
                "SZBENCH_DATA_DIR": str(tmp / "data"),
                "SZBENCH_PASSWORD_SCRYPT_N": "1024",
            }
        )
        get_settings.cache_clear()
        db.reset_engine()
        # Tasks are not sent anywhere: the finalize that the last stored run asks for is
        # called here directly (the same function its task calls).
        self.finalize: list[int] = []
        queue.set_sender(self._capture)

    def _capture(self, name: str, _queue: str, kwargs: dict) -> None:
        from szbench.queue import TASK_FINALIZE

        if name == TASK_FINALIZE:
            self.finalize.append(int(kwargs["evaluation_id"]))

    def close(self) -> None:
        from szbench import db, queue

        queue.set_sender(None)
        db.reset_engine()
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def seed_base(prepared: Path) -> tuple[int, str]:
    """The admin, the dataset and its version; returns (dataset version id, slug)."""
    from szbench.auth.service import create_user
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import DatasetKind, Disclosure, Role

    with session_scope() as session:
        create_user(
            session, email="admin@bench.org", password=PASSWORD, name="Admin", role=Role.ADMIN
        )
        # Per-subject figures disclosed: anonymous readers get intervals and rank stability.
        dataset = create_dataset(
            session,
            slug="challenge",
            title="Challenge held-out set",
            kind=DatasetKind.HELD_OUT,
            disclosure=Disclosure.SUBJECT,
        )
        dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
        session.flush()
        return dv.id, dataset.slug


def seed_algorithm(
    bench: Bench,
    index: int,
    dv_id: int,
    seizures: dict,
    rng: random.Random,
    *,
    donor: int,
) -> tuple[int, int, int]:
    """One algorithm, its evaluation and every recording's result, through the services.

    From ``donor``'s image when ``donor`` differs from ``index`` (its runs reused).
    Returns (evaluation id, algorithm id, results stored)."""
    reuse = donor != index
    from szbench.algorithms.service import create_algorithm, register_trusted_version
    from szbench.auth.service import create_user
    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import DatasetVersion, Recording, RecordingRun, RunOutcome
    from szbench_worker.pipeline.finish import finalize_evaluation
    from szbench_worker.pipeline.start import start_evaluation
    from szbench_worker.pipeline.store import store_result
    from szbench_worker.runner import RunResult

    with session_scope() as session:
        owner = create_user(
            session, email=f"team{index}@bench.org", password=PASSWORD, name=f"Team {index}"
        )
        algorithm = create_algorithm(session, owner=owner, name=f"algo-{index:03d}")
        version = register_trusted_version(
            session,
            algorithm=algorithm,
            digest=f"sha256:{donor + 1:064x}",
            reference=f"bench/algo-{index:03d}:1",
            message="benchmark",
        )
        evaluation = create_evaluation(
            session,
            algorithm_version=version,
            dataset_version=session.get_one(DatasetVersion, dv_id),
            reuse=reuse,
            charge=False,
        )
        evaluation_id, algorithm_id = evaluation.id, algorithm.id
    outcome = start_evaluation(evaluation_id)
    if reuse:
        if outcome.reused != outcome.runs:
            raise RuntimeError(f"reused {outcome.reused} of {outcome.runs} runs")
        while bench.finalize:
            finalize_evaluation(bench.finalize.pop())
        return evaluation_id, algorithm_id, outcome.reused
    with session_scope() as session:
        runs = session.execute(
            select(RecordingRun.id, Recording.key)
            .join(Recording, Recording.id == RecordingRun.recording_id)
            .where(RecordingRun.evaluation_id == evaluation_id)
            .order_by(RecordingRun.id)
        ).all()
    skill = 0.2 + 0.7 * rng.random()
    tsv = bench.tmp / "out.tsv"
    for run_id, key in runs:
        tsv.write_text(detections(seizures[key], skill, rng))
        store_result(
            run_id,
            RunResult(
                outcome=RunOutcome.OK,
                exit_code=0,
                duration_s=rng.uniform(30, 300),
                peak_memory_bytes=rng.randint(10**8, 4 * 10**9),
                submitter_message="ok",
                admin_log="outcome: ok  exit code: 0\n--- container log (tail) ---\ndone\n",
                output_tsv=tsv,
                annotations=None,
                image_digest=f"sha256:{donor + 1:064x}",
                worker_host=f"worker-{index % 4}",
            ),
            resolved_image=f"sha256:{donor + 1:064x}",
        )
    while bench.finalize:
        finalize_evaluation(bench.finalize.pop())
    return evaluation_id, algorithm_id, len(runs)


def new_result(evaluation_id: int) -> None:
    """What storing a result does to the read caches: the change counters move."""
    from szbench import changes
    from szbench.db import session_scope

    with session_scope() as session:
        changes.evaluations_changed(session, [evaluation_id])


def timed_get(client, path: str) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    r = client.get(path)
    elapsed = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: {r.status_code} {r.text[:300]}")
    return elapsed


def measure(
    slug: str, evaluations: list[int], algorithms: list[int], repeat: int
) -> dict[str, tuple[float, float]]:
    """Per page: (first build after a new result, median cached answer), plus the baseline."""
    from fastapi.testclient import TestClient

    from szbench.app import create_app
    from szbench.db import session_scope
    from szbench.leaderboards.service import BoardQuery, leaderboard

    newest = evaluations[-1]
    with session_scope() as session:
        board = leaderboard(session, BoardQuery(slug=slug, limit=None), viewer=None)
        best = [e.evaluation_id for e in board.items if e.rank is not None][:2]
    if len(best) < 2:
        best = evaluations[:2]
    if len(best) < 2:
        raise ValueError("the comparison needs two algorithms: measure from 2 on")
    paths = {
        "leaderboard": f"/leaderboards/{slug}",
        "comparison": f"/compare?evaluation={best[0]}&evaluation={best[1]}",
        "dataset": f"/datasets/{slug}",
        "evaluation": f"/evaluations/{newest}",
        "algorithm": f"/algorithms/{algorithms[-1]}",
        "api leaderboard": f"/api/v1/leaderboards/{slug}",
        "api comparison": f"/api/v1/comparisons?evaluation={best[0]}&evaluation={best[1]}",
        "api result": f"/api/v1/evaluations/{newest}/result",
        "api subjects": f"/api/v1/evaluations/{newest}/subjects",
        "api algorithm": f"/api/v1/algorithms/{algorithms[-1]}/results",
    }
    out: dict[str, tuple[float, float]] = {}
    with TestClient(create_app(), raise_server_exceptions=True) as client:
        page = client.get("/login")
        token = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        r = client.post(
            "/login",
            data={
                "email": f"team{len(evaluations) - 1}@bench.org",
                "password": PASSWORD,
                "csrf_token": token,
                "next": "/",
            },
            follow_redirects=False,
        )
        if r.status_code != 303:
            raise RuntimeError(f"sign-in failed: {r.status_code}")
        timed_get(client, "/definitions")
        base = statistics.median(timed_get(client, "/definitions") for _ in range(repeat))
        out["baseline"] = (base, base)
        for name, path in paths.items():
            firsts, cached = [], []
            for _ in range(repeat):
                new_result(newest)
                firsts.append(timed_get(client, path))
                cached.extend(timed_get(client, path) for _ in range(3))
            out[name] = (statistics.median(firsts), statistics.median(cached))
    return out


def sizes(url: str) -> dict[str, tuple[int, int]]:
    """Rows and bytes (with indexes and TOAST) of the tables a result lives in, live rows
    only: every stored result updates its run and its evaluation's progress, and the dead
    row versions that leaves (autovacuum's to reclaim) are compacted away first."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    out = {}
    with engine.connect() as conn:
        conn.execute(
            text("VACUUM FULL recording_runs, subject_results, dataset_results, evaluations")
        )
        for table in ("recording_runs", "subject_results", "dataset_results", "evaluations"):
            rows = conn.scalar(text(f"SELECT count(*) FROM {table}"))
            size = conn.scalar(text(f"SELECT pg_total_relation_size('{table}')"))
            out[table] = (int(rows or 0), int(size or 0))
    engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", type=int, default=28)
    parser.add_argument("--recordings", type=int, default=4360)
    parser.add_argument("--subjects", type=int, default=65)
    parser.add_argument("--budget-s", type=float, default=900.0, help="seeding time budget")
    parser.add_argument(
        "--checkpoints", default="2,4,8,16,28", help="algorithm counts at which to measure"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--donors", type=int, default=2, help="algorithms whose results are stored one by one"
    )
    args = parser.parse_args()
    checkpoints = {int(x) for x in args.checkpoints.split(",")} | {args.algorithms}
    if min(checkpoints) < 2 or args.algorithms < 2:
        parser.error("--checkpoints and --algorithms: at least 2 (the comparison needs two)")
    rng = random.Random(24)
    with tempfile.TemporaryDirectory(prefix="szbench-scale-") as tmp_s:
        tmp = Path(tmp_s)
        bench = Bench(tmp)
        try:
            seizures = prepared_dataset(tmp / "prepared", args.recordings, args.subjects, rng)
            dv_id, slug = seed_base(tmp / "prepared")
            evaluations: list[int] = []
            algorithms: list[int] = []
            results = []
            seeded_s = stored_s = 0.0
            stored = stored_one_by_one = 0
            for index in range(args.algorithms):
                t0 = time.perf_counter()
                ev, algo, n = seed_algorithm(
                    bench, index, dv_id, seizures, rng, donor=index % args.donors
                )
                seeded_s += time.perf_counter() - t0
                stored += n
                evaluations.append(ev)
                algorithms.append(algo)
                how = "stored one by one" if index < args.donors else "reused"
                print(
                    f"seeded algorithm {index + 1}: {n} results {how} in "
                    f"{time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
                if index < args.donors:
                    stored_s += time.perf_counter() - t0
                    stored_one_by_one += n
                last = index + 1 == args.algorithms or (index >= 1 and seeded_s > args.budget_s)
                if index + 1 in checkpoints or last:
                    figures = measure(slug, evaluations, algorithms, args.repeat)
                    results.append((index + 1, figures))
                    print(
                        "  "
                        + ", ".join(
                            f"{k} {v[0] * 1000:.0f}/{v[1] * 1000:.1f} ms"
                            for k, v in figures.items()
                        ),
                        flush=True,
                    )
                if last:
                    break
            table_sizes = sizes(bench.url)
        finally:
            bench.close()
    report(args, results, stored, seeded_s, table_sizes)
    print(
        f"storing result by result (the worker's store_result): "
        f"{stored_one_by_one / stored_s:.0f} results/s; the full {args.algorithms} x "
        f"{args.recordings} that way would take "
        f"{args.algorithms * args.recordings / (stored_one_by_one / stored_s) / 3600:.1f} h"
    )


def report(args, results, stored, seeded_s, table_sizes) -> None:  # type: ignore[no-untyped-def]
    print(
        f"\n{args.recordings} one-hour recordings, {args.subjects} subjects; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"seeded {results[-1][0]} algorithms, "
        f"{stored} results through the services in {seeded_s:.0f} s"
    )
    print("\npage build right after a new result, and cached; ratio to the static baseline page")
    print(
        f"{'algorithms':>10}  {'page':<12} {'build':>9} {'x base':>8} {'cached':>9} {'x base':>7}"
    )
    for count, figures in results:
        base = figures["baseline"][0]
        for name in PAGES + APIS:
            first, cached = figures[name]
            print(
                f"{count:>10}  {name:<12} {first * 1000:>7.0f}ms {first / base:>7.1f}x "
                f"{cached * 1000:>7.1f}ms {cached / base:>6.2f}x"
            )
    worst = max(results[-1][1][n][0] for n in PAGES + APIS)
    print(
        f"\ngoal: every page built within 1 s after a new result at {results[-1][0]} "
        f"algorithms -> slowest {worst:.2f} s ({worst:.0%} of the budget)"
    )
    slowest_api = max(results[-1][1][n][1] for n in APIS)
    print(
        f"goal: cached API answers within a few ms -> slowest {slowest_api * 1000:.1f} ms, "
        f"{slowest_api / results[-1][1]['baseline'][1]:.2f}x the static page"
    )
    runs, _ = table_sizes["recording_runs"]
    print("\nrows and bytes (with indexes and TOAST):")
    for table, (rows, size) in table_sizes.items():
        print(
            f"  {table:<16} {rows:>9} rows {size / 1e6:>9.1f} MB {size / max(rows, 1):>8.0f} B/row"
        )
    total = sum(size for _, size in table_sizes.values())
    print(
        f"  per recording result: {total / max(runs, 1):.0f} B all told; "
        f"{args.recordings} recordings x 100 algorithms would be about "
        f"{total / max(runs, 1) * args.recordings * 100 / 1e9:.1f} GB"
    )


if __name__ == "__main__":
    main()
