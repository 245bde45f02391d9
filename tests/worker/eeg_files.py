"""Helpers that write small EEG files for the EEG and dataset tests (not a test module)."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyedflib

from szbench_worker.eeg.labels import CHANNELS

PYEDFLIB_DATA = Path(pyedflib.__file__).parent / "tests" / "data"
"""Real EDF/BDF files shipped inside the pyedflib wheel."""

START = dt.datetime(2021, 3, 4, 5, 6, 7)


def sine_signals(
    labels: Sequence[str], sfreq_hz: float, duration_s: float, *, seed: int = 0
) -> dict[str, tuple[float, np.ndarray]]:
    """One distinct sinusoid plus noise per channel (µV), so channels can be told apart."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(duration_s * sfreq_hz)) / sfreq_hz
    out = {}
    for i, label in enumerate(labels):
        x = 40 * np.sin(2 * np.pi * (2 + i % 17) * t + i) + 5 * rng.standard_normal(t.size)
        out[label] = (sfreq_hz, x)
    return out


def write_edf(
    path: Path,
    signals: Mapping[str, tuple[float, np.ndarray]],
    *,
    bdf: bool = False,
    start: dt.datetime = START,
    dimension: str = "uV",
) -> Path:
    """Write signals ``{label: (sfreq_hz, data)}`` with pyedflib (EDF+ or BDF+), 1 s records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = list(signals)
    writer = pyedflib.EdfWriter(
        str(path),
        len(labels),
        file_type=pyedflib.FILETYPE_BDFPLUS if bdf else pyedflib.FILETYPE_EDFPLUS,
    )
    try:
        headers = []
        for label in labels:
            fs, x = signals[label]
            lim = float(np.ceil(np.abs(x).max() + 1))
            headers.append(
                {
                    "label": label,
                    "dimension": dimension,
                    "sample_frequency": fs,
                    "physical_min": -lim,
                    "physical_max": lim,
                    "digital_min": -8388608 if bdf else -32768,
                    "digital_max": 8388607 if bdf else 32767,
                    "transducer": "",
                    "prefilter": "",
                }
            )
        writer.setSignalHeaders(headers)
        writer.setStartdatetime(start)
        writer.writeSamples([np.ascontiguousarray(signals[label][1]) for label in labels])
    finally:
        writer.close()
    return path


def standard_edf(
    path: Path,
    duration_s: float = 60,
    sfreq_hz: float = 256,
    *,
    labels: Sequence[str] | None = None,
    extra: Sequence[str] = (),
    seed: int = 0,
) -> Path:
    """An EDF with the 19 electrodes (as ``labels``, default ``EEG <name>-REF``) plus extras."""
    labels = list(labels) if labels is not None else [f"EEG {c.upper()}-REF" for c in CHANNELS]
    return write_edf(path, sine_signals([*labels, *extra], sfreq_hz, duration_s, seed=seed))


def events_tsv(duration_s: float, seizures: Sequence[tuple[float, float]] = ()) -> str:
    """An SzCORE events TSV."""
    head = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
    when = START.strftime("%Y-%m-%d %H:%M:%S")
    if not seizures:
        return head + f"0\t{duration_s}\tbckg\tn/a\tn/a\t{when}\t{duration_s}\n"
    return head + "".join(
        f"{a}\t{b - a}\tsz\tn/a\tn/a\t{when}\t{duration_s}\n" for a, b in seizures
    )


def bids_recording(
    root: Path,
    subject: str,
    run: str,
    *,
    duration_s: float = 60,
    sfreq_hz: float = 256,
    seizures: Sequence[tuple[float, float]] = (),
    annotation_duration_s: float | None = None,
    labels: Sequence[str] | None = None,
    seed: int = 0,
) -> Path:
    """Write ``sub-X/ses-01/eeg/sub-X_ses-01_task-szMonitoring_run-Y_eeg.edf`` + events."""
    stem = f"sub-{subject}_ses-01_task-szMonitoring_run-{run}"
    folder = root / f"sub-{subject}" / "ses-01" / "eeg"
    eeg = standard_edf(folder / f"{stem}_eeg.edf", duration_s, sfreq_hz, labels=labels, seed=seed)
    ann = annotation_duration_s if annotation_duration_s is not None else duration_s
    (folder / f"{stem}_events.tsv").write_text(events_tsv(ann, seizures))
    return eeg


def relabel(src: Path, dst: Path, labels: Mapping[str, str]) -> Path:
    """Copy an EDF/BDF, renaming signals in its header bytes (the data stay untouched)."""
    shutil.copyfile(src, dst)
    with dst.open("r+b") as fh:
        fixed = fh.read(256)
        ns = int(fixed[252:256])
        fh.seek(256)
        names = [fh.read(16).decode("latin-1").strip() for _ in range(ns)]
        for i, name in enumerate(names):
            if name in labels:
                fh.seek(256 + 16 * i)
                fh.write(labels[name].ljust(16).encode("latin-1"))
    return dst


def make_discontinuous(path: Path, *, gap_after_record: int | None, gap_s: int = 10) -> Path:
    """Turn an EDF+C written by szbench (1 s records, 64-byte annotation signal) into EDF+D.

    With ``gap_after_record`` the records from that index on start ``gap_s`` later.
    """
    data = bytearray(path.read_bytes())
    data[192:197] = b"EDF+D"
    ns = int(data[252:256])
    header = 256 * (ns + 1)
    n_records = int(data[236:244])
    record = (len(data) - header) // n_records
    if gap_after_record is not None:
        for k in range(gap_after_record, n_records):
            tal = f"+{k + gap_s}\x14\x14\x00".encode().ljust(64, b"\x00")
            end = header + (k + 1) * record
            data[end - 64 : end] = tal
    path.write_bytes(bytes(data))
    return path
