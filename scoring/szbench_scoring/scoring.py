"""SzCORE sample and event scoring on sorted interval arrays.

The numbers are those of szcore-evaluation 0.0.7 over timescoring 0.0.7, which score per-sample
boolean masks. Here every step works on ``[start, end)`` interval arrays of integer sample
indices, for many recordings at once: each recording is placed at its own offset on one
global time axis so that one ``searchsorted`` serves them all. The cost grows with the number of
events, never with the length of the recordings.

The rules, with the reference's rounding (see ``docs/scoring.md``):

1. Each seizure row sets the 1 Hz mask ``[int(onset * fs), int((onset + duration) * fs))``
   of a mask of ``int(recordingDuration * fs)`` samples; events are the mask's runs.
2. Sample scoring counts mask samples: TP = ref & hyp, FP = hyp & ~ref, refTrue = ref.
3. Event scoring works on a 10 Hz grid of ``round(n / fs * 10)`` samples: events closer than
   90 s are merged (gap < 90, strict), then events longer than 300 s are cut into 300 s pieces
   and a remainder. A reference piece is a TP when the hypothesis mask overlaps
   ``[max(0, start - 30), min(duration, end + 60))``; a hypothesis piece is an FP when it
   overlaps no TP window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from szbench_scoring.annotations import AnnotationError, Annotations

__all__ = [
    "Counts",
    "Metrics",
    "RecordingScore",
    "ScoringParams",
    "score_events",
    "score_many",
    "score_recording",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_SECONDS_PER_DAY: Final = 86400
# timescoring compares the relative overlap with ``min_overlap + 1e-6``.
_OVERLAP_EPS: Final = 1e-6


@dataclass(frozen=True)
class ScoringParams:
    """Every parameter of SzCORE scoring; the defaults are SzCORE's.

    Parameters
    ----------
    mask_fs_hz : int
        Rate of the masks built from the TSV (and of sample scoring). SzCORE: 1 Hz.
    event_fs_hz : int
        Resolution of event scoring. SzCORE: 10 Hz.
    tolerance_start_s : float
        A detection up to this long before a seizure still counts. SzCORE: 30 s.
    tolerance_end_s : float
        A detection up to this long after a seizure still counts. SzCORE: 60 s.
    min_overlap : float
        Minimum relative overlap of a tolerance window for a TP. SzCORE: 0 (any overlap).
    max_event_duration_s : float
        Longer events are split into pieces of this length. SzCORE: 300 s.
    min_duration_between_events_s : float
        Events separated by less than this are merged. SzCORE: 90 s.

    Examples
    --------
    >>> ScoringParams().tolerance_end_s
    60.0
    >>> ScoringParams(event_fs_hz=0)
    Traceback (most recent call last):
    ...
    ValueError: event_fs_hz must be a positive integer, got 0
    """

    mask_fs_hz: int = 1
    event_fs_hz: int = 10
    tolerance_start_s: float = 30.0
    tolerance_end_s: float = 60.0
    min_overlap: float = 0.0
    max_event_duration_s: float = 300.0
    min_duration_between_events_s: float = 90.0

    def __post_init__(self) -> None:
        for name in ("mask_fs_hz", "event_fs_hz"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in (
            "tolerance_start_s",
            "tolerance_end_s",
            "min_duration_between_events_s",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.max_event_duration_s) and self.max_event_duration_s > 0):
            raise ValueError(f"max_event_duration_s must be > 0, got {self.max_event_duration_s!r}")
        if not (0 <= self.min_overlap < 1):
            raise ValueError(f"min_overlap must be in [0, 1), got {self.min_overlap!r}")


@dataclass(frozen=True)
class Metrics:
    """Sensitivity, precision, F1 and false positives per day (NaN where undefined).

    Examples
    --------
    >>> Metrics.from_counts(Counts(tp=1, fp=1, ref_true=2, num_samples=86400, fs_hz=1))
    Metrics(sensitivity=0.5, precision=0.5, f1=0.5, fp_rate=1.0)
    """

    sensitivity: float
    precision: float
    f1: float
    fp_rate: float

    @classmethod
    def from_counts(cls, c: Counts) -> Metrics:
        """The SzCORE ratios of summed counts (timescoring's formulas, operation order kept)."""
        sens = c.tp / c.ref_true if c.ref_true > 0 else math.nan
        prec = c.tp / (c.tp + c.fp) if c.tp + c.fp > 0 else math.nan
        if c.ref_true + c.fp == 0:
            f1 = math.nan
        else:
            f1 = 2 * c.tp / (2 * c.tp + c.fp + (c.ref_true - c.tp))
        # An empty set of recordings has no duration: the rate is undefined, not infinite.
        if c.num_samples > 0 and c.fs_hz > 0:
            fp_rate = c.fp / (c.num_samples / c.fs_hz / 3600 / 24)
        else:
            fp_rate = math.nan
        return cls(float(sens), float(prec), float(f1), float(fp_rate))

    def as_dict(self) -> dict[str, float]:
        """The metrics under szcore-evaluation's names."""
        return {
            "sensitivity": self.sensitivity,
            "precision": self.precision,
            "f1": self.f1,
            "fpRate": self.fp_rate,
        }


@dataclass(frozen=True)
class Counts:
    """Counts of one scoring (sample or event) of one or more recordings.

    Parameters
    ----------
    tp : int
        True positives (samples, or reference events detected).
    fp : int
        False positives (samples, or hypothesis events matching no detected seizure).
    ref_true : int
        Reference positives (samples, or reference events after merge and split).
    num_samples : int
        Length of the recordings in samples at ``fs_hz``.
    fs_hz : int
        Rate at which this scoring counted samples (1 for sample, 10 for event scoring).

    Examples
    --------
    >>> c = Counts(tp=3, fp=1, ref_true=4, num_samples=36000, fs_hz=10)
    >>> c.fn, round(c.metrics.f1, 4)
    (1, 0.75)
    >>> (c + c).tp
    6
    """

    tp: int
    fp: int
    ref_true: int
    num_samples: int
    fs_hz: int

    @property
    def fn(self) -> int:
        """False negatives: ``ref_true - tp``."""
        return self.ref_true - self.tp

    @property
    def duration_s(self) -> float:
        """Recorded time covered by these counts, in seconds."""
        return self.num_samples / self.fs_hz if self.fs_hz else 0.0

    @property
    def metrics(self) -> Metrics:
        """Sensitivity, precision, F1 and FP/day of these counts."""
        return Metrics.from_counts(self)

    def __add__(self, other: Counts) -> Counts:
        if self.num_samples and other.num_samples and self.fs_hz != other.fs_hz:
            raise ValueError(f"cannot add counts at {self.fs_hz} Hz and {other.fs_hz} Hz")
        return Counts(
            self.tp + other.tp,
            self.fp + other.fp,
            self.ref_true + other.ref_true,
            self.num_samples + other.num_samples,
            self.fs_hz if self.num_samples else other.fs_hz,
        )

    @classmethod
    def zero(cls, fs_hz: int) -> Counts:
        """Counts of no recording at all."""
        return cls(0, 0, 0, 0, fs_hz)


@dataclass(frozen=True)
class RecordingScore:
    """Event and sample counts of one recording.

    Examples
    --------
    >>> ref = Annotations.from_events([(100, 160)], 3600)
    >>> score_recording(ref, ref).event
    Counts(tp=1, fp=0, ref_true=1, num_samples=36000, fs_hz=10)
    """

    event: Counts
    sample: Counts

    def __add__(self, other: RecordingScore) -> RecordingScore:
        return RecordingScore(self.event + other.event, self.sample + other.sample)

    @classmethod
    def zero(cls, params: ScoringParams | None = None) -> RecordingScore:
        """The score of no recording."""
        p = params or ScoringParams()
        return cls(Counts.zero(p.event_fs_hz), Counts.zero(p.mask_fs_hz))


# --------------------------------------------------------------------------------------------
# Interval helpers (all on int64 sample indices of one global axis)
# --------------------------------------------------------------------------------------------


def _exclusive_cumsum(x: IntArray) -> IntArray:
    out = np.zeros(x.shape[0], dtype=np.int64)
    if x.shape[0] > 1:
        np.cumsum(x[:-1], out=out[1:])
    return out


def _union(starts: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
    """Union of intervals: sorted, disjoint, non-touching runs (empty ones dropped)."""
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    n = starts.shape[0]
    if n < 2:
        return starts, ends
    if bool((starts[1:] < starts[:-1]).any()):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    if new.all():
        return starts, ends
    first = np.flatnonzero(new)
    last = np.r_[first[1:], n] - 1
    return starts[first], reach[last]


def _coverage(starts: IntArray, ends: IntArray, x: IntArray) -> IntArray:
    """Covered length of ``(-inf, x)`` by sorted disjoint intervals, for each ``x``."""
    cum = np.zeros(starts.shape[0] + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=cum[1:])
    k = np.searchsorted(starts, x, side="left")
    cov = cum[k]
    inside = k > 0
    if inside.any():
        tail = ends[k[inside] - 1] - x[inside]
        cov[inside] -= np.maximum(tail, 0)
    return cov


def _per_recording(
    rec: IntArray, n_rec: int, weights: IntArray | BoolArray | None = None
) -> IntArray:
    if weights is None:
        return np.bincount(rec, minlength=n_rec).astype(np.int64)
    return np.rint(np.bincount(rec, weights=weights, minlength=n_rec)).astype(np.int64)


@dataclass
class _Side:
    """Seizure runs of one side (reference or hypothesis) of a batch, on the 1 Hz axis."""

    start: IntArray  # global mask-sample index
    end: IntArray
    rec: IntArray


def _runs(
    onset: FloatArray, end: FloatArray, rec: IntArray, n_mask: IntArray, off: IntArray, fs: int
) -> _Side:
    """The mask runs ``[int(onset*fs), int(end*fs))`` of many recordings."""
    # int() of a non-negative float is its floor; slicing clips the end to the mask length.
    a = np.floor(onset * fs)
    b = np.minimum(np.floor(end * fs), n_mask[rec].astype(np.float64))
    keep = b > a
    a_i = a[keep].astype(np.int64) + off[rec[keep]]
    b_i = b[keep].astype(np.int64) + off[rec[keep]]
    s, e = _union(a_i, b_i)
    r = np.searchsorted(off, s, side="right") - 1
    return _Side(s, e, r.astype(np.int64))


def _score_arrays(
    ref: _Side,
    hyp: _Side,
    n_mask: IntArray,
    off_m: IntArray,
    p: ScoringParams,
) -> tuple[IntArray, ...]:
    """Sample and event counts per recording from the runs of both sides."""
    n_rec = n_mask.shape[0]

    # Sample scoring on the mask grid.
    ref_true_s = _per_recording(ref.rec, n_rec, ref.end - ref.start)
    hyp_len = hyp.end - hyp.start
    inter = _coverage(ref.start, ref.end, hyp.end) - _coverage(ref.start, ref.end, hyp.start)
    tp_s = _per_recording(hyp.rec, n_rec, inter)
    fp_s = _per_recording(hyp.rec, n_rec, hyp_len) - tp_s

    # Event scoring on the event grid; times in seconds within each recording, as timescoring.
    fs_m, fs_e = p.mask_fs_hz, p.event_fs_hz
    n_event = np.rint(n_mask / fs_m * fs_e).astype(np.int64)
    dur_e = n_event / fs_e
    off_e = _exclusive_cumsum(n_event + 1)

    def seconds(side: _Side) -> tuple[FloatArray, FloatArray]:
        local_off = off_m[side.rec]
        return (side.start - local_off) / fs_m, (side.end - local_off) / fs_m

    def merge(
        s: FloatArray, e: FloatArray, rec: IntArray
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        n = s.shape[0]
        if n < 2:
            return s, e, rec
        new = np.empty(n, dtype=bool)
        new[0] = True
        new[1:] = (rec[1:] != rec[:-1]) | (s[1:] - e[:-1] >= p.min_duration_between_events_s)
        first = np.flatnonzero(new)
        last = np.r_[first[1:], n] - 1
        return s[first], e[last], rec[first]

    def split(
        s: FloatArray, e: FloatArray, rec: IntArray
    ) -> tuple[FloatArray, FloatArray, IntArray]:
        m = p.max_event_duration_s
        pieces = np.maximum(np.ceil((e - s) / m), 1).astype(np.int64)
        if bool((pieces == 1).all()):
            return s, e, rec
        idx = np.repeat(np.arange(s.shape[0]), pieces)
        k = np.arange(idx.shape[0]) - np.repeat(_exclusive_cumsum(pieces), pieces)
        ps = s[idx] + k * m
        last = k == pieces[idx] - 1
        pe = np.where(last, e[idx], ps + m)
        return ps, pe, rec[idx]

    def index(x: FloatArray, rec: IntArray) -> IntArray:
        return np.rint(x * fs_e).astype(np.int64) + off_e[rec]

    ref_s, ref_e = seconds(ref)
    ref_ms, ref_me, ref_mr = merge(ref_s, ref_e, ref.rec)
    ref_ps, ref_pe, ref_pr = split(ref_ms, ref_me, ref_mr)

    hyp_s, hyp_e = seconds(hyp)
    hyp_ms, hyp_me, hyp_mr = merge(hyp_s, hyp_e, hyp.rec)
    hyp_ps, hyp_pe, hyp_pr = split(hyp_ms, hyp_me, hyp_mr)

    # The hypothesis mask on the event grid: the merged events (splitting keeps the union).
    h_start = index(hyp_ms, hyp_mr)
    h_end = np.minimum(index(hyp_me, hyp_mr), off_e[hyp_mr] + n_event[hyp_mr])
    h_start, h_end = _union(h_start, h_end)

    # Tolerance windows around each reference piece, clipped to the recording.
    w_s = np.maximum(0.0, ref_ps - p.tolerance_start_s)
    w_e = np.minimum(dur_e[ref_pr], ref_pe + p.tolerance_end_s)
    wi_s, wi_e = index(w_s, ref_pr), index(w_e, ref_pr)
    overlap = _coverage(h_start, h_end, wi_e) - _coverage(h_start, h_end, wi_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = (overlap / fs_e) / (w_e - w_s)
    is_tp = relative > p.min_overlap + _OVERLAP_EPS
    ref_true_e = _per_recording(ref_pr, n_rec)
    tp_e = _per_recording(ref_pr, n_rec, is_tp)

    # A hypothesis piece is an FP when it overlaps no TP window. TP windows are sorted by start
    # and by end (pieces are sorted and the window bounds are monotone), so the first window
    # ending after the piece's start is the only candidate.
    t_s, t_e = wi_s[is_tp], wi_e[is_tp]
    nonempty = t_e > t_s
    t_s, t_e = t_s[nonempty], t_e[nonempty]
    p_s, p_e = index(hyp_ps, hyp_pr), index(hyp_pe, hyp_pr)
    if t_s.shape[0]:
        k = np.searchsorted(t_e, p_s, side="right")
        kc = np.minimum(k, t_s.shape[0] - 1)
        hit = (k < t_s.shape[0]) & (t_s[kc] < p_e) & (p_e > p_s)
    else:
        hit = np.zeros(p_s.shape[0], dtype=bool)
    fp_e = _per_recording(hyp_pr, n_rec, ~hit)
    return tp_s, fp_s, ref_true_s, tp_e, fp_e, ref_true_e, n_event


def mask_length(recording_duration_s: float, fs_hz: int) -> int:
    """Number of mask samples of a recording: ``int(recordingDuration * fs)``.

    Examples
    --------
    >>> mask_length(3599.99, 1)
    3599
    """
    return int(recording_duration_s * fs_hz)


def score_many(
    pairs: Sequence[tuple[Annotations, Annotations | None]],
    params: ScoringParams | None = None,
) -> list[RecordingScore | AnnotationError]:
    """Score many recordings at once (one vectorised pass over all their events).

    Parameters
    ----------
    pairs : sequence of (Annotations, Annotations or None)
        Reference and hypothesis of each recording; ``None`` means no detections.
    params : ScoringParams, optional
        SzCORE defaults when omitted.

    Returns
    -------
    list of RecordingScore or AnnotationError
        In the order of ``pairs``. A hypothesis whose mask length (``int(recordingDuration)``)
        differs from the reference's, or a reference shorter than one mask sample, gives an
        ``AnnotationError`` for that recording; the others are scored as usual.

    Examples
    --------
    >>> ref = Annotations.from_events([(100, 160)], 3600)
    >>> hyp = Annotations.from_events([(2000, 2010)], 3600)
    >>> [s.event.fp for s in score_many([(ref, hyp), (ref, None)])]
    [1, 0]
    """
    p = params or ScoringParams()
    fs = p.mask_fs_hz
    n = len(pairs)
    results: list[RecordingScore | AnnotationError | None] = [None] * n
    n_mask_all = np.zeros(n, dtype=np.int64)
    valid = np.ones(n, dtype=bool)
    for i, (ref, hyp) in enumerate(pairs):
        n_ref = mask_length(ref.recording_duration_s, fs)
        n_mask_all[i] = n_ref
        if n_ref <= 0:
            results[i] = AnnotationError(
                ref.source or "<reference>",
                None,
                f"recordingDuration {ref.recording_duration_s} s is shorter than one mask "
                f"sample at {fs} Hz",
            )
            valid[i] = False
        elif hyp is not None and mask_length(hyp.recording_duration_s, fs) != n_ref:
            results[i] = AnnotationError(
                hyp.source or "<hypothesis>",
                None,
                f"recordingDuration {hyp.recording_duration_s} s does not match the "
                f"reference's {ref.recording_duration_s} s "
                f"({mask_length(hyp.recording_duration_s, fs)} vs {n_ref} samples at {fs} Hz)",
            )
            valid[i] = False
    ok = np.flatnonzero(valid)

    def side(which: int) -> tuple[FloatArray, IntArray]:
        arrays = []
        counts = []
        for i in ok.tolist():
            ann = pairs[i][which]
            arrays.append(ann.events if ann is not None else _NO_EVENTS)
            counts.append(0 if ann is None else ann.events.shape[0])
        ev = np.concatenate(arrays) if arrays else _NO_EVENTS
        return ev, np.repeat(np.arange(ok.shape[0]), counts)

    scores = score_batch(*side(0), *side(1), n_mask_all[ok], p)
    for i, score in zip(ok.tolist(), scores, strict=True):
        results[i] = score
    return [r for r in results if r is not None]


_NO_EVENTS: Final = np.empty((0, 2))


def score_batch(
    ref_events: FloatArray,
    ref_rec: IntArray,
    hyp_events: FloatArray,
    hyp_rec: IntArray,
    n_mask: IntArray,
    p: ScoringParams,
) -> list[RecordingScore]:
    """Score many recordings in one vectorised pass (what :func:`score_many` and datasets share).

    Parameters
    ----------
    ref_events, hyp_events : ndarray of float64, shape (m, 2)
        Normalised ``[onset_s, end_s)`` events of all recordings, grouped by recording.
    ref_rec, hyp_rec : ndarray of int64, shape (m,)
        The recording (``0..len(n_mask)-1``) of each event, non-decreasing.
    n_mask : ndarray of int64
        Length of each recording's mask in samples at ``p.mask_fs_hz``.
    p : ScoringParams
        The scoring parameters.

    Returns
    -------
    list of RecordingScore
        One per recording, in order.

    Examples
    --------
    >>> ev = np.array([[10.0, 20.0]])
    >>> rec = np.array([0])
    >>> s = score_batch(ev, rec, ev, rec, np.array([60]), ScoringParams())
    >>> s[0].event.tp, s[0].sample.tp
    (1, 10)
    """
    off_m = _exclusive_cumsum(n_mask + 1)
    fs = p.mask_fs_hz
    ref = _runs(ref_events[:, 0], ref_events[:, 1], ref_rec, n_mask, off_m, fs)
    hyp = _runs(hyp_events[:, 0], hyp_events[:, 1], hyp_rec, n_mask, off_m, fs)
    counts = _score_arrays(ref, hyp, n_mask, off_m, p)
    tp_s, fp_s, rt_s, tp_e, fp_e, rt_e, n_ev = (c.tolist() for c in counts)
    fs_e = p.event_fs_hz
    return [
        RecordingScore(Counts(a, b, c, d, fs_e), Counts(e, f, g, h, fs))
        for a, b, c, d, e, f, g, h in zip(
            tp_e, fp_e, rt_e, n_ev, tp_s, fp_s, rt_s, n_mask.tolist(), strict=True
        )
    ]


def score_recording(
    ref: Annotations, hyp: Annotations | None, params: ScoringParams | None = None
) -> RecordingScore:
    """Score one recording's hypothesis against its reference.

    Parameters
    ----------
    ref : Annotations
        Reference (ground truth) annotations.
    hyp : Annotations or None
        Hypothesis annotations; ``None`` means no detections (a missing file).
    params : ScoringParams, optional
        SzCORE defaults when omitted.

    Returns
    -------
    RecordingScore

    Raises
    ------
    AnnotationError
        When the hypothesis's recordingDuration gives another mask length than the
        reference's, or the reference is shorter than one mask sample.

    Examples
    --------
    >>> ref = Annotations.from_events([(100, 160)], 3600)
    >>> hyp = Annotations.from_events([(75, 80), (1000, 1010)], 3600)
    >>> s = score_recording(ref, hyp)
    >>> (s.event.tp, s.event.fp, s.event.fn), (s.sample.tp, s.sample.fp)
    ((1, 1, 0), (0, 15))
    """
    result = score_many([(ref, hyp)], params)[0]
    if isinstance(result, AnnotationError):
        raise result
    return result


def score_events(
    ref_events: object,
    hyp_events: object,
    recording_duration_s: float,
    params: ScoringParams | None = None,
) -> RecordingScore:
    """Score in-memory ``(onset_s, end_s)`` events of one recording.

    Parameters
    ----------
    ref_events, hyp_events : array_like, shape (n, 2)
        ``[onset_s, end_s)`` pairs, any order, overlaps allowed.
    recording_duration_s : float
        Duration of the recording (both sides).
    params : ScoringParams, optional
        SzCORE defaults when omitted.

    Returns
    -------
    RecordingScore

    Examples
    --------
    >>> s = score_events([(0, 10)], [(9.5, 20)], 600)
    >>> s.event.tp, s.sample.tp, s.sample.fp
    (1, 1, 10)
    """
    ref = Annotations.from_events(ref_events, recording_duration_s, source="<reference>")
    hyp = Annotations.from_events(hyp_events, recording_duration_s, source="<hypothesis>")
    return score_recording(ref, hyp, params)
