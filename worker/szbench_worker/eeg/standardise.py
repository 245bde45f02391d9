"""Standardisation of one recording to the SzCORE algorithm input.

Picks the 19 electrodes, resamples them to 256 Hz, re-references them to the common average and
writes an EDF+ file whose signals are ``<name>-Avg`` in the SzCORE order, in chunks, so that peak
memory does not grow with the length of the recording. Reads EDF, EDF+ and BDF itself
(:mod:`~szbench_worker.eeg.edf_read`) and what else MNE reads that centres export (BrainVision
``.vhdr``, EEGLAB ``.set``, through :mod:`~szbench_worker.eeg.mne_read`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from szbench_worker.eeg.edf_header import ANNOTATION_LABELS, read_edf_header
from szbench_worker.eeg.edf_read import EdfSamples, SampleGroup, check_continuity
from szbench_worker.eeg.edf_write import DATA_RECORD_S, EdfStreamWriter
from szbench_worker.eeg.errors import EEGError, MissingChannelsError
from szbench_worker.eeg.labels import CHANNELS, OUTPUT_LABELS, TARGET_SFREQ_HZ, match_channels
from szbench_worker.eeg.mne_read import open_raw, raw_samples, raw_start
from szbench_worker.eeg.resample import resample, resample_ratio

#: Extensions we accept as an EEG recording (the last two are read through MNE).
EEG_EXTENSIONS: tuple[str, ...] = (".edf", ".bdf", ".vhdr", ".set")

#: Flags a standardised recording may carry (also written to the manifest).
FLAG_FLAT_FILLED = "flat-filled"
FLAG_CLIPPED = "clipped"
FLAG_RESAMPLED = "resampled"
FLAG_TRUNCATED_TAIL = "partial-second-dropped"

_RESAMPLE_HEADROOM = 0.05  # resampling can overshoot the input range by a few percent


@dataclass(frozen=True)
class SourceInfo:
    """What standardisation will do with one source recording (read from its header)."""

    path: Path
    sfreq_hz: float
    n_samples: int
    duration_s: float
    mapping: dict[str, str]
    missing: tuple[str, ...]
    flags: tuple[str, ...] = ()


def inspect_recording(path: str | os.PathLike[str], *, allow_flat_fill: bool = False) -> SourceInfo:
    """Read a recording's header and check that it can be standardised.

    Raises :class:`EEGError` (or :class:`MissingChannelsError`) naming the file and the
    problem. Reads no sample data, except the time-keeping annotations of an EDF+D file.
    """
    path = Path(path)
    if not path.is_file():
        raise EEGError(path, "no such file")
    if path.suffix.lower() not in EEG_EXTENSIONS:
        raise EEGError(path, f"unsupported format {path.suffix!r} (use {EEG_EXTENSIONS})")
    flags: list[str] = []
    raw = None
    if path.suffix.lower() in (".edf", ".bdf"):
        # Our own header parse is enough here (and much cheaper than opening the file with
        # MNE, which reads the EDF+ annotations of every record).
        header = read_edf_header(path)
        if header.reserved.startswith(("EDF+D", "BDF+D")):
            check_continuity(path, header)
            flags.append("edf+d-contiguous")
        signals = [i for i, x in enumerate(header.labels) if x not in ANNOTATION_LABELS]
        labels = [header.labels[i] for i in signals]
    else:
        raw = open_raw(path)
        labels = list(raw.ch_names)
    mapping, missing, ambiguous = match_channels(labels)
    if ambiguous:
        raise EEGError(path, "several channels claim the same electrode: " + "; ".join(ambiguous))
    if missing and not allow_flat_fill:
        raise MissingChannelsError(path, missing)
    if len(missing) == len(CHANNELS):
        raise MissingChannelsError(path, missing)
    if missing:
        flags.append(FLAG_FLAT_FILLED + ":" + ",".join(missing))
    if raw is not None:
        sfreq, n_samples = float(raw.info["sfreq"]), int(raw.n_times)
    else:
        # MNE reads the picked channels at the fastest rate among them.
        per_record = max(
            header.samples_per_record[header.labels.index(label)] for label in mapping.values()
        )
        sfreq = per_record / header.record_duration_s
        n_samples = per_record * header.n_records
    if n_samples / sfreq < 1.0:
        raise EEGError(path, f"recording too short: {n_samples / sfreq:.3f} s")
    return SourceInfo(
        path=path,
        sfreq_hz=sfreq,
        n_samples=n_samples,
        duration_s=n_samples / sfreq,
        mapping=mapping,
        missing=tuple(missing),
        flags=tuple(flags),
    )


@dataclass(frozen=True)
class StandardisedRecording:
    """The outcome of standardising one recording."""

    source_path: Path
    output_path: Path
    duration_s: float
    source_sfreq_hz: float
    source_checksum: str
    checksum: str
    start: dt.datetime
    flags: tuple[str, ...] = field(default_factory=tuple)


def file_checksum(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes as ``sha256:<hex>``, through a small fixed buffer."""
    with Path(path).open("rb") as fh:
        digest = hashlib.file_digest(fh, "sha256")
    return "sha256:" + digest.hexdigest()


