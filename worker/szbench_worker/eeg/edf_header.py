"""The one EDF/EDF+/BDF header reader of the project.

Standard library only (no numpy, no MNE), so that the runners, which only need a recording's
duration, read headers exactly as standardisation does. Every check names the file and, for
a field that does not parse, the field and its text.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from dataclasses import dataclass
from pathlib import Path

from szbench_worker.eeg.errors import EEGError

#: Labels of the EDF+/BDF+ annotation signal (time keeping and events, not EEG).
ANNOTATION_LABELS = ("EDF Annotations", "BDF Annotations")

#: Physical dimensions we can convert to µV (case-insensitive).
UNIT_TO_UV = {"uv": 1.0, "µv": 1.0, "μv": 1.0, "mv": 1e3, "v": 1e6, "nv": 1e-3}

_FIXED_BYTES = 256
_SIGNAL_BYTES = 256  # per signal, the ten signal fields together
# The signal fields, in the order the header stores them, each as wide as this for every signal.
_SIGNAL_FIELDS = (
    ("label", 16),
    ("transducer type", 80),
    ("physical dimension", 8),
    ("physical minimum", 8),
    ("physical maximum", 8),
    ("digital minimum", 8),
    ("digital maximum", 8),
    ("prefiltering", 80),
    ("samples per data record", 8),
    ("reserved", 32),
)
# The start given to a recording whose header start does not parse (EDF+ allows anonymised
# dates; a wrong start changes nothing an algorithm is scored on).
_UNKNOWN_START = dt.datetime(2000, 1, 1)


@dataclass(frozen=True)
class EdfHeader:
    """The parts of an EDF/BDF header that the runners and standardisation need."""

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
    start: dt.datetime = _UNKNOWN_START

    @property
    def duration_s(self) -> float:
        """Length of the recording: data records times their duration."""
        return self.n_records * self.record_duration_s

    @property
    def record_bytes(self) -> int:
        """Bytes of one data record (every signal's samples of it)."""
        return sum(self.samples_per_record) * self.bytes_per_sample

    def uv_scale(self, signal: int) -> float | None:
        """Factor from the signal's physical unit to µV, or None for a unit we do not know."""
        return UNIT_TO_UV.get(self.dimensions[signal].lower())


def _number(path: Path, name: str, where: str, raw: bytes, kind: type[int] | type[float]) -> float:
    """A numeric header field; an error names the field, where it is and its text."""
    text = raw.decode("latin-1")
    try:
        value = kind(text.strip())
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise EEGError(
            path, f"wrong header: field '{name}' ({where}) is {text.strip()!r}, not {noun}"
        ) from None
    if not math.isfinite(value):
        raise EEGError(path, f"wrong header: field '{name}' ({where}) is {text.strip()!r}")
    return value


def _start(date: bytes, time: bytes) -> dt.datetime:
    """Start date and time of the fixed header (a fixed date when they do not parse)."""
    try:
        day, month, year = (int(x) for x in date.decode("ascii").split("."))
        hour, minute, second = (int(x) for x in time.decode("ascii").split("."))
        # EDF's two-digit years: 85-99 are 1985-1999, 00-84 are 2000-2084.
        return dt.datetime(year + (1900 if year >= 85 else 2000), month, day, hour, minute, second)
    except (UnicodeDecodeError, ValueError):
        return _UNKNOWN_START


def read_edf_header(path: str | os.PathLike[str]) -> EdfHeader:
    """Parse and check an EDF/EDF+/BDF header; an :class:`EEGError` says what is wrong.

    Checks the fixed fields, that the file holds as many data records as the header announces
    (a truncated file is an error here, where MNE would warn and read less) and that every
    signal has a positive number of samples per record and a non-empty range. A record count
    of -1 (a writer that never finished) is replaced by the number of whole records present.
    """
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as fh:
        fixed = fh.read(_FIXED_BYTES)
        if len(fixed) < _FIXED_BYTES:
            raise EEGError(
                path, f"not an EDF file: {len(fixed)} bytes, an EDF/BDF header needs 256"
            )

        def fixed_number(name: str, start: int, stop: int, kind: type[int] | type[float]) -> float:
            return _number(path, name, f"bytes {start}-{stop - 1}", fixed[start:stop], kind)

        header_bytes = int(fixed_number("number of bytes in header record", 184, 192, int))
        n_records = int(fixed_number("number of data records", 236, 244, int))
        record_duration_s = fixed_number("duration of a data record", 244, 252, float)
        n_signals = int(fixed_number("number of signals", 252, 256, int))
        if n_signals <= 0 or header_bytes != _FIXED_BYTES + _SIGNAL_BYTES * n_signals:
            raise EEGError(
                path,
                f"wrong header: {n_signals} signals but header size {header_bytes} bytes "
                f"(expected {_FIXED_BYTES + _SIGNAL_BYTES * n_signals})",
            )
        if record_duration_s <= 0:
            raise EEGError(path, f"wrong header: data record duration {record_duration_s} s")
        block = fh.read(_SIGNAL_BYTES * n_signals)
        if len(block) < _SIGNAL_BYTES * n_signals:
            raise EEGError(
                path,
                f"truncated header: the fields of {n_signals} signals need "
                f"{_SIGNAL_BYTES * n_signals} bytes, the file holds {len(block)}",
            )

    raw: dict[str, list[bytes]] = {}
    offset = 0
    for name, width in _SIGNAL_FIELDS:
        start = offset * n_signals
        raw[name] = [block[start + i * width : start + (i + 1) * width] for i in range(n_signals)]
        offset += width
    labels = [x.decode("latin-1").strip() for x in raw["label"]]

    def column(name: str, kind: type[int] | type[float]) -> list[float]:
        return [
            _number(path, name, f"signal {i + 1}, {labels[i]!r}", x, kind)
            for i, x in enumerate(raw[name])
        ]

    pmin = column("physical minimum", float)
    pmax = column("physical maximum", float)
    dmin = column("digital minimum", float)
    dmax = column("digital maximum", float)
    nsamp = [int(x) for x in column("samples per data record", int)]
    empty = [i for i, n in enumerate(nsamp) if n <= 0]
    if empty:
        raise EEGError(
            path,
            f"wrong header: signal {empty[0] + 1}, {labels[empty[0]]!r}, has "
            f"{nsamp[empty[0]]} samples per data record",
        )
    flat = [labels[i] for i in range(n_signals) if dmax[i] <= dmin[i] or pmax[i] == pmin[i]]
    if flat:
        raise EEGError(path, f"wrong header: empty digital or physical range for {flat[0]!r}")
    width = 3 if fixed[:1] == b"\xff" else 2
    available = (size - header_bytes) // (sum(nsamp) * width)
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
        dimensions=tuple(x.decode("latin-1").strip() for x in raw["physical dimension"]),
        physical_min=tuple(pmin),
        physical_max=tuple(pmax),
        digital_min=tuple(dmin),
        digital_max=tuple(dmax),
        samples_per_record=tuple(nsamp),
        reserved=fixed[192:236].decode("latin-1").strip(),
        header_bytes=header_bytes,
        bytes_per_sample=width,
        start=_start(fixed[168:176], fixed[176:184]),
    )
