"""EEG I/O and standardisation to the SzCORE algorithm input.

The one module of the project that imports MNE. It reads EDF, EDF+ and BDF (its own header
checks, then the fixed-size data records with numpy) and what else MNE reads that centres export
(BrainVision ``.vhdr``, EEGLAB ``.set``, through MNE); maps channel labels onto the 19 electrodes
of the 10-20 system; resamples to 256 Hz; re-references to the common average; and writes an
EDF+ file whose signals are ``<name>-Avg`` in the SzCORE order. All of it runs in chunks, so peak
memory does not grow with the length of the recording.

Why EDF/BDF samples are not read through MNE: ``mne.io.read_raw_edf`` parses every EDF+
annotation of the file when it opens it (its memory grows with the recording: measured +7 MB
for 25 extra minutes), and chunked ``get_data`` calls cost more than reading the records.
The tests check our reader against MNE's and pyedflib's on the same files.

The EDF writer is our own (:class:`EdfStreamWriter`): it writes records as they come, which
neither MNE's nor edfio's whole-array exporters do, and hashes the bytes it writes so that the
checksum of a standardised file costs no second read.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from scipy.ndimage import correlate1d
from scipy.signal import firwin, resample_poly

CHANNELS: tuple[str, ...] = (
    "Fp1", "F3", "C3", "P3", "O1", "F7", "T3", "T5", "Fz", "Cz",
    "Pz", "Fp2", "F4", "C4", "P4", "O2", "F8", "T4", "T6",
)  # fmt: skip
"""The 19 electrodes of the SzCORE input, in the order algorithms receive them."""

OUTPUT_LABELS: tuple[str, ...] = tuple(f"{name}-Avg" for name in CHANNELS)
"""EDF signal labels of a standardised recording."""

TARGET_SFREQ_HZ = 256
"""Sampling rate of a standardised recording."""

#: The newer 10-10 names of four electrodes whose SzCORE names are the old 10-20 ones.
ALIASES: dict[str, str] = {"T7": "T3", "T8": "T4", "P7": "T5", "P8": "T6"}

#: Suffixes naming a reference, removed before matching (case-insensitive).
_REFERENCE_SUFFIXES = ("-REF", "-LE", "-AVG", "-AV", "-AR", "-CAR")

#: Extensions MNE reads that we accept as an EEG recording.
EEG_EXTENSIONS: tuple[str, ...] = (".edf", ".bdf", ".vhdr", ".set")

#: Flags a standardised recording may carry (also written to the manifest).
FLAG_FLAT_FILLED = "flat-filled"
FLAG_CLIPPED = "clipped"
FLAG_RESAMPLED = "resampled"
FLAG_TRUNCATED_TAIL = "partial-second-dropped"

_CANONICAL_UPPER = {name.upper(): name for name in CHANNELS}
_ANNOTATION_LABELS = ("EDF Annotations", "BDF Annotations")
_DATA_RECORD_S = 1  # EDF data records of one second: any whole-second length fits
_ANNOTATION_BYTES = 64  # room per record for the EDF+ time-keeping annotation
_RESAMPLE_HEADROOM = 0.05  # resampling can overshoot the input range by a few percent
_UNIT_TO_UV = {"uv": 1.0, "µv": 1.0, "μv": 1.0, "mv": 1e3, "v": 1e6, "nv": 1e-3}


class EEGError(ValueError):
    """A recording that cannot be read or standardised; says which file and what is wrong."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class MissingChannelsError(EEGError):
    """The recording lacks some of the 19 electrodes (listed in :attr:`missing`)."""

    def __init__(self, path: str | os.PathLike[str], missing: Sequence[str]) -> None:
        self.missing = tuple(missing)
        super().__init__(path, "missing channels: " + ", ".join(self.missing))


# --------------------------------------------------------------------------- channel labels


