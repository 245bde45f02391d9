#!/usr/bin/env python3
"""szbench baseline seizure detector: line length and rhythmic band power, numpy only.

Runs as an SzCORE algorithm container (reads ``/data/$INPUT``, writes ``/output/$OUTPUT``) or
as a plain process: ``python3 detect.py --input rec.edf --output rec.tsv``. See README.md for
the method. Only the Python standard library and numpy are needed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

import numpy as np

WINDOW_S = 4.0  # analysis window
STEP_S = 1.0  # one feature vector per second
SMOOTH_S = 9  # moving average of the window score, in steps
THRESHOLD = 3.0  # on the smoothed, robustly normalised score
MIN_DURATION_S = 10.0
MERGE_GAP_S = 20.0
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"


# --------------------------------------------------------------------------- EDF reading


class EdfError(ValueError):
    pass


def read_edf(path: str | Path) -> tuple[np.ndarray, float, list[str], dt.datetime | None]:
    """Read the ordinary signals of an EDF/EDF+ file: (data µV float32 [ch, n], fs, labels, start).

    Signals must share one sampling rate (the SzCORE input does); EDF+ annotation signals are
    skipped.
    """
    path = Path(path)
    raw = path.read_bytes()
    if len(raw) < 256:
        raise EdfError(f"{path}: not an EDF file ({len(raw)} bytes)")
    try:
        header_bytes = int(raw[184:192])
        n_records = int(raw[236:244])
        record_s = float(raw[244:252])
        ns = int(raw[252:256])
    except ValueError as exc:
        raise EdfError(f"{path}: bad EDF header ({exc})") from exc
    block = raw[256:header_bytes]

    def field(offset: int, width: int) -> list[str]:
        start = offset * ns
        return [
            block[start + i * width : start + (i + 1) * width].decode("latin-1").strip()
            for i in range(ns)
        ]

    labels = field(0, 16)
    units = field(96, 8)
    pmin = np.array(field(104, 8), dtype=float)
    pmax = np.array(field(112, 8), dtype=float)
    dmin = np.array(field(120, 8), dtype=float)
    dmax = np.array(field(128, 8), dtype=float)
    nsamp = np.array(field(216, 8), dtype=int)
    record_len = int(nsamp.sum())
    available = (len(raw) - header_bytes) // (2 * record_len)
    if n_records < 0 or n_records > available:
        n_records = available
    records = np.frombuffer(raw, dtype="<i2", count=n_records * record_len, offset=header_bytes)
    records = records.reshape(n_records, record_len)
    keep = [i for i, x in enumerate(labels) if x not in ("EDF Annotations", "BDF Annotations")]
    if len({int(nsamp[i]) for i in keep}) != 1:
        raise EdfError(f"{path}: signals have different sampling rates")
    offsets = np.concatenate([[0], np.cumsum(nsamp)])
    n = int(nsamp[keep[0]])
    data = np.empty((len(keep), n_records * n), dtype=np.float32)
    for row, i in enumerate(keep):
        gain = (pmax[i] - pmin[i]) / (dmax[i] - dmin[i])
        scale = {"uv": 1.0, "mv": 1e3, "v": 1e6}.get(units[i].lower(), 1.0)
        digital = records[:, offsets[i] : offsets[i + 1]].reshape(-1)
        data[row] = ((digital - dmin[i]) * gain + pmin[i]) * scale
    start = None
    try:
        day, month, year = (int(x) for x in raw[168:176].decode("ascii").split("."))
        hour, minute, second = (int(x) for x in raw[176:184].decode("ascii").split("."))
        start = dt.datetime(
            2000 + year if year < 85 else 1900 + year, month, day, hour, minute, second
        )
    except ValueError:
        pass
    return data, n / record_s, [labels[i] for i in keep], start


# --------------------------------------------------------------------------- detection


def window_features(data: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window and channel: line length, rhythmic (2.5-10 Hz) and muscle (25-60 Hz) power."""
    win, step = int(WINDOW_S * fs), int(STEP_S * fs)
    n_win = max(0, (data.shape[1] - win) // step + 1)
    feats_ll = np.empty((n_win, data.shape[0]), np.float32)
    feats_rh = np.empty_like(feats_ll)
    feats_hf = np.empty_like(feats_ll)
    freqs = np.fft.rfftfreq(win, 1 / fs)
    rhythmic = (freqs >= 2.5) & (freqs <= 10.0)
    muscle = (freqs >= 25.0) & (freqs <= 60.0)
    taper = np.hanning(win).astype(np.float32)
    # Windows in blocks: bounded memory for any recording length.
    for first in range(0, n_win, 256):
        idx = np.arange(first, min(n_win, first + 256))
        starts = idx * step
        seg = np.stack([data[:, s : s + win] for s in starts])  # [w, ch, win]
        feats_ll[idx] = np.abs(np.diff(seg, axis=2)).mean(axis=2)
        seg = seg - seg.mean(axis=2, keepdims=True)
        spec = np.abs(np.fft.rfft(seg * taper, axis=2)) ** 2
        feats_rh[idx] = spec[:, :, rhythmic].sum(axis=2)
        feats_hf[idx] = spec[:, :, muscle].sum(axis=2)
    return feats_ll, feats_rh, feats_hf


def robust_z(x: np.ndarray) -> np.ndarray:
    """(x - median) / (1.4826 MAD) per column: the recording is its own reference."""
    med = np.median(x, axis=0, keepdims=True)
    mad = np.median(np.abs(x - med), axis=0, keepdims=True) * 1.4826
    return (x - med) / np.maximum(mad, 1e-6 * np.maximum(np.abs(med), 1e-12))


def seizure_score(data: np.ndarray, fs: float) -> np.ndarray:
    """One score per second: how seizure-like the EEG around it is."""
    ll, rh, hf = window_features(data, fs)
    if ll.shape[0] == 0:
        return np.zeros(0)
    z_ll = robust_z(np.log(ll + 1e-6))
    z_rh = robust_z(np.log(rh + 1e-6))
    z_hf = robust_z(np.log(hf + 1e-6))
    # Seizures raise line length together with rhythmic power; muscle raises line length
    # through high frequencies instead, so high-frequency power counts against a window.
    per_channel = (
        0.25 * np.clip(z_ll, None, 6.0) + 0.75 * z_rh - 0.5 * np.clip(z_hf - z_rh - 2.0, 0, None)
    )
    # The second-highest channel: a seizure involves a region, an artifact often one electrode.
    score = np.sort(per_channel, axis=1)[:, -2]
    kernel = np.ones(SMOOTH_S) / SMOOTH_S
    return np.convolve(score, kernel, mode="same")


def detect(data: np.ndarray, fs: float, threshold: float = THRESHOLD) -> list[tuple[float, float]]:
    """Seizure events as (onset_s, duration_s)."""
    score = seizure_score(data, fs)
    above = score > threshold
    events: list[list[float]] = []
    edges = np.flatnonzero(np.diff(np.concatenate([[0], above.astype(np.int8), [0]])))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        # Window k covers [k*STEP, k*STEP + WINDOW); centre it on its middle second.
        onset = start * STEP_S + WINDOW_S / 2 - STEP_S / 2
        end = stop * STEP_S + WINDOW_S / 2 - STEP_S / 2
        if events and onset - events[-1][1] < MERGE_GAP_S:
            events[-1][1] = end
        else:
            events.append([onset, end])
    duration = data.shape[1] / fs
    return [
        (max(0.0, a), min(duration, b) - max(0.0, a))
        for a, b in events
        if min(duration, b) - max(0.0, a) >= MIN_DURATION_S
    ]


def write_tsv(
    path: str | Path,
    events: list[tuple[float, float]],
    duration_s: float,
    start: dt.datetime | None,
) -> None:
    """Write SzCORE annotations: one `sz` row per event, or one `bckg` row if there is none."""

    # SzCORE's dateTime is the start of the recording, on every row.
    when = "n/a" if start is None else start.strftime("%Y-%m-%d %H:%M:%S")
    rows = [
        f"{onset:.2f}\t{length:.2f}\tsz\tn/a\tn/a\t{when}\t{duration_s:.2f}\n"
        for onset, length in events
    ] or [f"0.00\t{duration_s:.2f}\tbckg\tn/a\tn/a\t{when}\t{duration_s:.2f}\n"]
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(HEADER + "".join(rows))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="EDF file (default: /data/$INPUT)")
    parser.add_argument("--output", help="TSV file (default: /output/$OUTPUT)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=float(os.environ.get("BASELINE_THRESHOLD", THRESHOLD)),
        help=f"decision threshold on the score (default: $BASELINE_THRESHOLD or {THRESHOLD})",
    )
    args = parser.parse_args(argv)
    src = args.input or (
        os.path.join("/data", os.environ["INPUT"]) if "INPUT" in os.environ else None
    )
    dst = args.output or (
        os.path.join("/output", os.environ["OUTPUT"]) if "OUTPUT" in os.environ else None
    )
    if not src or not dst:
        parser.error("give --input/--output or set INPUT and OUTPUT")
    try:
        data, fs, _labels, start = read_edf(src)
    except (OSError, EdfError) as exc:
        print(f"baseline: cannot read input: {exc}", file=sys.stderr)
        return 1
    duration_s = data.shape[1] / fs
    events = detect(data, fs, args.threshold)
    write_tsv(dst, events, duration_s, start)
    print(f"baseline: {len(events)} seizure event(s) in {duration_s:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
