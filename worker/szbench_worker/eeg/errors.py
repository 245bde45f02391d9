"""The errors of EEG reading and standardisation: each names the file and what is wrong."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


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
