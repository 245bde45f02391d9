"""Speed and memory of szbench's scorer against szcore-evaluation 0.0.7 (the SzCORE reference).

Generates held-out-sized annotation sets (65 subjects, 4,360 recordings of about 1 h, about
400 seizures) with three hypothesis sets:

- realistic: detections near most seizures plus a few false alarms per recording;
- noisy: about 55,000 detections;
- pathological: a 1 s detection every 2 s in every recording (about 7.8 million rows).

Each set is scored by szbench (``score_dataset``) and by szcore-evaluation 0.0.7 running in a
Python 3.12 virtual environment that this script builds (the reference needs Python >= 3.12),
each in a fresh process, on the same files. The script checks the JSON numbers are equal and
prints the time ratio and each process's peak memory (max RSS). ``--scaling`` also times
szbench alone on hypotheses of growing density to show that its time is linear in events.

Usage::

    python benchmarks/scoring_speed.py                      # all three sets (the
                                                           # reference's pathological run
                                                           # takes about 13 minutes)
    python benchmarks/scoring_speed.py --sets realistic,noisy --scaling
    python benchmarks/scoring_speed.py --no-reference       # szbench only
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETS = ("realistic", "noisy", "pathological")
REFERENCE_PINS = ["szcore-evaluation==0.0.7", "epilepsy2bids==0.0.7", "timescoring==0.0.7"]
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
DATE = "2024-01-01 00:00:00"


# ------------------------------------------------------------------------------------------
# Data generation
# ------------------------------------------------------------------------------------------


def _rows(onsets: np.ndarray, durations: np.ndarray, rec_dur: float) -> str:
    if onsets.size == 0:
        return f"0.00\t{rec_dur:.2f}\tbckg\tn/a\tn/a\t{DATE}\t{rec_dur:.2f}\n"
    tail = f"\tsz\tn/a\tn/a\t{DATE}\t{rec_dur:.2f}\n"
    return "".join(
        f"{o:.2f}\t{d:.2f}{tail}" for o, d in zip(onsets.tolist(), durations.tolist(), strict=True)
    )


def _write(path: Path, onsets: np.ndarray, durations: np.ndarray, rec_dur: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + _rows(onsets, durations, rec_dur))


def generate(
    root: Path, sets: list[str], seed: int, n_subjects: int, n_recordings: int, n_seizures: int
) -> dict[str, int]:
    """Write ``root/ref`` and ``root/<set>``; return the number of detections of each set."""
    rng = np.random.default_rng(seed)
    subject_of = np.sort(rng.integers(0, n_subjects, n_recordings))
    subject_of[:n_subjects] = np.arange(n_subjects)  # every subject has a recording
    subject_of.sort()
    durations = rng.integers(3300, 3901, n_recordings).astype(float) + rng.choice(
        [0.0, 0.5, 0.25], n_recordings
    )
    # Seizures go to about a third of the subjects, clustered in some recordings.
    sz_subjects = rng.choice(n_subjects, size=max(1, n_subjects * 2 // 3), replace=False)
    candidates = np.flatnonzero(np.isin(subject_of, sz_subjects))
    sz_rec = rng.choice(candidates, size=n_seizures)
    counts = {s: 0 for s in sets}
    ref_events: list[list[tuple[float, float]]] = [[] for _ in range(n_recordings)]
    for r in sz_rec.tolist():
        length = float(np.clip(rng.lognormal(4.0, 0.8), 5, 900))
        onset = float(rng.uniform(0, durations[r] - length))
        ref_events[r].append((round(onset, 2), round(length, 2)))
    for r in range(n_recordings):
        name = f"sub-{subject_of[r] + 1:02d}"
        rel = (
            Path(name)
            / "ses-01"
            / "eeg"
            / f"{name}_ses-01_task-szMonitoring_run-{r:04d}_events.tsv"
        )
        dur = float(durations[r])
        ev = sorted(ref_events[r])
        _write(root / "ref" / rel, np.array([e[0] for e in ev]), np.array([e[1] for e in ev]), dur)
        for s in sets:
            if s == "pathological":
                on = np.arange(0.0, dur - 1, 2.0)
                du = np.ones_like(on)
            else:
                n_fa = rng.poisson(1.0 if s == "realistic" else 12.0)
                fa_on = rng.uniform(0, dur - 60, n_fa)
                fa_du = rng.uniform(1, 60, n_fa)
                det = [
                    (max(0.0, o + rng.normal(5, 20)), max(1.0, d * rng.uniform(0.2, 1.2)))
                    for o, d in ev
                    if rng.random() < 0.7
                ]
                on = np.concatenate([fa_on, [d[0] for d in det]])
                du = np.concatenate([fa_du, [d[1] for d in det]])
                du = np.minimum(du, dur - on)
                order = np.argsort(on)
                on, du = np.round(on[order], 2), np.round(du[order], 2)
            counts[s] += int(on.size)
            _write(root / s / rel, on, du, dur)
    return counts


# ------------------------------------------------------------------------------------------
# Running both scorers in fresh processes
# ------------------------------------------------------------------------------------------

OURS = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, {scoring!r})
    from szbench_scoring import score_dataset
    t, c = time.perf_counter(), time.process_time()
    report = score_dataset(sys.argv[1], sys.argv[2])
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    with open(sys.argv[3], "w") as fh:
        json.dump(report.to_szcore_json(), fh)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({{"seconds": elapsed, "cpu_seconds": cpu, "max_rss_mb": rss}}))
    """
)

