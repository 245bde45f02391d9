"""Would pausing the cyclic garbage collector while scoring a dataset earn its place?

``szbench_scoring.dataset.score_dataset`` used to pause the collector on the grounds that
scoring makes many small objects that all stay alive and form no cycles. This measures both
ways in the same run, on the held-out-sized sets of ``benchmarks/scoring_speed.py``
(65 subjects, 4,360 recordings of about 1 h; the realistic, noisy and pathological
hypotheses: from 4,600 detections to 7.8 million), each way
in fresh processes, alternating, and prints the ratio of CPU time (process time, which the
other work on a shared machine does not inflate as much as wall time).

Measured on 4 December 2026 (2-core shared machine, 3 rounds): paused vs on, realistic
0.13 s vs 0.14 s (1.08x), noisy 0.17 s vs 0.19 s (1.10x), pathological (7.8 million rows)
2.63 s vs 2.58 s (0.98x). About 15 ms on a held-out scoring and nothing where the data is
large: the pause was removed for clarity (issue 32.5).

Usage::

    python benchmarks/scoring_gc.py              # 5 rounds of each way
    python benchmarks/scoring_gc.py --rounds 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from scoring_speed import generate  # noqa: E402  (the same sets as the speed benchmark)

ONE = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {scoring!r})
    import gc
    from szbench_scoring import dataset
    if sys.argv[3] == "collector-paused":
        gc.disable()
    c = time.process_time()
    dataset.score_dataset(sys.argv[1], sys.argv[2])
    print(json.dumps({{"cpu_seconds": time.process_time() - c}}))
    """
).format(scoring=str(ROOT / "scoring"))


def cpu_seconds(ref: Path, hyp: Path, way: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", ONE, str(ref), str(hyp), way],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out)["cpu_seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--sets", default="realistic,noisy,pathological")
    args = parser.parse_args()
    sets = args.sets.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        counts = generate(root, sets, args.seed, 65, 4360, 400)
        print(f"4,360 recordings; detections: {counts}")
        print(f"{'set':<10} {'paused (s)':>11} {'on (s)':>9} {'on / paused':>12}")
        for s in sets:
            times: dict[str, list[float]] = {"collector-paused": [], "collector-on": []}
            for _ in range(args.rounds):
                for way in times:  # alternate, so drift in the machine's load hits both
                    times[way].append(cpu_seconds(root / "ref", root / s, way))
            paused = statistics.median(times["collector-paused"])
            on = statistics.median(times["collector-on"])
            print(f"{s:<10} {paused:>11.2f} {on:>9.2f} {on / paused:>11.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
