"""Aggregation of per-recording counts: per subject, per dataset, and the report formats."""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from szbench_scoring.annotations import AnnotationError
from szbench_scoring.scoring import Counts, Metrics, RecordingScore, ScoringParams

__all__ = [
    "DatasetReport",
    "RecordingResult",
    "SubjectResult",
    "aggregate",
]

_METRICS = ("sensitivity", "precision", "f1", "fp_rate")
_SZCORE_NAMES = {"sensitivity": "sensitivity", "precision": "precision", "f1": "f1"}
_SZCORE_NAMES["fp_rate"] = "fpRate"


@dataclass(frozen=True)
class RecordingResult:
    """The outcome of one recording: its counts, or the error that kept it from a score.

    Parameters
    ----------
    subject : str
        Subject id (the ``sub-XX`` folder name).
    recording : str
        Recording id (the reference file's path relative to the reference folder).
    score : RecordingScore or None
        Counts; None when the recording could not be scored.
    error : AnnotationError or None
        Why it could not be scored.
    hypothesis_missing : bool
        True when there was no hypothesis file (scored as no detections).

    Examples
    --------
    >>> r = RecordingResult("sub-01", "sub-01/a.tsv", RecordingScore.zero())
    >>> r.ok
    True
    """

    subject: str
    recording: str
    score: RecordingScore | None
    error: AnnotationError | None = None
    hypothesis_missing: bool = False

    def __post_init__(self) -> None:
        if (self.score is None) == (self.error is None):
            raise ValueError("a RecordingResult has either a score or an error")

    @property
    def ok(self) -> bool:
        """Whether the recording was scored."""
        return self.score is not None


@dataclass(frozen=True)
class SubjectResult:
    """Summed counts of one subject and the ratios of the sums.

    Examples
    --------
    >>> s = SubjectResult("sub-01", RecordingScore.zero(), n_recordings=0)
    >>> math.isnan(s.event.sensitivity)
    True
    """

    subject: str
    counts: RecordingScore
    n_recordings: int
    n_missing: int = 0
    n_errors: int = 0

    @property
    def event(self) -> Metrics:
        """Event-scoring metrics of the subject."""
        return self.counts.event.metrics

    @property
    def sample(self) -> Metrics:
        """Sample-scoring metrics of the subject."""
        return self.counts.sample.metrics


