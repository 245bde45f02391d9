"""What the Ladder's per-evaluation figures cost a leaderboard (issue 28.2).

Under the Ladder each entry shows the score its own evaluation earned, against a bar shared by
its owner's algorithms and its team (``szbench.disclosure.ladder``): building a board reads
the dataset version's whole sequence once and walks it. This measures the board's first
build (no cache) on one held-out dataset version with ``--owners`` submitters, each with
``--algorithms`` algorithms of ``--versions`` versions (one finished evaluation each), in
two states of the same data, in the same run:

- baseline: no phase names the data, its figures are released rounded;
- Ladder: an open phase names it, every evaluation's figure is the one it earned.

It prints the median build time of each (``--repeats``) and the ratio Ladder / baseline, and
the same for one evaluation's result (``GET /evaluations/{id}/result``).

Run: ``python benchmarks/ladder_board.py [--owners 20] [--algorithms 5] [--versions 4]``
(PostgreSQL on 127.0.0.1:5432, trust auth; a scratch database, dropped at the end).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from sqlalchemy import create_engine, text  # noqa: E402

PG_ADMIN = os.environ.get(
    "SZBENCH_BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--algorithms", type=int, default=5)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    name = f"szbench_bench_ladder_{os.getpid()}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    os.environ["SZBENCH_DATABASE_URL"] = url
    os.environ.setdefault("SZBENCH_DATA_DIR", f"/tmp/{name}")
    try:
        run(url, args)
    finally:
        from szbench import db

        db.reset_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _median_ms(build, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        build()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(url: str, args: argparse.Namespace) -> None:
    from szbench import migrate
    from szbench.db import session_scope
    from szbench.leaderboards import service as leaderboards
    from szbench.phases import service as phases
    from szbench.results import queries as results
    from tests.platform import factories as f

    migrate.upgrade(url)
    rng = random.Random(28)
    with session_scope() as s:
        dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
        for subject in ("01", "02"):
            f.recording(s, dv, subject=subject)
        phase = f.phase(s, slug="continuous")
        evaluation_id = 0
        for _ in range(args.owners):
            owner = f.user(s)
            for _ in range(args.algorithms):
                algorithm = f.algorithm(s, owner)
                for _ in range(args.versions):
                    ev = f.evaluation(s, f.version(s, algorithm, phase_id=phase.id), dv)
                    score = rng.random()
                    f.result(s, ev, {"01": {"event_f1": score}, "02": {"event_f1": score}})
                    evaluation_id = ev.id
        dv_id, phase_id = dv.id, phase.id
    entries = args.owners * args.algorithms * args.versions
    print(f"{entries} evaluations of {args.owners * args.algorithms} algorithms on one version")
    query = leaderboards.BoardQuery(slug="held", versions="all", limit=None)

    def measure() -> tuple[float, float]:
        with session_scope() as s:
            board = _median_ms(
                lambda: leaderboards.leaderboard(s, query, viewer=None), args.repeats
            )
            from szbench.models import Evaluation

            ev = s.get_one(Evaluation, evaluation_id)
            result = _median_ms(lambda: results.dataset_result(s, ev, viewer=None), args.repeats)
        return board, result

    base_board, base_result = measure()
    with session_scope() as s:
        from szbench.models import DatasetVersion, Phase

        phases.update_phase(
            s, s.get_one(Phase, phase_id), dataset_versions=[s.get_one(DatasetVersion, dv_id)]
        )
    ladder_board, ladder_result = measure()
    print(f"board, first build: rounded {base_board:.1f} ms, Ladder {ladder_board:.1f} ms, "
          f"ratio {ladder_board / base_board:.2f}")  # fmt: skip
    print(f"one result: rounded {base_result:.1f} ms, Ladder {ladder_result:.1f} ms, "
          f"ratio {ladder_result / base_result:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