REFERENCE = textwrap.dedent(
    """
    import contextlib, io, json, resource, sys, time
    from szcore_evaluation.evaluate import evaluate_dataset
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        evaluate_dataset(sys.argv[1], sys.argv[2], sys.argv[3])
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "max_rss_mb": rss}))
    """
)


def _run(python: str, code: str, ref: Path, hyp: Path, out: Path) -> dict[str, float]:
    proc = subprocess.run(
        [python, "-c", code, str(ref), str(hyp), str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def find_python312(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    candidate = Path("/root/.pyenv/versions/3.12.1/bin/python")
    if candidate.exists():
        return str(candidate)
    return shutil.which("python3.12")


def reference_venv(python: str, venv: Path) -> str:
    """Create (once) a venv with szcore-evaluation 0.0.7 and return its interpreter."""
    exe = venv / "bin" / "python"
    marker = venv / ".szbench-ready"
    if not marker.exists():
        print(f"building the reference environment in {venv} ...", flush=True)
        subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run(
            [str(exe), "-m", "pip", "install", "-q", *REFERENCE_PINS],
            check=True,
        )
        marker.write_text(" ".join(REFERENCE_PINS) + "\n")
    return str(exe)


def same_numbers(a: dict, b: dict) -> list[str]:
    """Differences between two szcore JSON results (NaN/null equal; relative 1e-9)."""
    diffs = []
    for block in ("sample_results", "event_results"):
        for key in sorted(set(a[block]) | set(b[block])):
            x, y = a[block].get(key), b[block].get(key)
            xn = x is None or (isinstance(x, float) and math.isnan(x))
            yn = y is None or (isinstance(y, float) and math.isnan(y))
            if xn and yn:
                continue
            if xn != yn or not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12):
                diffs.append(f"{block}.{key}: szbench {x} vs reference {y}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--sets", default=",".join(SETS), help="comma-separated subset of " + ",".join(SETS)
    )
    ap.add_argument("--workdir", type=Path, help="where to write the sets (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--no-reference", action="store_true", help="time szbench only")
    ap.add_argument("--python312", help="Python 3.12 interpreter for the reference")
    ap.add_argument(
        "--venv",
        type=Path,
        default=Path.home() / ".cache" / "szbench-bench" / "venv312",
        help="reference virtual environment (built once, reused)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="szbench runs per set (best is kept)")
    ap.add_argument("--scaling", action="store_true", help="szbench time vs number of events")
    ap.add_argument("--subjects", type=int, default=65)
    ap.add_argument("--recordings", type=int, default=4360)
    ap.add_argument("--seizures", type=int, default=400)
    ap.add_argument("--seed", type=int, default=2025)
    args = ap.parse_args()
    sets = [s for s in args.sets.split(",") if s]
    unknown = set(sets) - set(SETS)
    if unknown:
        ap.error(f"unknown set(s): {', '.join(sorted(unknown))}")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="szbench-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    ref_python = None
    if not args.no_reference:
        py = find_python312(args.python312)
        if py is None:
            print("no Python 3.12 found: timing szbench only (--python312 to point at one)")
        else:
            ref_python = reference_venv(py, args.venv)

    t = time.perf_counter()
    counts = generate(work, sets, args.seed, args.subjects, args.recordings, args.seizures)
    print(
        f"generated {args.recordings} recordings for {args.subjects} subjects with "
        f"{args.seizures} seizures in {time.perf_counter() - t:.1f} s under {work}"
    )
    ours_code = OURS.format(scoring=str(ROOT / "scoring"))
    failed = False
    rows = []
    for s in sets:
        hyp = work / s
        runs = [
            _run(sys.executable, ours_code, work / "ref", hyp, work / f"{s}-szbench.json")
            for _ in range(max(1, args.repeat))
        ]
        line = {
            "set": s,
            "detections": counts[s],
            "szbench_s": min(r["seconds"] for r in runs),
            "szbench_cpu_s": min(r["cpu_seconds"] for r in runs),
            "szbench_rss_mb": max(r["max_rss_mb"] for r in runs),
        }
        if ref_python:
            print(f"[{s}] running the reference ...", flush=True)
            ref = _run(ref_python, REFERENCE, work / "ref", hyp, work / f"{s}-reference.json")
            ours_json = json.loads((work / f"{s}-szbench.json").read_text())
            ref_json = json.loads((work / f"{s}-reference.json").read_text())
            diffs = same_numbers(ours_json, ref_json)
            if diffs:
                failed = True
                print(f"[{s}] NUMBERS DIFFER:\n  " + "\n  ".join(diffs))
            line.update(
                {
                    "reference_s": ref["seconds"],
                    "reference_cpu_s": ref["cpu_seconds"],
                    "reference_rss_mb": ref["max_rss_mb"],
                    "ratio": ref["seconds"] / line["szbench_s"],
                    "cpu_ratio": ref["cpu_seconds"] / line["szbench_cpu_s"],
                    "equal": not diffs,
                }
            )
        rows.append(line)
        print(json.dumps(line), flush=True)

    nan = float("nan")
    print()
    print("wall-clock seconds (best of the szbench runs), CPU seconds of each process, and")
    print("peak resident memory; the speed-ups divide the reference's time by szbench's:")
    print(
        f"{'set':<13}{'detections':>11}{'szbench s':>11}{'ref s':>9}{'speed-up':>10}"
        f"{'szbench cpu':>13}{'ref cpu':>9}{'cpu speed-up':>14}"
        f"{'szbench MB':>12}{'ref MB':>8}{'equal':>7}"
    )
    for r in rows:
        print(
            f"{r['set']:<13}{r['detections']:>11}{r['szbench_s']:>11.3f}"
            f"{r.get('reference_s', nan):>9.1f}{r.get('ratio', nan):>9.0f}x"
            f"{r['szbench_cpu_s']:>13.3f}{r.get('reference_cpu_s', nan):>9.1f}"
            f"{r.get('cpu_ratio', nan):>13.0f}x"
            f"{r['szbench_rss_mb']:>12.0f}{r.get('reference_rss_mb', nan):>8.0f}"
            f"{r.get('equal', '-')!s:>7}"
        )

    if args.scaling:
        print("\nszbench CPU time against the number of detections (the same reference files):")
        base = None
        for step in (32.0, 8.0, 2.0):
            d = work / f"scaling-{step:g}"
            n = 0
            for ref_file in sorted((work / "ref").rglob("*.tsv")):
                dur = float(ref_file.read_text().splitlines()[1].split("\t")[-1])
                on = np.arange(0.0, dur - 1, step)
                n += on.size
                _write(d / ref_file.relative_to(work / "ref"), on, np.ones_like(on), dur)
            best_s = min(
                _run(sys.executable, ours_code, work / "ref", d, work / "s.json")["cpu_seconds"]
                for _ in range(max(1, args.repeat))
            )
            base = base or (n, best_s)
            print(
                f"  one detection every {step:>4g} s: {n:>9} rows  {best_s:7.3f} s  "
                f"({best_s / n * 1e6:.2f} us/row; x{n / base[0]:.1f} rows -> "
                f"x{best_s / base[1]:.1f} time)"
            )
            shutil.rmtree(d)

    if not args.keep and args.workdir is None:
        shutil.rmtree(work)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
