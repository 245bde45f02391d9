"""Writing a standardised recording: an EDF+C file, record by record, hashed as it is written.

Our own writer, because neither MNE's nor edfio's exporters write records as they come (both
take the whole array), and hashing the bytes on their way out makes the checksum of a
standardised file cost no second read.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np

from szbench_worker.eeg.errors import EEGError
from szbench_worker.eeg.labels import TARGET_SFREQ_HZ

DATA_RECORD_S = 1
"""Duration of a written data record: one second, so any whole-second length fits."""

ANNOTATION_BYTES = 64
"""Room per record for the EDF+ time-keeping annotation."""


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
            pad(str(DATA_RECORD_S), 8),
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
        out += [pad(str(self.sfreq_hz * DATA_RECORD_S), 8)] * self.n_channels
        out += [pad(str(ANNOTATION_BYTES // 2), 8)]
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
        per_record = self.sfreq_hz * DATA_RECORD_S
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
        records = np.empty((n_rec, self.n_channels * per_record * 2 + ANNOTATION_BYTES), np.uint8)
        # Rounded and within range: one casting copy puts the samples in record order.
        samples = records[:, :-ANNOTATION_BYTES].view("<i2")
        np.copyto(
            samples.reshape(n_rec, self.n_channels, per_record),
            digital.reshape(self.n_channels, n_rec, per_record).transpose(1, 0, 2),
            casting="unsafe",
        )
        # EDF+ time keeping: each record's annotation signal opens with "+<onset>\x14\x14\x00".
        first = self._records_written
        tals = b"".join(
            f"+{(first + k) * DATA_RECORD_S}\x14\x14".encode().ljust(ANNOTATION_BYTES, b"\x00")
            for k in range(n_rec)
        )
        records[:, -ANNOTATION_BYTES:] = np.frombuffer(tals, np.uint8).reshape(n_rec, -1)
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