def _nan_stats(values: list[float]) -> tuple[float, float]:
    """nan-mean and population nan-std, NaN (without a warning) when all are NaN."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0 or bool(np.isnan(arr).all()):
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(arr)), float(np.nanstd(arr))


def _json_value(x: float) -> float | None:
    return None if math.isnan(x) else x


@dataclass(frozen=True)
class DatasetReport:
    """Per-recording, per-subject and dataset-level SzCORE results.

    Dataset metrics follow the 2025 challenge: each metric is computed per subject from the
    subject's summed counts, then averaged over subjects with ``nanmean`` (``std``: population
    ``nanstd``). ``pooled_*`` gives the ratios of the counts summed over the whole dataset.
    Recordings that could not be scored are listed in ``errors`` and count in no metric;
    ``complete`` is False then.

    Examples
    --------
    >>> from szbench_scoring import score_events
    >>> rep = aggregate({("sub-01", "r1"): score_events([(10, 20)], [(12, 15)], 3600)})
    >>> rep.event_mean.f1, rep.to_szcore_json()["event_results"]["f1_std"]
    (1.0, 0.0)
    """

    recordings: tuple[RecordingResult, ...]
    subjects: tuple[SubjectResult, ...]
    event_mean: Metrics
    event_std: Metrics
    sample_mean: Metrics
    sample_std: Metrics
    pooled: RecordingScore
    params: ScoringParams = field(default_factory=ScoringParams)

    @property
    def pooled_event(self) -> Metrics:
        """Ratios of the event counts summed over every scored recording."""
        return self.pooled.event.metrics

    @property
    def pooled_sample(self) -> Metrics:
        """Ratios of the sample counts summed over every scored recording."""
        return self.pooled.sample.metrics

    @property
    def errors(self) -> tuple[RecordingResult, ...]:
        """Recordings that could not be scored."""
        return tuple(r for r in self.recordings if r.error is not None)

    @property
    def n_missing(self) -> int:
        """Recordings without a hypothesis file (scored as no detections)."""
        return sum(r.hypothesis_missing for r in self.recordings)

    @property
    def empty_subjects(self) -> tuple[str, ...]:
        """Subjects without any scored recording (all their metrics are NaN)."""
        return tuple(s.subject for s in self.subjects if s.n_recordings - s.n_errors == 0)

    @property
    def complete(self) -> bool:
        """True when every recording was scored."""
        return not self.errors

    def to_szcore_json(self, pooled: bool = False) -> dict[str, dict[str, float | None]]:
        """szcore-evaluation's output: ``{"sample_results": ..., "event_results": ...}``.

        Parameters
        ----------
        pooled : bool
            False (default): per-subject mean and ``*_std`` (szcore's ``avg_per_subject``);
            True: the ratios of the summed counts, without ``*_std``.

        Returns
        -------
        dict
            NaN becomes None (``null`` in JSON).
        """
        out: dict[str, dict[str, float | None]] = {}
        for key, mean, std, pooled_m in (
            ("sample_results", self.sample_mean, self.sample_std, self.pooled_sample),
            ("event_results", self.event_mean, self.event_std, self.pooled_event),
        ):
            block: dict[str, float | None] = {}
            for m in _METRICS:
                name = _SZCORE_NAMES[m]
                if pooled:
                    block[name] = _json_value(getattr(pooled_m, m))
                else:
                    block[name] = _json_value(getattr(mean, m))
            if not pooled:
                for m in _METRICS:
                    block[f"{_SZCORE_NAMES[m]}_std"] = _json_value(getattr(std, m))
            out[key] = block
        return out

    def write_json(self, path: str | os.PathLike[str], pooled: bool = False) -> None:
        """Write :meth:`to_szcore_json` to ``path`` (indent 2, as szcore-evaluation)."""
        Path(path).write_text(json.dumps(self.to_szcore_json(pooled), indent=2) + "\n")

    def write_recordings_csv(self, path: str | os.PathLike[str]) -> None:
        """One row per recording: counts and metrics of both scorings, or the error."""
        header = ["subject", "recording", "status", "hypothesis_missing"]
        for kind in ("event", "sample"):
            header += [f"{kind}_{c}" for c in ("tp", "fp", "fn", "ref_true", "num_samples")]
            header += [f"{kind}_{m}" for m in _METRICS]
        header.append("error")
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            for r in self.recordings:
                row: list[Any] = [r.subject, r.recording, "ok" if r.ok else "error"]
                row.append(int(r.hypothesis_missing))
                for kind in ("event", "sample"):
                    if r.score is None:
                        row += [""] * 9
                        continue
                    c: Counts = getattr(r.score, kind)
                    row += [c.tp, c.fp, c.fn, c.ref_true, c.num_samples]
                    row += [_csv_float(getattr(c.metrics, m)) for m in _METRICS]
                row.append("" if r.error is None else str(r.error))
                w.writerow(row)

    def write_subjects_csv(self, path: str | os.PathLike[str]) -> None:
        """One row per subject: summed counts and the ratios of the sums."""
        header = ["subject", "n_recordings", "n_missing", "n_errors"]
        for kind in ("event", "sample"):
            header += [f"{kind}_{c}" for c in ("tp", "fp", "fn", "ref_true", "num_samples")]
            header += [f"{kind}_{m}" for m in _METRICS]
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            for s in self.subjects:
                row: list[Any] = [s.subject, s.n_recordings, s.n_missing, s.n_errors]
                for kind in ("event", "sample"):
                    c: Counts = getattr(s.counts, kind)
                    row += [c.tp, c.fp, c.fn, c.ref_true, c.num_samples]
                    row += [_csv_float(getattr(c.metrics, m)) for m in _METRICS]
                w.writerow(row)


def _csv_float(x: float) -> str:
    return "" if math.isnan(x) else repr(x)


def aggregate(
    results: Iterable[RecordingResult] | Mapping[tuple[str, str], RecordingScore],
    *,
    subjects: Iterable[str] = (),
    params: ScoringParams | None = None,
) -> DatasetReport:
    """Turn per-recording results into a :class:`DatasetReport`.

    Parameters
    ----------
    results : iterable of RecordingResult, or mapping (subject, recording) -> RecordingScore
        Per-recording outcomes. Errors are kept and reported, never counted.
    subjects : iterable of str
        Subjects to include even without recordings (empty subjects: NaN metrics, so they
        do not move the nan-mean; the reference crashes on them).
    params : ScoringParams, optional
        Recorded in the report, and gives the rates of an empty report's counts.

    Returns
    -------
    DatasetReport
        Subjects sorted by id, recordings sorted by (subject, recording).

    Examples
    --------
    >>> from szbench_scoring import score_events
    >>> hit = score_events([(100, 200)], [(150, 160)], 3600)
    >>> miss = score_events([(100, 200)], [], 3600)
    >>> rep = aggregate({("sub-01", "a"): hit, ("sub-02", "b"): miss})
    >>> rep.event_mean.sensitivity, rep.event_std.sensitivity
    (0.5, 0.5)
    """
    p = params or ScoringParams()
    if isinstance(results, Mapping):
        items = [RecordingResult(s, r, score) for (s, r), score in results.items()]
    else:
        items = list(results)
    items.sort(key=lambda r: (r.subject, r.recording))
    names = sorted({*subjects, *(r.subject for r in items)})
    index = {s: i for i, s in enumerate(names)}
    n_subj = len(names)
    subj = np.array([index[r.subject] for r in items], dtype=np.int64)
    scored = np.array([r.score is not None for r in items], dtype=bool)
    missing = np.array([r.hypothesis_missing for r in items], dtype=bool)
    # Columns: event tp, fp, ref_true, num_samples, then the same for sample scoring.
    table = np.array(
        [
            (e.tp, e.fp, e.ref_true, e.num_samples, s.tp, s.fp, s.ref_true, s.num_samples)
            for r in items
            if r.score is not None
            for e, s in ((r.score.event, r.score.sample),)
        ],
        dtype=np.int64,
    ).reshape(-1, 8)
    sums = np.zeros((n_subj, 8), dtype=np.int64)
    np.add.at(sums, subj[scored], table)
    n_rec = np.bincount(subj, minlength=n_subj)
    n_missing = np.bincount(subj, weights=missing, minlength=n_subj).astype(np.int64)
    n_err = np.bincount(subj, weights=~scored, minlength=n_subj).astype(np.int64)

    def score_of(row: list[int]) -> RecordingScore:
        return RecordingScore(
            Counts(row[0], row[1], row[2], row[3], p.event_fs_hz),
            Counts(row[4], row[5], row[6], row[7], p.mask_fs_hz),
        )

    subject_results = tuple(
        SubjectResult(name, score_of(row), int(nr), int(nm), int(ne))
        for name, row, nr, nm, ne in zip(
            names, sums.tolist(), n_rec.tolist(), n_missing.tolist(), n_err.tolist(), strict=True
        )
    )
    pooled = score_of(sums.sum(axis=0).tolist())

    def across(kind: str) -> tuple[Metrics, Metrics]:
        per = [getattr(s, kind) for s in subject_results]
        means: dict[str, float] = {}
        stds: dict[str, float] = {}
        for m in _METRICS:
            means[m], stds[m] = _nan_stats([getattr(x, m) for x in per])
        return Metrics(**means), Metrics(**stds)

    event_mean, event_std = across("event")
    sample_mean, sample_std = across("sample")
    return DatasetReport(
        recordings=tuple(items),
        subjects=subject_results,
        event_mean=event_mean,
        event_std=event_std,
        sample_mean=sample_mean,
        sample_std=sample_std,
        pooled=pooled,
        params=p,
    )
