"""The algorithm contract's side of a run (``docs/algorithm-contract.md``, the SzCORE
challenge's): where the recording and the output appear inside the container, the output's
file name, and the recording's duration that the output must declare."""

from __future__ import annotations

from pathlib import Path

from szbench_worker.eeg.edf_header import read_edf_header

#: Where the recording and the output appear inside the container (the SzCORE contract).
CONTAINER_DATA_DIR = "/data"
CONTAINER_OUTPUT_DIR = "/output"


def output_name_for(recording: Path) -> str:
    """The ``$OUTPUT`` file name for a recording: BIDS ``..._eeg.edf`` -> ``..._events.tsv``.

    >>> output_name_for(Path("sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"))
    'sub-01_ses-01_task-szMonitoring_run-00_events.tsv'
    >>> output_name_for(Path("rec.edf"))
    'rec.tsv'
    """
    stem = recording.stem
    if stem.endswith("_eeg"):
        stem = stem[: -len("_eeg")] + "_events"
    return stem + ".tsv"


def edf_duration_s(path: Path) -> float:
    """Duration of an EDF/EDF+/BDF file from its header (records x record duration).

    Read with the project's one header reader (standard library only, so the runner does not
    need MNE or numpy), with the same checks as dataset import.

    Raises
    ------
    EEGError
        A ValueError naming the file and the field, when the header is not a valid EDF/BDF
        header or the file is shorter than the header announces.
    """
    return read_edf_header(path).duration_s
