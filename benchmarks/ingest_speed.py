"""Speed and peak memory of EEG standardisation, against MNE's plain read of the same file.

Baseline (the floor), measured in the same run: ``mne.io.read_raw_edf(path, preload=True)``,
which reads every sample of the file once and does nothing else. Contender:
:func:`~szbench_worker.eeg.standardise.standardise_recording` on the same file (pick the 19
electrodes, common average, resample, write the EDF, checksum source and output).

Cases (issue 3's Speed section):

- ``conforming``: 1 h, 19 channels, 256 Hz, already SzCORE-shaped (synthetic EEG).
  Goal: within 1.5x of the plain read.
- ``512hz+extra``: 1 h, 512 Hz, 19 EEG channels with clinical labels (``EEG FP1-REF``, ``T7``...)
  plus 5 extra channels (ECG, EMG, A1, A2, Photic), so it needs picking and resampling.
  Goal: within 3x of the plain read.

Peak memory: each measurement runs in a fresh process and reports its peak resident set
(``ru_maxrss``), for 1 h and for ``--long-hours`` (default 4 h) of the same recording: the
standardisation's peak should not grow with the length (the plain read's does).

Run: ``python benchmarks/ingest_speed.py [--repeat 3] [--long-hours 4] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring"):
    sys.path.insert(0, str(REPO / part))

import numpy as np  # noqa: E402

from szbench_worker import synth  # noqa: E402
from szbench_worker.eeg.edf_write import EdfStreamWriter  # noqa: E402
from szbench_worker.eeg.labels import CHANNELS  # noqa: E402

EXTRA = ("ECG", "EMG", "A1", "A2", "Photic")


def make_conforming(path: Path, hours: float) -> None:
    synth.generate_recording(path, duration_s=hours * 3600, seed=[1, 2, 3])


def make_512(path: Path, hours: float) -> None:
    """19 EEG channels with clinical labels plus extras at 512 Hz (random 1/f-ish signals)."""
    alias = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}
    labels = [f"EEG {alias.get(c, c).upper()}-REF" for c in CHANNELS] + list(EXTRA)
    n_s = int(hours * 3600)
    rng = np.random.default_rng(0)
    with EdfStreamWriter(
        path,
        labels=labels,
        physical_min=[-3000.0] * len(labels),
        physical_max=[3000.0] * len(labels),
        n_records=n_s,
        sfreq_hz=512,
    ) as writer:
        state = np.zeros((len(labels), 1))
        for _ in range(0, n_s, 60):
            white = rng.standard_normal((len(labels), 60 * 512)).astype(np.float32)
            walk = np.cumsum(white, axis=1) * 0.5 + state
            state = walk[:, -1:] * 0.98
            writer.write(walk * 0.5 + white * 10)
        writer.close()


def child(mode: str, path: str, out: str) -> None:
    """Run one measurement in this (fresh) process and print JSON with time and peak RSS."""
    import mne

    from szbench_worker.eeg.standardise import standardise_recording

    mne.set_log_level("ERROR")
    start = time.perf_counter()
    if mode == "read":
        mne.io.read_raw_edf(path, preload=True)
    else:
        standardise_recording(path, out)
    elapsed = time.perf_counter() - start
    print(json.dumps({"seconds": elapsed, "peak_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident set. VmHWM belongs to the process's own memory map;
    ru_maxrss would carry over the parent's peak through fork and exec on Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(mode: str, path: Path, out: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(path), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def timed_pair(floor, ours, repeat: int, setup=None) -> tuple[float, float]:
    """Best-of-N seconds of each, alternating the two so that load on the machine hits both."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for k, fn in enumerate((floor, ours)):
            if setup is not None:
                setup()
            start = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings (default 3)")
    parser.add_argument(
        "--long-hours", type=float, default=4.0, help="long recording (h); 0 skips the memory part"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    import mne

    from szbench_worker.eeg.standardise import standardise_recording

    mne.set_log_level("ERROR")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ingest-bench-") as tmp:
        root = Path(tmp)
        cases = {"conforming": make_conforming, "512hz+extra": make_512}
        print(f"Standardisation vs MNE's plain read (best of {args.repeat}), 1 h recordings")
        print(f"{'case':<14}{'plain read':>12}{'standardise':>13}{'ratio':>8}{'goal':>7}")
        goals = {"conforming": 1.5, "512hz+extra": 3.0}
        for name, make in cases.items():
            src = root / f"{name}-1h.edf"
            make(src, 1.0)
            out = root / f"{name}-1h-out.edf"
            # Warm up both (imports, page cache) before timing.
            mne.io.read_raw_edf(src, preload=True)
            standardise_recording(src, out)
            floor, ours = timed_pair(
                lambda s=src: mne.io.read_raw_edf(s, preload=True),
                lambda s=src, o=out: standardise_recording(s, o),
                args.repeat,
                setup=lambda o=out: o.unlink(missing_ok=True),  # not timing the old file's removal
            )
            print(
                f"{name:<14}{floor:>11.3f}s{ours:>12.3f}s{ours / floor:>7.2f}x"
                f"{'<=' + str(goals[name]) + 'x':>7}"
            )

        hours = args.long_hours
        if hours <= 0:
            return
        print(f"\nPeak memory (fresh process each, max RSS in MB): 1 h vs {hours:g} h")
        print(f"{'case':<14}{'what':<13}{'1 h':>9}{f'{hours:g} h':>9}{'growth':>9}")
        for name, make in cases.items():
            short = root / f"{name}-1h.edf"
            long = root / f"{name}-{hours:g}h.edf"
            make(long, hours)
            for mode, label in (("read", "plain read"), ("standardise", "standardise")):
                a = run_child(mode, short, root / "m-short.edf")
                b = run_child(mode, long, root / "m-long.edf")
                growth = b["peak_mb"] - a["peak_mb"]
                print(
                    f"{name:<14}{label:<13}{a['peak_mb']:>9.0f}{b['peak_mb']:>9.0f}{growth:>+8.0f}M"
                )
            long.unlink()


if __name__ == "__main__":
    main()
