"""Reading EDF/BDF samples with numpy, a chunk at a time.

Why not through MNE: ``mne.io.read_raw_edf`` parses every EDF+ annotation of the file when it
opens it (its memory grows with the recording: measured +7 MB for 25 extra minutes), and
chunked ``get_data`` calls cost more than reading the fixed-size data records directly. The
tests check this reader against MNE's and pyedflib's on the same files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from szbench_worker.eeg.edf_header import ANNOTATION_LABELS, EdfHeader
from szbench_worker.eeg.errors import EEGError


@dataclass(frozen=True)
class SampleGroup:
    """Picked channels that share one sampling rate, and how to read a span of them."""

    rows: list[int]  # positions among the picked channels
    sfreq_hz: float
    n_samples: int
    read: Callable[[int, int], np.ndarray]  # (start, stop) -> µV, shape (len(rows), stop - start)


def check_continuity(path: Path, header: EdfHeader) -> bool:
    """For EDF+D: True if the records are contiguous, else an EEGError naming the first gap."""
    ann = [i for i, x in enumerate(header.labels) if x in ANNOTATION_LABELS]
    if not ann:
        raise EEGError(path, "EDF+D file without an annotation signal: cannot place its records")
    idx = ann[0]
    width = header.bytes_per_sample
    record_bytes = header.record_bytes
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


class EdfSamples:
    """Chunked reads of EDF/BDF data records with numpy.

    Keeps memory at one chunk, whatever the recording's length. Only the signals asked for are
    converted to µV.
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

    def group(self, rows: list[int], signals: list[int]) -> SampleGroup:
        """How to read ``signals`` (header indices, one sampling rate) as picked rows ``rows``."""
        h = self.header
        spr = h.samples_per_record[signals[0]]
        cols = np.concatenate([self.offsets[i] + np.arange(spr) for i in signals])
        # A unit we do not know is taken as µV.
        scale = [h.uv_scale(i) or 1.0 for i in signals]
        dmin = np.array([h.digital_min[i] for i in signals])[:, None]
        gain = np.array(
            [
                (h.physical_max[i] - h.physical_min[i]) / (h.digital_max[i] - h.digital_min[i]) * s
                for i, s in zip(signals, scale, strict=True)
            ]
        )[:, None]
        pmin = np.array([h.physical_min[i] * s for i, s in zip(signals, scale, strict=True)])[
            :, None
        ]
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

        return SampleGroup(rows, spr / h.record_duration_s, spr * h.n_records, read)