def _groups(src: Path, picks: list[str]) -> tuple[list[SampleGroup], dt.datetime]:
    """How to read the picked channels (one group per sampling rate), and the start time."""
    if src.suffix.lower() not in (".edf", ".bdf"):
        raw = open_raw(src)
        return [raw_samples(raw, picks)], raw_start(raw)
    header = read_edf_header(src)
    reader = EdfSamples(src, header)
    signals = [header.labels.index(label) for label in picks]
    by_rate: dict[int, list[int]] = {}
    for row, i in enumerate(signals):
        by_rate.setdefault(header.samples_per_record[i], []).append(row)
    groups = [reader.group(rows, [signals[r] for r in rows]) for _, rows in sorted(by_rate.items())]
    return groups, header.start


def standardise_recording(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    allow_flat_fill: bool = False,
    chunk_s: float = 120.0,
    info: SourceInfo | None = None,
    source_checksum: str | None = None,
) -> StandardisedRecording:
    """Standardise one recording to the SzCORE input and write it as EDF+ to ``dst``.

    Picks the 19 electrodes (flat-filling missing ones only when ``allow_flat_fill``),
    resamples them to 256 Hz with a polyphase anti-aliasing filter (channels at different
    rates each from their own rate), re-references them to their common average and writes
    ``<name>-Avg`` signals in SzCORE order. Works through the recording ``chunk_s`` seconds at
    a time: peak memory depends on ``chunk_s``, not on the recording's length, and the chunked
    result equals resampling the whole signal at once. EDF/BDF data records are read directly;
    other formats (BrainVision, EEGLAB) through MNE. The file appears at ``dst`` only when
    complete (written under a temporary name, then renamed), so a failure leaves nothing
    half-written.

    Raises :class:`EEGError` naming the file and the problem.
    """
    src, dst = Path(src), Path(dst)
    info = info or inspect_recording(src, allow_flat_fill=allow_flat_fill)
    flags = list(info.flags)
    # Hash the source on another thread while standardising (hashlib releases the GIL).
    hasher = ThreadPoolExecutor(max_workers=1)
    source_hash: Future[str] | None = None if source_checksum else hasher.submit(file_checksum, src)
    try:
        present = [name for name in CHANNELS if name in info.mapping]
        picks = [info.mapping[name] for name in present]
        groups, start = _groups(src, picks)
        ratios = [resample_ratio(g.sfreq_hz) for g in groups]
        if any(r != 1 for r in ratios):
            flags.append(FLAG_RESAMPLED)
        n_out = min(
            -(-g.n_samples * r.numerator // r.denominator)
            for g, r in zip(groups, ratios, strict=True)
        )
        n_records = n_out // TARGET_SFREQ_HZ
        if n_out % TARGET_SFREQ_HZ:
            flags.append(FLAG_TRUNCATED_TAIL)
        # Output chunks start at multiples of every group's `up`, so each starts at a whole
        # input sample (a multiple of `down`) of every group: chunking changes no sample.
        step = math.lcm(TARGET_SFREQ_HZ, *(r.numerator for r in ratios))
        chunk_out = max(step, round(chunk_s * TARGET_SFREQ_HZ / step) * step)
        pads = [
            0 if r == 1 else -(-(10 * max(r.numerator, r.denominator) // r.numerator + 2)
                                // r.denominator) * r.denominator
            for r in ratios
        ]  # fmt: skip
        index = [CHANNELS.index(name) for name in present]

        bounds = _header_bounds_uv(src, picks)
        if bounds is None:
            bounds = _scan_bounds(groups, len(picks))
        lo, hi = _car_bounds(*bounds)
        headroom = _RESAMPLE_HEADROOM * (hi - lo) * (FLAG_RESAMPLED in flags)
        # Flat-filled channels: a range in which 0 is exactly a digital value.
        full_lo, full_hi = np.full(len(CHANNELS), -32.768), np.full(len(CHANNELS), 32.767)
        full_lo[index], full_hi[index] = lo - headroom, hi + headroom

        total = n_records * TARGET_SFREQ_HZ
        tmp = dst.with_name(dst.name + ".partial")
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            with EdfStreamWriter(
                tmp,
                labels=OUTPUT_LABELS,
                physical_min=full_lo,
                physical_max=full_hi,
                n_records=n_records,
                start=start,
            ) as writer:
                for o0 in range(0, total, chunk_out):
                    o1 = min(total, o0 + chunk_out)
                    data = np.empty((len(picks), o1 - o0))
                    for group, ratio, pad in zip(groups, ratios, pads, strict=True):
                        up, down = ratio.numerator, ratio.denominator
                        i0 = o0 * down // up
                        if ratio == 1:
                            data[group.rows] = group.read(i0, i0 + o1 - o0)
                            continue
                        i1 = min(group.n_samples, -(-o1 * down // up))
                        s0, s1 = max(0, i0 - pad), min(group.n_samples, i1 + pad)
                        res = resample(group.read(s0, s1), up, down)
                        first = (i0 - s0) * up // down
                        data[group.rows] = res[:, first : first + o1 - o0]
                    data -= data.mean(axis=0, keepdims=True)
                    if len(index) == len(CHANNELS):
                        writer.write(data)  # every electrode present: already in SzCORE order
                    else:
                        out = np.zeros((len(CHANNELS), data.shape[1]))
                        out[index] = data
                        writer.write(out)
                checksum = writer.close()
                if writer.n_clipped:
                    flags.append(f"{FLAG_CLIPPED}:{writer.n_clipped}")
            os.replace(tmp, dst)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if source_hash is not None:
            source_checksum = source_hash.result()
    finally:
        hasher.shutdown(wait=True)
    assert source_checksum is not None
    return StandardisedRecording(
        source_path=src,
        output_path=dst,
        duration_s=float(n_records * DATA_RECORD_S),
        source_sfreq_hz=info.sfreq_hz,
        source_checksum=source_checksum,
        checksum=checksum,
        start=start,
        flags=tuple(flags),
    )


def _scan_bounds(groups: list[SampleGroup], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel min and max (µV), a chunk at a time, for formats without a header range."""
    lo = np.full(n_rows, np.inf)
    hi = np.full(n_rows, -np.inf)
    for group in groups:
        chunk = int(60 * group.sfreq_hz)
        for start in range(0, group.n_samples, chunk):
            data = group.read(start, min(group.n_samples, start + chunk))
            lo[group.rows] = np.minimum(lo[group.rows], data.min(axis=1))
            hi[group.rows] = np.maximum(hi[group.rows], data.max(axis=1))
    return lo, hi


def _header_bounds_uv(path: Path, labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Physical range of the given EDF/BDF signals in µV, or None when it cannot be known."""
    if path.suffix.lower() not in (".edf", ".bdf"):
        return None
    header = read_edf_header(path)
    index = {label: i for i, label in enumerate(header.labels)}
    lo, hi = [], []
    for label in labels:
        i = index.get(label)
        if i is None:
            return None
        scale = header.uv_scale(i)
        if scale is None:
            return None
        a, b = header.physical_min[i] * scale, header.physical_max[i] * scale
        lo.append(min(a, b))
        hi.append(max(a, b))
    return np.asarray(lo), np.asarray(hi)


def _car_bounds(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact range of x_i - mean(x) when each x_j lies in [lo_j, hi_j]."""
    n = lo.size
    out_hi = hi - (hi + lo.sum() - lo) / n
    out_lo = lo - (lo + hi.sum() - hi) / n
    return out_lo, out_hi
