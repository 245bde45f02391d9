"""The SzCORE input montage, and how a source recording's channel labels map onto it.

The 19 electrodes of the 10-20 system in the order algorithms receive them, their EDF labels
(``<name>-Avg``) and rate; clinical labels (``EEG FP1-REF``, ``T7-LE``...) name the same
electrodes in other words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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

_CANONICAL_UPPER = {name.upper(): name for name in CHANNELS}


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
