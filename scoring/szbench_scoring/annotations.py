"""SzCORE annotation files (TSV): the model, the rules, reading and writing.

An SzCORE annotation file is a tab-separated table with the header
``onset duration eventType confidence channels dateTime recordingDuration``. Each row is an
event; ``eventType`` is ``bckg`` or one of the SzCORE seizure types. This module holds what
the annotations are (:class:`Annotations`, normalised by :func:`normalise_events`), what they
may contain (the event types, the columns, :class:`AnnotationError`) and the public readers
and writers. The readers hand the bytes to the vectorised batch parser in
:mod:`szbench_scoring._batch_parse`, which applies these rules to many files at once.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BACKGROUND",
    "COLUMNS",
    "EVENT_TYPES",
    "REQUIRED_COLUMNS",
    "SEIZURE_TYPES",
    "AnnotationError",
    "Annotations",
    "format_annotations",
    "normalise_events",
    "parse_annotations",
    "parse_many",
    "read_annotations",
    "read_many",
    "write_annotations",
]

BACKGROUND: Final = "bckg"

#: The seizure levels of the SzCORE ``events.json`` (HED-SCORE / ILAE 2017 names), as shipped
#: with epilepsy2bids 0.0.7. Names are case-sensitive.
SEIZURE_TYPES: Final[tuple[str, ...]] = (
    "sz",
    "sz_foc",
    "sz_foc_a",
    "sz_foc_a_m",
    "sz_foc_a_m_automatisms",
    "sz_foc_a_m_atonic",
    "sz_foc_a_m_clonic",
    "sz_foc_a_m_spasms",
    "sz_foc_a_m_hyperkinetic",
    "sz_foc_a_m_myoclonic",
    "sz_foc_a_m_tonic",
    "sz_foc_a_nm",
    "sz_foc_a_nm_autonomic",
    "sz_foc_a_nm_behavior",
    "sz_foc_a_nm_cognitive",
    "sz_foc_a_nm_emotional",
    "sz_foc_a_nm_sensory",
    "sz_foc_a_um",
    "sz_foc_ia",
    "sz_foc_ia_m",
    "sz_foc_ia_m_automatisms",
    "sz_foc_ia_m_atonic",
    "sz_foc_ia_m_clonic",
    "sz_foc_ia_m_spasms",
    "sz_foc_ia_m_hyperkinetic",
    "sz_foc_ia_m_myoclonic",
    "sz_foc_ia_m_tonic",
    "sz_foc_ia_nm",
    "sz_foc_ia_nm_autonomic",
    "sz_foc_ia_nm_behavior",
    "sz_foc_ia_nm_cognitive",
    "sz_foc_ia_nm_emotional",
    "sz_foc_ia_nm_sensory",
    "sz_foc_ia_um",
    "sz_foc_ua_m",
    "sz_foc_ua_m_automatisms",
    "sz_foc_ua_m_atonic",
    "sz_foc_ua_m_clonic",
    "sz_foc_ua_m_spasms",
    "sz_foc_ua_m_hyperkinetic",
    "sz_foc_ua_m_myoclonic",
    "sz_foc_ua_m_tonic",
    "sz_foc_ua_nm",
    "sz_foc_ua_nm_autonomic",
    "sz_foc_ua_nm_behavior",
    "sz_foc_ua_nm_cognitive",
    "sz_foc_ua_nm_emotional",
    "sz_foc_ua_nm_sensory",
    "sz_foc_ua_um",
    "sz_foc_f2b",
    "sz_gen",
    "sz_gen_m",
    "sz_gen_m_tonicClonic",
    "sz_gen_m_clonic",
    "sz_gen_m_tonic",
    "sz_gen_m_myoTC",
    "sz_gen_m_myoAtonic",
    "sz_gen_m_atonic",
    "sz_gen_m_spasms",
    "sz_gen_nm",
    "sz_gen_nm_typical",
    "sz_gen_nm_atypical",
    "sz_gen_nm_myoclonic",
    "sz_gen_nm_eyelidMyio",
    "sz_uo",
    "sz_uo_m",
    "sz_uo_m_tonicClonic",
    "sz_uo_m_spasms",
    "sz_uo_nm",
    "sz_uo_nm_behavior",
)

#: Every accepted ``eventType``: the seizure types, then ``bckg``.
EVENT_TYPES: Final[tuple[str, ...]] = (*SEIZURE_TYPES, BACKGROUND)

#: The SzCORE column order, used when writing.
COLUMNS: Final[tuple[str, ...]] = (
    "onset",
    "duration",
    "eventType",
    "confidence",
    "channels",
    "dateTime",
    "recordingDuration",
)

#: The columns scoring needs; the others may be absent (the reference ignores them too).
REQUIRED_COLUMNS: Final[tuple[str, ...]] = ("onset", "duration", "eventType", "recordingDuration")

# Codes 0..len(SEIZURE_TYPES)-1 are seizures; the background code is the last one.
_TYPE_BYTES: Final = np.array([t.encode() for t in EVENT_TYPES])
_TYPE_ORDER: Final = np.argsort(_TYPE_BYTES)
_TYPE_SORTED: Final = _TYPE_BYTES[_TYPE_ORDER]
BCKG_CODE: Final = len(SEIZURE_TYPES)
"""Code of ``bckg`` (rows that are not events)."""
SZ_CODE: Final = 0
"""Code of ``sz``, also the type of a merge of events of different types."""
_TYPE_NAMES: Final = np.array(EVENT_TYPES)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class AnnotationError(ValueError):
    """An annotation file (or in-memory annotation) that cannot be scored.

    Parameters
    ----------
    path : str
        The file (or the ``source`` label of in-memory text).
    row : int or None
        1-based line number in the file (the header is line 1), or None when the problem is
        not tied to one row.
    reason : str
        What is wrong, in words a submitter can act on.

    Examples
    --------
    >>> err = AnnotationError("hyp/sub-01/run.tsv", 3, "negative duration -2.0")
    >>> str(err)
    'hyp/sub-01/run.tsv:3: negative duration -2.0'
    >>> str(AnnotationError("x.tsv", None, "no rows after the header"))
    'x.tsv: no rows after the header'
    """

    def __init__(self, path: str, row: int | None, reason: str) -> None:
        self.path = str(path)
        self.row = row
        self.reason = reason
        where = self.path if row is None else f"{self.path}:{row}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self) -> tuple[type[AnnotationError], tuple[str, int | None, str]]:
        # Keeps the three attributes when the error crosses a process boundary (Celery).
        return (type(self), (self.path, self.row, self.reason))


@dataclass(frozen=True, eq=False)
class Annotations:
    """The seizure events of one recording, normalised.

    Parameters
    ----------
    events : ndarray of float64, shape (n, 2)
        ``[onset_s, end_s)`` of each seizure event, sorted by onset, with overlapping or
        touching events merged (``end[i] < onset[i + 1]``). ``bckg`` rows are not events.
    event_types : ndarray of str, shape (n,)
        The SzCORE type of each event; a merge of events of different types is ``sz``.
    recording_duration_s : float
        The file's ``recordingDuration``.
    source : str or None
        Where the annotations came from (a path), for error messages.

    Examples
    --------
    >>> ann = parse_annotations(
    ...     "onset\\tduration\\teventType\\trecordingDuration\\n"
    ...     "50\\t10\\tsz_foc_a\\t600\\n"
    ...     "10\\t5\\tsz\\t600\\n"
    ... )
    >>> ann.events.tolist()
    [[10.0, 15.0], [50.0, 60.0]]
    >>> ann.event_types.tolist(), ann.recording_duration_s
    (['sz', 'sz_foc_a'], 600.0)
    """

    events: FloatArray
    event_types: NDArray[np.str_]
    recording_duration_s: float
    source: str | None = field(default=None)

    @property
    def n_events(self) -> int:
        """Number of (normalised) seizure events."""
        return int(self.events.shape[0])

    @classmethod
    def from_events(
        cls,
        events: object,
        recording_duration_s: float,
        *,
        event_types: Sequence[str] | None = None,
        source: str | None = None,
    ) -> Annotations:
        """Build normalised annotations from ``(onset_s, end_s)`` pairs.

        Parameters
        ----------
        events : array_like, shape (n, 2)
            ``[onset_s, end_s)`` pairs in any order; overlaps are merged.
        recording_duration_s : float
            Duration of the recording in seconds (> 0).
        event_types : sequence of str, optional
            One SzCORE seizure type per event (default ``sz``).
        source : str, optional
            Label used in error messages.

        Raises
        ------
        AnnotationError
            On a negative or non-finite time, an end before its onset, an onset after the
            recording end, an unknown type or a non-positive duration.

        Examples
        --------
        >>> a = Annotations.from_events([(30, 40), (0, 5), (35, 50)], 3600)
        >>> a.events.tolist()
        [[0.0, 5.0], [30.0, 50.0]]
        """
        label = source if source is not None else "<events>"
        arr = np.asarray(events, dtype=np.float64)
        if arr.size == 0:
            arr = arr.reshape(0, 2)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise AnnotationError(label, None, f"events must have shape (n, 2), got {arr.shape}")
        duration = float(recording_duration_s)
        if not math.isfinite(duration) or duration <= 0:
            raise AnnotationError(label, None, f"recordingDuration must be > 0, got {duration}")
        if event_types is None:
            codes = np.full(arr.shape[0], SZ_CODE, dtype=np.int64)
        else:
            if len(event_types) != arr.shape[0]:
                raise AnnotationError(label, None, "event_types must have one entry per event")
            codes = type_codes(np.array([t.encode() for t in event_types], dtype="S"))
            bad = np.flatnonzero((codes < 0) | (codes == BCKG_CODE))
            if bad.size:
                raise AnnotationError(
                    label, None, f"unknown seizure type {event_types[int(bad[0])]!r}"
                )
        bad_time = ~np.isfinite(arr).all(axis=1) | (arr[:, 0] < 0) | (arr[:, 1] < arr[:, 0])
        if bad_time.any():
            i = int(np.flatnonzero(bad_time)[0])
            raise AnnotationError(
                label, None, f"event {i} {arr[i].tolist()} is not a valid [onset, end) interval"
            )
        late = np.flatnonzero(arr[:, 0] > duration)
        if late.size:
            raise AnnotationError(
                label,
                None,
                f"event {int(late[0])} starts at {arr[late[0], 0]} s, "
                f"after the end of the recording ({duration} s)",
            )
        merged, merged_codes, _ = normalise_events(arr[:, 0], arr[:, 1], codes)
        return cls(_frozen(merged), _frozen(_TYPE_NAMES[merged_codes]), duration, source)


_A = TypeVar("_A", bound=np.generic)


def _frozen(a: NDArray[_A]) -> NDArray[_A]:
    a.flags.writeable = False
    return a


def normalise_events(
    onsets: FloatArray, ends: FloatArray, codes: IntArray | None = None
) -> tuple[FloatArray, IntArray, IntArray]:
    """Sort events by onset and merge those that overlap or touch.

    Merging is exact: the merged end is the largest end, so the 1 Hz mask that SzCORE builds
    from the events is unchanged (flooring is monotone).

    Parameters
    ----------
    onsets, ends : ndarray of float64
        Event bounds (``ends >= onsets``).
    codes : ndarray of int64, optional
        Event type codes; a merged event keeps a common code, else gets ``sz``.

    Returns
    -------
    events : ndarray, shape (m, 2)
        Sorted, merged ``[onset, end)`` pairs.
    codes : ndarray, shape (m,)
        Type code of each merged event.
    group : ndarray, shape (n,)
        Index of the merged event that each input (in sorted order) belongs to.

    Examples
    --------
    >>> ev, _, _ = normalise_events(np.array([5.0, 0.0, 2.0]), np.array([6.0, 2.0, 3.0]))
    >>> ev.tolist()
    [[0.0, 3.0], [5.0, 6.0]]
    """
    n = onsets.shape[0]
    if codes is None:
        codes = np.zeros(n, dtype=np.int64)
    if n == 0:
        return np.empty((0, 2)), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if n > 1 and bool((onsets[1:] < onsets[:-1]).any()):
        order = np.argsort(onsets, kind="stable")
        onsets, ends, codes = onsets[order], ends[order], codes[order]
    if n > 1 and bool((ends[:-1] >= onsets[1:]).any()):
        run_end = np.maximum.accumulate(ends)
        starts_group = np.ones(n, dtype=bool)
        starts_group[1:] = onsets[1:] > run_end[:-1]
        first = np.flatnonzero(starts_group)
        group = np.cumsum(starts_group) - 1
        last = np.r_[first[1:], n] - 1
        merged = np.column_stack([onsets[first], run_end[last]])
        lo = np.minimum.reduceat(codes, first)
        hi = np.maximum.reduceat(codes, first)
        merged_codes = np.where(lo == hi, lo, SZ_CODE)
        return merged, merged_codes.astype(np.int64), group.astype(np.int64)
    return np.column_stack([onsets, ends]), codes.astype(np.int64), np.arange(n, dtype=np.int64)


def type_codes(values: NDArray[np.bytes_]) -> IntArray:
    """Code of each event type (its index in ``EVENT_TYPES``), -1 when unknown.

    Parameters
    ----------
    values : ndarray of bytes
        Event types as byte strings.

    Returns
    -------
    ndarray of int64

    Examples
    --------
    >>> codes = type_codes(np.array([b"sz", b"bckg", b"sz_gen", b"seizure"]))
    >>> [EVENT_TYPES[c] if c >= 0 else None for c in codes.tolist()]
    ['sz', 'bckg', 'sz_gen', None]
    """
    codes = np.full(values.shape[0], -1, dtype=np.int64)
    is_sz = values == b"sz"
    codes[is_sz] = SZ_CODE
    is_bckg = values == b"bckg"
    codes[is_bckg] = BCKG_CODE
    rest = np.flatnonzero(~(is_sz | is_bckg))
    if rest.size:
        pos = np.searchsorted(_TYPE_SORTED, values[rest])
        pos_c = np.minimum(pos, _TYPE_SORTED.shape[0] - 1)
        hit = _TYPE_SORTED[pos_c] == values[rest]
        codes[rest[hit]] = _TYPE_ORDER[pos_c[hit]]
    return codes


def parse_many(texts: Sequence[tuple[bytes, str]]) -> list[Annotations | AnnotationError]:
    """Parse the texts of many annotation files in one vectorised pass; errors are returned.

    Parameters
    ----------
    texts : sequence of (bytes, str)
        Each file's bytes and its label for error messages (a path).

    Returns
    -------
    list of Annotations or AnnotationError
        One entry per text, in order; an error in one file never affects another.

    Examples
    --------
    >>> good = b"onset\\tduration\\teventType\\trecordingDuration\\n5\\t2\\tsz\\t60\\n"
    >>> [type(r).__name__ for r in parse_many([(good, "a.tsv"), (b"onset\\n", "b.tsv")])]
    ['Annotations', 'AnnotationError']
    """
    # Imported here: the batch parser applies the rules defined in this module, so a
    # module-level import would be circular.
    from szbench_scoring._batch_parse import parse_batch

    parsed = parse_batch(texts)
    parsed.events.flags.writeable = False
    names = _TYPE_NAMES[parsed.codes]
    names.flags.writeable = False
    ev_bounds = parsed.bounds.tolist()
    durations = parsed.durations.tolist()
    out: list[Annotations | AnnotationError] = []
    for i, err in enumerate(parsed.errors):
        if err is not None:
            out.append(err)
            continue
        lo, hi = ev_bounds[i], ev_bounds[i + 1]
        out.append(Annotations(parsed.events[lo:hi], names[lo:hi], durations[i], parsed.sources[i]))
    return out


def parse_annotations(text: str | bytes, source: str = "<text>") -> Annotations:
    """Parse the text of one SzCORE annotation TSV.

    Parameters
    ----------
    text : str or bytes
        The whole file. Columns may come in any order; ``onset``, ``duration``,
        ``eventType`` and ``recordingDuration`` are required, others are ignored.
    source : str
        Label for error messages (a path).

    Returns
    -------
    Annotations
        Seizure events sorted and merged; ``bckg`` rows dropped.

    Raises
    ------
    AnnotationError
        For a missing column, an unknown event type, a non-numeric or non-finite onset,
        duration or recordingDuration, a negative onset or duration, a non-positive
        recordingDuration, rows disagreeing on recordingDuration, an event starting after the
        end of the recording, a row with the wrong number of fields, or a file without rows.

    Examples
    --------
    >>> text = (
    ...     "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    ...     "0.00\\t3600.00\\tbckg\\tn/a\\tn/a\\t2024-01-01 00:00:00\\t3600.00\\n"
    ... )
    >>> parse_annotations(text).n_events
    0
    >>> parse_annotations(text.replace("bckg", "seizure"), "x.tsv")
    Traceback (most recent call last):
    ...
    szbench_scoring.annotations.AnnotationError: x.tsv:2: unknown eventType 'seizure' ...
    """
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    result = parse_many([(data, source)])[0]
    # Asked the other way round, so that a second copy of this module (pytest's importlib mode
    # on this file alone) still raises the parser's errors, whose class is the first copy's.
    if not isinstance(result, Annotations):
        raise result
    return result


def read_annotations(path: str | os.PathLike[str]) -> Annotations:
    """Read one SzCORE annotation TSV file.

    Parameters
    ----------
    path : str or path-like
        The ``*_events.tsv`` file.

    Returns
    -------
    Annotations

    Raises
    ------
    AnnotationError
        See :func:`parse_annotations`; ``.path`` is the file's path.
    FileNotFoundError
        When the file does not exist.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a_events.tsv"
    >>> write_annotations(p, [(12.5, 40.0)], 3600.0)
    >>> read_annotations(p).events.tolist()
    [[12.5, 40.0]]
    """
    p = Path(path)
    return parse_annotations(p.read_bytes(), str(p))


def read_many(paths: Sequence[str | os.PathLike[str]]) -> list[Annotations | AnnotationError]:
    """Read many annotation files in one vectorised pass; errors are returned, not raised.

    Parameters
    ----------
    paths : sequence of path-like
        Files to read.

    Returns
    -------
    list of Annotations or AnnotationError
        One entry per path, in order.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_annotations(d / "a.tsv", [], 60.0)
    >>> _ = (d / "b.tsv").write_text("onset\\tduration\\n")
    >>> [type(r).__name__ for r in read_many([d / "a.tsv", d / "b.tsv"])]
    ['Annotations', 'AnnotationError']
    """
    items: list[tuple[bytes, str]] = []
    for p in paths:
        with open(p, "rb") as fh:
            items.append((fh.read(), os.fspath(p)))
    return parse_many(items)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _fmt(x: float, decimals: int | None) -> str:
    return repr(float(x)) if decimals is None else f"{x:.{decimals}f}"


def format_annotations(
    events: object,
    recording_duration_s: float,
    *,
    event_types: Sequence[str] | str = "sz",
    confidence: Sequence[float] | None = None,
    date_time: str | None = None,
    decimals: int | None = None,
) -> str:
    """Format events as the text of an SzCORE annotation TSV.

    Parameters
    ----------
    events : array_like, shape (n, 2)
        ``[onset_s, end_s)`` pairs. With no events, one ``bckg`` row spans the recording.
    recording_duration_s : float
        Duration of the recording in seconds.
    event_types : str or sequence of str
        One SzCORE seizure type for all events, or one per event.
    confidence : sequence of float, optional
        One value per event in [0, 1]; ``n/a`` when omitted.
    date_time : str, optional
        Start of the recording, ``%Y-%m-%d %H:%M:%S``; ``n/a`` when omitted.
    decimals : int, optional
        Fixed decimals for times (the challenge files use 2); by default the shortest text
        that reads back as the same float.

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_annotations([], 60.0, decimals=2), end="")
    onset	duration	eventType	confidence	channels	dateTime	recordingDuration
    0.00	60.00	bckg	n/a	n/a	n/a	60.00
    """
    arr = np.asarray(events, dtype=np.float64).reshape(-1, 2)
    n = arr.shape[0]
    types = [event_types] * n if isinstance(event_types, str) else list(event_types)
    if len(types) != n:
        raise ValueError("event_types must have one entry per event")
    unknown = [t for t in types if t not in SEIZURE_TYPES]
    if unknown:
        raise ValueError(f"unknown seizure type {unknown[0]!r}")
    if confidence is not None and len(confidence) != n:
        raise ValueError("confidence must have one entry per event")
    dt = date_time if date_time is not None else "n/a"
    dur = _fmt(recording_duration_s, decimals)
    lines = ["\t".join(COLUMNS)]
    if n == 0:
        lines.append("\t".join([_fmt(0.0, decimals), dur, BACKGROUND, "n/a", "n/a", dt, dur]))
    for i in range(n):
        conf = "n/a" if confidence is None else f"{float(confidence[i]):.2f}"
        onset, end = float(arr[i, 0]), float(arr[i, 1])
        lines.append(
            "\t".join(
                [
                    _fmt(onset, decimals),
                    _fmt(end - onset, decimals),
                    types[i],
                    conf,
                    "n/a",
                    dt,
                    dur,
                ]
            )
        )
    return "\n".join(lines) + "\n"


def write_annotations(
    path: str | os.PathLike[str],
    events: object,
    recording_duration_s: float,
    *,
    event_types: Sequence[str] | str = "sz",
    confidence: Sequence[float] | None = None,
    date_time: str | None = None,
    decimals: int | None = None,
) -> None:
    """Write events as an SzCORE annotation TSV (see :func:`format_annotations`).

    Parameters
    ----------
    path : path-like
        Destination; parent folders are created.
    events, recording_duration_s, event_types, confidence, date_time, decimals
        As for :func:`format_annotations`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "sub-01" / "r_events.tsv"
    >>> write_annotations(p, [(10, 20)], 600, event_types="sz_gen")
    >>> p.read_text().splitlines()[1]
    '10.0\\t10.0\\tsz_gen\\tn/a\\tn/a\\tn/a\\t600.0'
    """
    text = format_annotations(
        events,
        recording_duration_s,
        event_types=event_types,
        confidence=confidence,
        date_time=date_time,
        decimals=decimals,
    )
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
