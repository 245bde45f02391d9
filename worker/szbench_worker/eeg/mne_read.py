"""Formats read through MNE: BrainVision (``.vhdr``) and EEGLAB (``.set``) recordings.

The one module of the project that imports MNE (import-linter checks it). EDF and BDF samples
are read by :mod:`szbench_worker.eeg.edf_read` instead; MNE is imported inside the functions so
that importing this module stays cheap.
"""

from __future__ import annotations

import datetime as dt
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from szbench_worker.eeg.edf_read import SampleGroup
from szbench_worker.eeg.errors import EEGError

# EDF's two-digit years cover 1985-2084; a start outside them is written as this date.
_UNKNOWN_START = dt.datetime(2000, 1, 1)


def open_raw(path: Path) -> Any:
    """MNE's raw object for ``path`` (not preloaded); an :class:`EEGError` if MNE cannot."""
    import mne

    mne.set_log_level("ERROR")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            suffix = path.suffix.lower()
            if suffix in (".edf", ".bdf"):
                reader = mne.io.read_raw_edf if suffix == ".edf" else mne.io.read_raw_bdf
                return reader(path, preload=False)
            return mne.io.read_raw(path, preload=False)
        except Exception as exc:
            raise EEGError(path, f"cannot read: {type(exc).__name__}: {exc}") from exc


def raw_samples(raw: Any, picks: list[str]) -> SampleGroup:
    """How to read the picked channels of an MNE raw object (one rate), in µV."""

    def read(start: int, stop: int) -> np.ndarray:
        data: np.ndarray = raw.get_data(picks=list(picks), start=start, stop=stop)
        data *= 1e6
        return data

    return SampleGroup(list(range(len(picks))), float(raw.info["sfreq"]), int(raw.n_times), read)


def raw_start(raw: Any) -> dt.datetime:
    """The recording's start as an EDF header can hold it (naive, whole seconds)."""
    meas = raw.info.get("meas_date")
    if meas is None:
        return _UNKNOWN_START
    start: dt.datetime = meas.replace(tzinfo=None, microsecond=0)
    return start if 1985 <= start.year <= 2084 else _UNKNOWN_START