def canonical_channel(label: str) -> str | None:
    """The SzCORE electrode name a channel label denotes, or None if it is not one of the 19.

    Case is ignored; an ``EEG`` prefix and a reference suffix (``-REF``, ``-LE``, ``-Avg``, ...)
    are removed; T7/T8/P7/P8 map onto T3/T4/T5/T6.

    >>> [canonical_channel(x) for x in ("EEG FP1-REF", "t7-LE", "Cz-Avg", "ECG", "Fp1-F3")]
    ['Fp1', 'T3', 'Cz', None, None]
    """
    name = label.strip()
    name = re.sub(r"^EEG[\s_:-]*", "", name, flags=re.IGNORECASE).strip()
    upper = name.upper()
    for suffix in _REFERENCE_SUFFIXES:
        if upper.endswith(suffix):
            upper = upper[: -len(suffix)].strip()
            break
    upper = ALIASES.get(upper.capitalize(), upper).upper()
    return _CANONICAL_UPPER.get(upper)


def match_channels(labels: Sequence[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """Map source channel labels onto the 19 electrodes.

    Returns ``(mapping, missing, ambiguous)``: ``mapping`` takes each SzCORE name found to the
    source label that provides it, ``missing`` lists the absent electrodes in SzCORE order and
    ``ambiguous`` describes electrodes that several labels claim equally (an error for the
    caller). When a label with the SzCORE name and one with its 10-10 alias are both present,
    the SzCORE name wins.

    >>> mapping, missing, ambiguous = match_channels(["EEG T7-REF", "EEG FP1-REF"])
    >>> mapping
    {'Fp1': 'EEG FP1-REF', 'T3': 'EEG T7-REF'}
    >>> len(missing), ambiguous
    (17, [])
    """
    candidates: dict[str, list[str]] = {}
    for label in labels:
        name = canonical_channel(label)
        if name is not None:
            candidates.setdefault(name, []).append(label)
    mapping: dict[str, str] = {}
    ambiguous: list[str] = []
    for name in CHANNELS:
        found = candidates.get(name, [])
        if len(found) > 1:
            # Prefer the SzCORE name over a 10-10 alias; anything else is a real ambiguity.
            direct = [x for x in found if _strip_label(x) == name.upper()]
            found = direct if len(direct) == 1 else found
        if len(found) == 1:
            mapping[name] = found[0]
        elif len(found) > 1:
            ambiguous.append(f"{name} ({', '.join(found)})")
    missing = [name for name in CHANNELS if name not in mapping and name not in candidates]
    return mapping, missing, ambiguous


def _strip_label(label: str) -> str:
    name = re.sub(r"^EEG[\s_:-]*", "", label.strip(), flags=re.IGNORECASE).strip().upper()
    for suffix in _REFERENCE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)].strip()
    return name


# --------------------------------------------------------------------------- EDF header checks


@dataclass(frozen=True)
class EdfHeader:
    """The parts of an EDF/BDF header that standardisation needs (parsed by us, not MNE)."""

    n_records: int
    record_duration_s: float
    labels: tuple[str, ...]
    dimensions: tuple[str, ...]
    physical_min: tuple[float, ...]
    physical_max: tuple[float, ...]
    digital_min: tuple[float, ...]
    digital_max: tuple[float, ...]
    samples_per_record: tuple[int, ...]
    reserved: str
    header_bytes: int
    bytes_per_sample: int


def read_edf_header(path: str | os.PathLike[str]) -> EdfHeader:
    """Parse and check an EDF/EDF+/BDF header; an :class:`EEGError` says what is wrong.

    Checks the fixed fields, that the file holds as many data records as the header announces
    (a truncated file is an error here, where MNE would warn and read less) and that every
    signal has a positive number of samples per record.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as fh:
        fixed = fh.read(256)
        if len(fixed) < 256:
            raise EEGError(path, f"not an EDF/BDF file: {len(fixed)} bytes, header needs 256")
        bdf = fixed[:1] == b"\xff"
        try:
            header_bytes = int(fixed[184:192].decode("ascii").strip())
            n_records = int(fixed[236:244].decode("ascii").strip())
            record_duration_s = float(fixed[244:252].decode("ascii").strip())
            n_signals = int(fixed[252:256].decode("ascii").strip())
        except (UnicodeDecodeError, ValueError) as exc:
            raise EEGError(path, f"wrong header: a numeric field does not parse ({exc})") from exc
        if n_signals <= 0 or header_bytes != 256 * (n_signals + 1):
            raise EEGError(
                path,
                f"wrong header: {n_signals} signals but header size {header_bytes} bytes "
                f"(expected {256 * (n_signals + 1)})",
            )
        if record_duration_s <= 0:
            raise EEGError(path, f"wrong header: data record duration {record_duration_s} s")
        block = fh.read(256 * n_signals)
        if len(block) < 256 * n_signals:
            raise EEGError(path, "truncated header: signal fields incomplete")

    def fields(offset: int, width: int) -> list[str]:
        start = offset * n_signals
        return [
            block[start + i * width : start + (i + 1) * width].decode("latin-1").strip()
            for i in range(n_signals)
        ]

    labels = fields(0, 16)
    dimensions = fields(16 + 80, 8)
    try:
        pmin = [float(x) for x in fields(16 + 80 + 8, 8)]
        pmax = [float(x) for x in fields(16 + 80 + 8 + 8, 8)]
        dmin = [float(x) for x in fields(16 + 80 + 8 * 3, 8)]
        dmax = [float(x) for x in fields(16 + 80 + 8 * 4, 8)]
        nsamp = [int(x) for x in fields(16 + 80 + 8 * 5 + 80, 8)]
    except ValueError as exc:
        raise EEGError(path, f"wrong header: a signal field does not parse ({exc})") from exc
    if min(nsamp) <= 0:
        raise EEGError(path, "wrong header: a signal has no samples per data record")
    flat = [labels[i] for i in range(n_signals) if dmax[i] <= dmin[i] or pmax[i] == pmin[i]]
    if flat:
        raise EEGError(path, f"wrong header: empty digital or physical range for {flat[0]!r}")
    width = 3 if bdf else 2
    record_bytes = sum(nsamp) * width
    available = (size - header_bytes) // record_bytes
    if n_records < 0:  # -1: the writer never finished; the size tells us how many are there
        n_records = available
    elif available < n_records:
        raise EEGError(
            path,
            f"truncated file: the header announces {n_records} data records of "
            f"{record_duration_s:g} s but the file holds {available}",
        )
    return EdfHeader(
        n_records=n_records,
        record_duration_s=record_duration_s,
        labels=tuple(labels),
        dimensions=tuple(dimensions),
        physical_min=tuple(pmin),
        physical_max=tuple(pmax),
        digital_min=tuple(dmin),
        digital_max=tuple(dmax),
        samples_per_record=tuple(nsamp),
        reserved=fixed[192:236].decode("latin-1").strip(),
        header_bytes=header_bytes,
        bytes_per_sample=width,
    )


def _check_edf_continuity(path: Path, header: EdfHeader) -> bool:
    """For EDF+D: True if the records are contiguous, else an EEGError naming the first gap."""
    ann = [i for i, x in enumerate(header.labels) if x in _ANNOTATION_LABELS]
    if not ann:
        raise EEGError(path, "EDF+D file without an annotation signal: cannot place its records")
    idx = ann[0]
    width = header.bytes_per_sample
    record_bytes = sum(header.samples_per_record) * width
    offset = sum(header.samples_per_record[:idx]) * width
    nbytes = header.samples_per_record[idx] * width
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=header.header_bytes)
    records = mm[: header.n_records * record_bytes].reshape(header.n_records, record_bytes)
    tals = records[:, offset : offset + nbytes]
    onsets = np.empty(header.n_records)
    for k in range(header.n_records):  # one short bytes slice per record, no sample data
        text = bytes(tals[k]).split(b"\x14", 1)[0]
        try:
            onsets[k] = float(text.decode("ascii"))
        except ValueError as exc:
            raise EEGError(path, f"EDF+D record {k}: no time-keeping annotation") from exc
    expected = onsets[0] + np.arange(header.n_records) * header.record_duration_s
    gaps = np.flatnonzero(np.abs(onsets - expected) > 1e-6)
    if gaps.size:
        k = int(gaps[0])
        raise EEGError(
            path,
            f"discontinuous recording (EDF+D): record {k} starts at {onsets[k]:g} s, "
            f"expected {expected[k]:g} s; split it into continuous recordings first",
        )
    return True


# --------------------------------------------------------------------------- reading


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

    @property
    def output_duration_s(self) -> int:
        """Whole seconds the standardised EDF will hold (a trailing part-second is dropped)."""
        ratio = _resample_ratio(self.sfreq_hz)
        n_out = -(-self.n_samples * ratio.numerator // ratio.denominator)
        return n_out // TARGET_SFREQ_HZ


def _open_raw(path: Path, include: Sequence[str] | None = None) -> Any:
    import mne  # imported here so that importing this module stays cheap

    mne.set_log_level("ERROR")
    suffix = path.suffix.lower()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if suffix in (".edf", ".bdf"):
                reader = mne.io.read_raw_edf if suffix == ".edf" else mne.io.read_raw_bdf
                kwargs = {"include": list(include)} if include is not None else {}
                return reader(path, preload=False, **kwargs)
            return mne.io.read_raw(path, preload=False)
        except EEGError:
            raise
        except Exception as exc:
            raise EEGError(path, f"cannot read: {type(exc).__name__}: {exc}") from exc


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
            _check_edf_continuity(path, header)
            flags.append("edf+d-contiguous")
        signals = [i for i, x in enumerate(header.labels) if x not in _ANNOTATION_LABELS]
        labels = [header.labels[i] for i in signals]
    else:
        raw = _open_raw(path)
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


def _resample_ratio(sfreq_hz: float) -> Fraction:
    ratio = Fraction(TARGET_SFREQ_HZ) / Fraction(sfreq_hz).limit_denominator(10_000)
    if max(ratio.numerator, ratio.denominator) > 4096:
        # An irrational-looking rate (e.g. 199.997 Hz): a nearby simple ratio is within the
        # clock accuracy of any EEG amplifier.
        ratio = ratio.limit_denominator(512)
    return ratio


def _resample(x: np.ndarray, up: int, down: int) -> np.ndarray:
    """``resample_poly(x, up, down, axis=1)``, faster for the common whole-number decimations.

    512, 1024 or 2048 Hz to 256 Hz is a decimation by M with no upsampling. resample_poly's
    default filter (a Kaiser-windowed sinc with cutoff at the new Nyquist, 20M+1 taps) is then a
    Nyquist-M filter: every M-th tap away from the centre is zero. upfirdn multiplies by those
    zeros anyway; splitting the input into its M polyphase components and correlating each with
    its own taps skips them (about half the work for M = 2). Same filter, same alignment and
    same zero padding at the ends, so the output equals resample_poly's to rounding.
    """
    if up != 1 or down == 1:
        return np.asarray(resample_poly(x, up, down, axis=1))
    taps = _decimation_taps(down)
    n_out = -(-x.shape[1] // down)
    # The filter (20*down+1 taps) is centred on input sample down*k for output k:
    # out[k] = sum_s taps[s] * x[down*k + s - 10*down], zero outside the signal.
    # With s = down*q + r that is one correlation per residue r over x[:, r::down]; residue 0
    # holds only the centre tap.
    out: np.ndarray = x[:, ::down] * taps[10 * down]
    phase = np.zeros((x.shape[0], n_out))
    for r in range(1, down):
        weights = taps[r::down]
        part = x[:, r::down]
        phase[:, : part.shape[1]] = part
        phase[:, part.shape[1] :] = 0.0
        # correlate1d's window for output k starts at k - size//2 - origin; ours at k - 10.
        out += correlate1d(phase, weights, axis=1, mode="constant", origin=10 - weights.size // 2)
    return out


@functools.cache
def _decimation_taps(down: int) -> np.ndarray:
    # The filter resample_poly designs for (1, down): keep the two in step.
    return np.asarray(firwin(20 * down + 1, 1.0 / down, window=("kaiser", 5.0)))


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
        scale = _UNIT_TO_UV.get(header.dimensions[i].lower())
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


# --------------------------------------------------------------------------- EDF writing


def _fmt(value: float, width: int = 8) -> str:
    """A number in at most ``width`` characters, as precise as fits."""
    for decimals in range(6, -1, -1):
        text = f"{value:.{decimals}f}"
        if decimals and "." in text:
            text = text.rstrip("0").rstrip(".")
        if len(text) <= width:
            return text
    raise ValueError(f"{value} does not fit in {width} characters")


def _physical_range(lo: float, hi: float) -> tuple[str, str]:
    """Header strings for a physical range that covers [lo, hi] (never empty)."""
    if not np.isfinite(lo) or not np.isfinite(hi) or hi - lo < 1.0:
        mid = 0.0 if not np.isfinite(lo + hi) else (lo + hi) / 2
        lo, hi = mid - 1.0, mid + 1.0
    lo_s, hi_s = _fmt(lo), _fmt(hi)
    if float(lo_s) != lo or float(hi_s) != hi:
        lo_s, hi_s = _fmt(np.floor(lo * 10) / 10), _fmt(np.ceil(hi * 10) / 10)
    # Formatting may round inwards when precision is dropped; widen until it covers the range.
    while float(lo_s) > lo:
        lo_s = _fmt(float(lo_s) - max(1.0, abs(float(lo_s)) * 1e-4))
    while float(hi_s) < hi:
        hi_s = _fmt(float(hi_s) + max(1.0, abs(float(hi_s)) * 1e-4))
    return lo_s, hi_s


class EdfStreamWriter:
    """Write a 256 Hz EDF+C file record by record, hashing what it writes.

    The number of one-second records must be known up front (the header carries it), so the
    file is written once, front to back, and :attr:`checksum` is the SHA-256 of the final
    bytes without reading them again. Samples are µV, ``(n_channels, n)`` per :meth:`write`;
    values outside ``[physical_min, physical_max]`` are clipped and counted in
    :attr:`n_clipped`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        labels: Sequence[str],
        physical_min: Sequence[float] | np.ndarray,
        physical_max: Sequence[float] | np.ndarray,
        n_records: int,
        sfreq_hz: int = TARGET_SFREQ_HZ,
        start: dt.datetime | None = None,
    ) -> None:
        self.path = Path(path)
        self.n_channels = len(labels)
        self.sfreq_hz = int(sfreq_hz)
        self.n_records = int(n_records)
        self.n_clipped = 0
        self._records_written = 0
        self._pending = np.empty((self.n_channels, 0))
        self._hash = hashlib.sha256()
        ranges = [_physical_range(a, b) for a, b in zip(physical_min, physical_max, strict=True)]
        self._pmin = np.array([float(a) for a, _ in ranges])[:, None]
        self._pmax = np.array([float(b) for _, b in ranges])[:, None]
        # Scale from the header strings themselves, so readers decode exactly what we encode.
        self._gain = (self._pmax - self._pmin) / 65535.0
        self._inv_gain = 1.0 / self._gain
        self._digital_offset = -self._pmin * self._inv_gain - 32768.0
        self._io = ThreadPoolExecutor(max_workers=1)
        self._pending_io: Future[None] | None = None
        start = start or dt.datetime(2000, 1, 1)
        header = self._header(labels, ranges, start)
        self._fh: BinaryIO = self.path.open("wb")
        self._emit(header)

    def _header(
        self, labels: Sequence[str], ranges: list[tuple[str, str]], start: dt.datetime
    ) -> bytes:
        ns = self.n_channels + 1
        month = start.strftime("%b").upper()

        def pad(text: str, width: int) -> str:
            if len(text) > width:
                raise ValueError(f"EDF header field {text!r} longer than {width}")
            return text.ljust(width)

        out = [
            pad("0", 8),
            pad("X X X X", 80),
            pad(f"Startdate {start.day:02d}-{month}-{start.year} X X szbench", 80),
            start.strftime("%d.%m.%y"),
            start.strftime("%H.%M.%S"),
            pad(str(256 * (ns + 1)), 8),
            pad("EDF+C", 44),
            pad(str(self.n_records), 8),
            pad(str(_DATA_RECORD_S), 8),
            pad(str(ns), 4),
        ]
        all_labels = [*labels, "EDF Annotations"]
        out += [pad(x, 16) for x in all_labels]
        out += [pad("AgAgCl electrode" if i < self.n_channels else "", 80) for i in range(ns)]
        out += [pad("uV", 8)] * self.n_channels + [pad("", 8)]
        out += [pad(a, 8) for a, _ in ranges] + [pad("-1", 8)]
        out += [pad(b, 8) for _, b in ranges] + [pad("1", 8)]
        out += [pad("-32768", 8)] * ns
        out += [pad("32767", 8)] * ns
        out += [pad("", 80)] * ns
        out += [pad(str(self.sfreq_hz * _DATA_RECORD_S), 8)] * self.n_channels
        out += [pad(str(_ANNOTATION_BYTES // 2), 8)]
        out += [pad("", 32)] * ns
        header = "".join(out).encode("ascii")
        assert len(header) == 256 * (ns + 1)
        return header

    def _emit(self, data: bytes) -> None:
        # Hashing and writing run on a helper thread (both release the GIL) while the caller
        # prepares the next chunk; one block in flight at most keeps memory bounded.
        if self._pending_io is not None:
            self._pending_io.result()
        self._pending_io = self._io.submit(self._emit_now, data)

    def _emit_now(self, data: bytes) -> None:
        self._hash.update(data)
        self._fh.write(data)

    def _finish_io(self) -> None:
        try:
            if self._pending_io is not None:
                self._pending_io.result()
                self._pending_io = None
        finally:
            self._io.shutdown(wait=True)
            if not self._fh.closed:
                self._fh.close()

    def write(self, samples_uv: np.ndarray) -> None:
        """Append samples (µV, one row per channel); whole records are written as they fill."""
        if samples_uv.shape[0] != self.n_channels:
            raise ValueError(f"expected {self.n_channels} channels, got {samples_uv.shape[0]}")
        if self._pending.shape[1]:
            samples_uv = np.concatenate([self._pending, samples_uv], axis=1)
        per_record = self.sfreq_hz * _DATA_RECORD_S
        n_rec = min(samples_uv.shape[1] // per_record, self.n_records - self._records_written)
        self._pending = samples_uv[:, n_rec * per_record :]
        if n_rec <= 0:
            return
        # digital = (x - pmin) / gain - 32768, as one multiply and one add.
        digital = samples_uv[:, : n_rec * per_record] * self._inv_gain
        digital += self._digital_offset
        np.rint(digital, out=digital)
        if digital.min() < -32768 or digital.max() > 32767:
            self.n_clipped += int(np.count_nonzero((digital < -32768) | (digital > 32767)))
            np.clip(digital, -32768, 32767, out=digital)
        records = np.empty((n_rec, self.n_channels * per_record * 2 + _ANNOTATION_BYTES), np.uint8)
        # Rounded and within range: one casting copy puts the samples in record order.
        samples = records[:, :-_ANNOTATION_BYTES].view("<i2")
        np.copyto(
            samples.reshape(n_rec, self.n_channels, per_record),
            digital.reshape(self.n_channels, n_rec, per_record).transpose(1, 0, 2),
            casting="unsafe",
        )
        # EDF+ time keeping: each record's annotation signal opens with "+<onset>\x14\x14\x00".
        first = self._records_written
        tals = b"".join(
            f"+{(first + k) * _DATA_RECORD_S}\x14\x14".encode().ljust(_ANNOTATION_BYTES, b"\x00")
            for k in range(n_rec)
        )
        records[:, -_ANNOTATION_BYTES:] = np.frombuffer(tals, np.uint8).reshape(n_rec, -1)
        self._records_written += n_rec
        self._emit(records.tobytes())

    def close(self) -> str:
        """Finish the file; returns its checksum (``sha256:<hex>``)."""
        self._finish_io()
        if self._records_written != self.n_records:
            raise EEGError(
                self.path,
                f"wrote {self._records_written} records but the header announces {self.n_records}",
            )
        return self.checksum

    @property
    def checksum(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def __enter__(self) -> EdfStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish_io()


# --------------------------------------------------------------------------- standardisation


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


@dataclass(frozen=True)
class _Group:
    """Picked channels that share one sampling rate, and how to read a span of them."""

    rows: list[int]  # positions among the picked channels
    sfreq_hz: float
    n_samples: int
    read: Callable[[int, int], np.ndarray]  # (start, stop) -> µV, shape (len(rows), stop - start)


class _EdfSamples:
    """Chunked reads of EDF/BDF data records with numpy.

    MNE's EDF reader parses every EDF+ annotation of the file when it opens it, so its memory
    grows with the recording's length; reading the fixed-size data records directly keeps
    memory at one chunk and is also faster. Only the signals asked for are converted.
    """

    def __init__(self, path: Path, header: EdfHeader) -> None:
        self.path = path
        self.header = header
        self.bdf = header.bytes_per_sample == 3
        self.record_len = sum(header.samples_per_record)
        self.offsets = np.concatenate([[0], np.cumsum(header.samples_per_record)])

    def _records(self, first: int, count: int, cols: np.ndarray | slice) -> np.ndarray:
        """Records ``[first, first + count)``, columns ``cols``, as integers (no copy for EDF)."""
        width = self.header.bytes_per_sample
        with self.path.open("rb") as fh:
            fh.seek(self.header.header_bytes + first * self.record_len * width)
            raw = np.fromfile(fh, dtype=np.uint8, count=count * self.record_len * width)
        if raw.size != count * self.record_len * width:
            raise EEGError(self.path, f"truncated file: data record {first + count - 1} is cut")
        if not self.bdf:
            return raw.view("<i2").reshape(count, self.record_len)[:, cols]
        b = raw.reshape(count, self.record_len, 3)[:, cols].astype(np.int32)
        value = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
        return (value ^ 0x800000) - 0x800000  # 24-bit two's complement

    def group(self, rows: list[int], signals: list[int]) -> _Group:
        h = self.header
        spr = h.samples_per_record[signals[0]]
        cols = np.concatenate([self.offsets[i] + np.arange(spr) for i in signals])
        dmin = np.array([h.digital_min[i] for i in signals])[:, None]
        gain = np.array(
            [
                (h.physical_max[i] - h.physical_min[i])
                / (h.digital_max[i] - h.digital_min[i])
                * _UNIT_TO_UV.get(h.dimensions[i].lower(), 1.0)
                for i in signals
            ]
        )[:, None]
        pmin = np.array(
            [h.physical_min[i] * _UNIT_TO_UV.get(h.dimensions[i].lower(), 1.0) for i in signals]
        )[:, None]
        offset = pmin - dmin * gain

        # Signals stored side by side (the usual case) are one slice of each record.
        contiguous = bool(np.array_equal(cols, np.arange(cols[0], cols[0] + cols.size)))
        select: np.ndarray | slice = slice(cols[0], cols[0] + cols.size) if contiguous else cols

        def read(start: int, stop: int) -> np.ndarray:
            first, last = start // spr, -(-stop // spr)
            n = last - first
            block = self._records(first, n, select)  # (records, channels * spr), integers
            # One pass converts to float and puts each channel's samples in a row.
            whole = np.empty((len(signals), n * spr))
            whole.reshape(len(signals), n, spr)[...] = block.reshape(
                n, len(signals), spr
            ).transpose(1, 0, 2)
            data = whole[:, start - first * spr : stop - first * spr]
            data *= gain  # physical = (digital - dmin) * gain + pmin, in two passes
            data += offset
            return data

        return _Group(rows, spr / h.record_duration_s, spr * h.n_records, read)


def _groups(src: Path, picks: list[str]) -> tuple[list[_Group], Any]:
    """How to read the picked channels: per sampling rate, and MNE's raw for other formats."""
    if src.suffix.lower() in (".edf", ".bdf"):
        header = read_edf_header(src)
        reader = _EdfSamples(src, header)
        signals = [header.labels.index(label) for label in picks]
        by_rate: dict[int, list[int]] = {}
        for row, i in enumerate(signals):
            by_rate.setdefault(header.samples_per_record[i], []).append(row)
        groups = [
            reader.group(rows, [signals[r] for r in rows]) for _, rows in sorted(by_rate.items())
        ]
        return groups, None
    raw = _open_raw(src)

    def read(start: int, stop: int) -> np.ndarray:
        data: np.ndarray = raw.get_data(picks=list(picks), start=start, stop=stop)
        data *= 1e6
        return data

    return [_Group(list(range(len(picks))), float(raw.info["sfreq"]), int(raw.n_times), read)], raw


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
        groups, raw = _groups(src, picks)
        ratios = [_resample_ratio(g.sfreq_hz) for g in groups]
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

        start = _meas_date(raw) if raw is not None else _edf_start(src)
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
                        res = _resample(group.read(s0, s1), up, down)
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
        duration_s=float(n_records * _DATA_RECORD_S),
        source_sfreq_hz=info.sfreq_hz,
        source_checksum=source_checksum,
        checksum=checksum,
        start=start,
        flags=tuple(flags),
    )


def _scan_bounds(groups: list[_Group], n_rows: int) -> tuple[np.ndarray, np.ndarray]:
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


def _edf_start(path: Path) -> dt.datetime:
    """Start date and time from an EDF/BDF header (2000-01-01 when it does not parse)."""
    with path.open("rb") as fh:
        fixed = fh.read(256)
    try:
        day, month, year = (int(x) for x in fixed[168:176].decode("ascii").split("."))
        hour, minute, second = (int(x) for x in fixed[176:184].decode("ascii").split("."))
        # EDF's two-digit years: 85-99 are 1985-1999, 00-84 are 2000-2084.
        return dt.datetime(year + (1900 if year >= 85 else 2000), month, day, hour, minute, second)
    except (UnicodeDecodeError, ValueError):
        return dt.datetime(2000, 1, 1)


def _meas_date(raw: Any) -> dt.datetime:
    meas = raw.info.get("meas_date")
    if meas is None:
        return dt.datetime(2000, 1, 1)
    start = meas.replace(tzinfo=None, microsecond=0)
    # EDF's two-digit years cover 1985-2084.
    return start if 1985 <= start.year <= 2084 else dt.datetime(2000, 1, 1)


def read_standardised(path: str | os.PathLike[str]) -> tuple[np.ndarray, float, list[str]]:
    """Read a whole (short) EDF with MNE: ``(data_µV, sfreq_hz, labels)``. For tests and tools."""
    raw = _open_raw(Path(path))
    return raw.get_data() * 1e6, float(raw.info["sfreq"]), list(raw.ch_names)
