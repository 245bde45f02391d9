"""Uncertainty of SzCORE results: bootstrap intervals over subjects and rank stability.

The dataset figures are means over subjects (see :mod:`szbench_scoring.report`), so the
subjects are the unit of resampling: a bootstrap draws subjects with replacement and recomputes
the nan-mean. Everything is seeded, vectorised and pure (arrays in, frozen dataclasses out).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from szbench_scoring.report import SubjectResult

# Every deployment publishes 95% intervals from the same seed, so the same results give the
# same intervals wherever they are computed (a board quoted in a paper can be re-derived).
CONFIDENCE_LEVEL = 0.95
SEED = 0

__all__ = [
    "METRICS",
    "ConfidenceInterval",
    "PairedComparison",
    "RankStability",
    "align_subjects",
    "bootstrap_ci",
    "bootstrap_metrics",
    "bootstrap_ranks",
    "paired_comparison",
    "paired_permutation_test",
    "per_subject_ranks",
    "smallest_p_value",
    "subject_values",
]

#: Metrics with an interval, under the attribute names of :class:`~szbench_scoring.Metrics`.
METRICS = ("f1", "sensitivity", "precision", "fp_rate")

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ConfidenceInterval:
    """A percentile bootstrap interval of a per-subject nan-mean.

    ``estimate`` is the nan-mean of the observed subjects; ``low``/``high`` the interval
    bounds (NaN when no resample had a finite value).
    """

    estimate: float
    low: float
    high: float
    confidence_level: float
    n_subjects: int
    n_resamples: int


@dataclass(frozen=True)
class RankStability:
    """Distribution of one algorithm's rank (1 = best) over resamples or subjects.

    ``histogram[k]`` counts how often the rank was ``k + 1``; ``best_share`` is the fraction
    of rank 1; ``low``/``high`` are percentile bounds of the rank.
    """

    histogram: tuple[int, ...]
    median: float
    low: float
    high: float
    best_share: float


def _nanmean_rows(x: FloatArray) -> FloatArray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out: FloatArray = np.nanmean(x, axis=-1)
    return out


def _check_level(confidence_level: float) -> None:
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level}")


def _resample_index(
    n_subjects: int, n_resamples: int, seed: int | np.random.Generator | None
) -> NDArray[np.int64]:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_subjects, size=(n_resamples, n_subjects))


def _interval(
    estimate: float, boot: FloatArray, level: float, n: int, n_resamples: int
) -> ConfidenceInterval:
    finite = boot[np.isfinite(boot)]
    alpha = (1 - level) / 2
    if finite.size:
        low, high = np.quantile(finite, [alpha, 1 - alpha])
    else:
        low = high = math.nan
    return ConfidenceInterval(float(estimate), float(low), float(high), level, n, n_resamples)


def bootstrap_ci(
    values: ArrayLike,
    *,
    n_resamples: int = 2000,
    confidence_level: float = CONFIDENCE_LEVEL,
    seed: int | np.random.Generator | None = SEED,
) -> ConfidenceInterval:
    """Percentile bootstrap interval of the nan-mean of per-subject values.

    Parameters
    ----------
    values : array_like, shape (n_subjects,)
        One value per subject (NaN where undefined; NaN is skipped as in the nan-mean).
    n_resamples : int
        Number of bootstrap resamples.
    confidence_level : float
        For example 0.95.
    seed : int or Generator or None
        The same seed gives the same interval.

    Returns
    -------
    ConfidenceInterval

    Examples
    --------
    >>> ci = bootstrap_ci([0.2, 0.4, 0.6, float("nan")], seed=1)
    >>> ci.estimate, ci.low <= ci.estimate <= ci.high, ci.n_subjects
    (0.4, True, 4)
    """
    _check_level(confidence_level)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return ConfidenceInterval(math.nan, math.nan, math.nan, confidence_level, 0, n_resamples)
    idx = _resample_index(x.size, n_resamples, seed)
    boot = _nanmean_rows(x[idx])
    estimate = float(_nanmean_rows(x[None, :])[0])
    return _interval(estimate, boot, confidence_level, x.size, n_resamples)


def subject_values(
    subjects: Sequence[SubjectResult], metric: str = "f1", kind: str = "event"
) -> FloatArray:
    """One metric of each subject, as an array (NaN where undefined).

    Examples
    --------
    >>> from szbench_scoring import aggregate, score_events
    >>> rep = aggregate({("sub-01", "a"): score_events([(10, 20)], [(10, 20)], 600)})
    >>> subject_values(rep.subjects, "sensitivity").tolist()
    [1.0]
    """
    if kind not in ("event", "sample"):
        raise ValueError(f"kind must be 'event' or 'sample', got {kind!r}")
    return np.array([getattr(getattr(s, kind), metric) for s in subjects], dtype=np.float64)


def bootstrap_metrics(
    subjects: Sequence[SubjectResult] | Mapping[str, ArrayLike],
    *,
    metrics: Sequence[str] = METRICS,
    kind: str = "event",
    n_resamples: int = 2000,
    confidence_level: float = CONFIDENCE_LEVEL,
    seed: int | np.random.Generator | None = SEED,
) -> dict[str, ConfidenceInterval]:
    """Bootstrap intervals of several metrics of one algorithm, with the same resamples.

    Parameters
    ----------
    subjects : sequence of SubjectResult, or mapping metric -> per-subject values
        The algorithm's per-subject results (``DatasetReport.subjects``), or the values
        directly (each array in the same subject order).
    metrics : sequence of str
        Names among ``f1``, ``sensitivity``, ``precision``, ``fp_rate``.
    kind : {"event", "sample"}
        Which scoring, when ``subjects`` are SubjectResults.
    n_resamples, confidence_level, seed
        As for :func:`bootstrap_ci`.

    Returns
    -------
    dict of str to ConfidenceInterval

    Examples
    --------
    >>> cis = bootstrap_metrics({"f1": [0.1, 0.5, 0.9], "fp_rate": [1.0, 2.0, 30.0]}, seed=3,
    ...                         metrics=["f1", "fp_rate"])
    >>> round(cis["f1"].estimate, 3), cis["fp_rate"].high <= 30.0
    (0.5, True)
    """
    _check_level(confidence_level)
    if isinstance(subjects, Mapping):
        table = {m: np.asarray(subjects[m], dtype=np.float64).ravel() for m in metrics}
    else:
        table = {m: subject_values(subjects, m, kind) for m in metrics}
    sizes = {v.size for v in table.values()}
    if len(sizes) > 1:
        raise ValueError("every metric needs one value per subject, in the same order")
    n = sizes.pop() if sizes else 0
    out: dict[str, ConfidenceInterval] = {}
    if n == 0:
        for m in metrics:
            out[m] = ConfidenceInterval(
                math.nan, math.nan, math.nan, confidence_level, 0, n_resamples
            )
        return out
    idx = _resample_index(n, n_resamples, seed)  # paired: one draw for every metric
    for m, x in table.items():
        boot = _nanmean_rows(x[idx])
        estimate = float(_nanmean_rows(x[None, :])[0])
        out[m] = _interval(estimate, boot, confidence_level, n, n_resamples)
    return out


def align_subjects(
    per_algorithm: Sequence[Mapping[str, float | None]],
) -> tuple[list[str], FloatArray]:
    """Put several algorithms' per-subject values in one (algorithms, subjects) matrix.

    Subjects missing for an algorithm (or None) become NaN.

    Examples
    --------
    >>> names, m = align_subjects([{"sub-01": 0.5, "sub-02": 0.7}, {"sub-02": 0.1}])
    >>> names, m.tolist()
    (['sub-01', 'sub-02'], [[0.5, 0.7], [nan, 0.1]])
    """
    names = sorted({s for d in per_algorithm for s in d})
    matrix = np.full((len(per_algorithm), len(names)), np.nan)
    col = {s: i for i, s in enumerate(names)}
    for a, d in enumerate(per_algorithm):
        for s, v in d.items():
            if v is not None:
                matrix[a, col[s]] = v
    return names, matrix


def _ranks(primary: FloatArray, secondary: FloatArray | None) -> NDArray[np.int64]:
    """Competition ranks along the last axis (1 = best; higher is better; NaN is worst).

    Ties on ``primary`` are broken by ``secondary``; remaining ties share the best rank.
    """
    p = np.where(np.isnan(primary), -np.inf, primary)
    s = np.zeros_like(p) if secondary is None else np.where(np.isnan(secondary), -np.inf, secondary)
    pj, pi = p[..., None, :], p[..., :, None]
    sj, si = s[..., None, :], s[..., :, None]
    better = (pj > pi) | ((pj == pi) & (sj > si))
    ranks: NDArray[np.int64] = (1 + better.sum(axis=-1)).astype(np.int64)
    return ranks


def _stability(ranks: NDArray[np.int64], n_alg: int, level: float) -> list[RankStability]:
    alpha = (1 - level) / 2
    out = []
    for a in range(n_alg):
        r = ranks[:, a]
        if r.size == 0:
            out.append(RankStability(tuple([0] * n_alg), math.nan, math.nan, math.nan, math.nan))
            continue
        hist = np.bincount(r - 1, minlength=n_alg)[:n_alg]
        low, high = np.quantile(r, [alpha, 1 - alpha])
        out.append(
            RankStability(
                tuple(int(h) for h in hist),
                float(np.median(r)),
                float(low),
                float(high),
                float(np.mean(r == 1)),
            )
        )
    return out


def bootstrap_ranks(
    values: ArrayLike,
    tiebreak: ArrayLike | None = None,
    *,
    n_resamples: int = 2000,
    confidence_level: float = CONFIDENCE_LEVEL,
    seed: int | np.random.Generator | None = SEED,
) -> list[RankStability]:
    """How stable the leaderboard rank of each algorithm is when subjects are resampled.

    Each resample draws subjects with replacement (the same draw for every algorithm), ranks
    the algorithms by the nan-mean of ``values`` (higher is better, the challenge ranks by
    event F1) with ties broken by the nan-mean of ``tiebreak`` (sensitivity).

    Parameters
    ----------
    values : array_like, shape (n_algorithms, n_subjects)
        Per-subject values (see :func:`align_subjects`).
    tiebreak : array_like, same shape, optional
        Per-subject tie-break values.
    n_resamples, confidence_level, seed
        As for :func:`bootstrap_ci`.

    Returns
    -------
    list of RankStability
        One per algorithm, in the input order.

    Examples
    --------
    >>> f1 = [[0.9, 0.8, 0.7, 0.9], [0.1, 0.2, 0.1, 0.3]]
    >>> best, worst = bootstrap_ranks(f1, seed=0, n_resamples=200)
    >>> best.best_share, worst.histogram
    (1.0, (0, 200))
    """
    _check_level(confidence_level)
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    t = None if tiebreak is None else np.atleast_2d(np.asarray(tiebreak, dtype=np.float64))
    if t is not None and t.shape != v.shape:
        raise ValueError("tiebreak must have the shape of values")
    n_alg, n_sub = v.shape
    if n_sub == 0:
        return _stability(np.empty((0, n_alg), dtype=np.int64), n_alg, confidence_level)
    idx = _resample_index(n_sub, n_resamples, seed)
    means = _nanmean_rows(v[:, idx]).T  # (n_resamples, n_alg)
    ties = None if t is None else _nanmean_rows(t[:, idx]).T
    return _stability(_ranks(means, ties), n_alg, confidence_level)


def per_subject_ranks(
    values: ArrayLike,
    tiebreak: ArrayLike | None = None,
    *,
    confidence_level: float = CONFIDENCE_LEVEL,
) -> list[RankStability]:
    """Distribution over subjects of each algorithm's rank on that subject alone.

    Subjects where every algorithm's value is NaN (no seizure and no false alarm for
    anyone) say nothing about the order and are skipped; otherwise NaN ranks last.

    Parameters
    ----------
    values : array_like, shape (n_algorithms, n_subjects)
        Per-subject values, higher is better.
    tiebreak : array_like, same shape, optional
        Per-subject tie-break values.
    confidence_level : float
        Percentile range reported as ``low``/``high``.

    Returns
    -------
    list of RankStability

    Examples
    --------
    >>> a = per_subject_ranks([[0.9, 0.1, 0.8], [0.5, 0.5, float("nan")]])
    >>> a[0].histogram, a[1].histogram
    ((2, 1), (1, 2))
    """
    _check_level(confidence_level)
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    t = None if tiebreak is None else np.atleast_2d(np.asarray(tiebreak, dtype=np.float64))
    if t is not None and t.shape != v.shape:
        raise ValueError("tiebreak must have the shape of values")
    informative = ~np.isnan(v).all(axis=0)
    ranks = _ranks(v[:, informative].T, None if t is None else t[:, informative].T)
    return _stability(ranks, v.shape[0], confidence_level)


# --- paired comparison of two algorithms over the same subjects ------------------------------

#: Up to this many subjects the sign-flip test enumerates all 2**n flips (exact p-value).
EXACT_MAX_SUBJECTS = 16


@dataclass(frozen=True)
class PairedComparison:
    """Algorithm A against algorithm B on the subjects both have a value for.

    ``mean_difference`` is the mean of A - B over those subjects, ``low``/``high`` its
    percentile bootstrap interval (subjects resampled as pairs), ``p_value`` the two-sided
    paired permutation (sign-flip) test of "no difference"; ``exact`` tells whether every
    flip was enumerated. All NaN when no subject has both values.
    """

    mean_difference: float
    low: float
    high: float
    p_value: float
    n_subjects: int
    confidence_level: float
    n_resamples: int
    exact: bool


def _paired(a: ArrayLike, b: ArrayLike) -> FloatArray:
    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(
            f"a and b must hold one value per subject each, got {x.size} and {y.size} values"
        )
    both = np.isfinite(x) & np.isfinite(y)
    out: FloatArray = x[both] - y[both]
    return out


def paired_permutation_test(
    a: ArrayLike,
    b: ArrayLike,
    *,
    n_resamples: int = 10000,
    seed: int | np.random.Generator | None = SEED,
) -> tuple[float, bool]:
    """Two-sided paired permutation test of the mean difference between ``a`` and ``b``.

    Under "no difference" each subject's A and B are exchangeable, so the sign of each
    difference is a coin flip. The p-value is the share of sign flips whose mean difference
    is at least as far from zero as the observed one. Subjects where either value is NaN
    are left out (the pair is incomplete).

    Parameters
    ----------
    a, b : array_like, shape (n_subjects,)
        The two algorithms' values, aligned by subject.
    n_resamples : int
        Random flips drawn when there are more than ``EXACT_MAX_SUBJECTS`` complete pairs
        (the p-value is then ``(1 + hits) / (1 + n_resamples)``, never 0).
    seed : int or Generator or None
        The same seed gives the same p-value.

    Returns
    -------
    (p_value, exact) : (float, bool)
        NaN when no pair is complete; ``exact`` when every flip was enumerated.

    Examples
    --------
    Four subjects all better under A: only the all-positive and all-negative flips are as
    extreme, 2 of 16.

    >>> paired_permutation_test([0.5, 0.6, 0.7, 0.8], [0.1, 0.2, 0.3, 0.4])
    (0.125, True)
    >>> paired_permutation_test([0.5, 0.5], [0.5, 0.5])
    (1.0, True)
    """
    d = _paired(a, b)
    n = d.size
    if n == 0:
        return math.nan, True
    observed = abs(float(d.mean()))
    # Flips whose mean equals the observed one up to rounding count as "as extreme".
    tolerance = 1e-12 * max(1.0, float(np.abs(d).max()))
    if n <= EXACT_MAX_SUBJECTS:
        codes = np.arange(2**n, dtype=np.int64)[:, None]
        signs = 1.0 - 2.0 * ((codes >> np.arange(n)) & 1)
        means = np.abs(signs @ d) / n
        return float(np.mean(means >= observed - tolerance)), True
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    hits = 0
    # In blocks, so memory stays bounded however many subjects and resamples there are.
    block = max(1, 2_000_000 // n)
    done = 0
    while done < n_resamples:
        size = min(block, n_resamples - done)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, n))
        hits += int(np.count_nonzero(np.abs(signs @ d) / n >= observed - tolerance))
        done += size
    return (1 + hits) / (1 + n_resamples), False


def smallest_p_value(n_subjects: int, n_permutations: int = 10000) -> float:
    """The smallest p-value :func:`paired_permutation_test` can give over ``n_subjects``
    complete pairs.

    Exact (up to ``EXACT_MAX_SUBJECTS`` pairs): the observed flip and its mirror image are
    always at least as extreme, so p >= 2 / 2**n (reached when every difference has the same
    sign and no other flip is as far from zero). With random flips (more pairs) p is
    ``(1 + hits) / (1 + n_permutations)``, at least ``1 / (1 + n_permutations)``. NaN
    without pairs.

    Examples
    --------
    >>> smallest_p_value(4), smallest_p_value(10), smallest_p_value(20, 9999)
    (0.125, 0.001953125, 0.0001)
    """
    if n_subjects < 0:
        raise ValueError(f"n_subjects must be >= 0, got {n_subjects}")
    if n_subjects == 0:
        return math.nan
    if n_subjects <= EXACT_MAX_SUBJECTS:
        return 2.0 / float(2**n_subjects)
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    return 1.0 / (1 + n_permutations)


def paired_comparison(
    a: ArrayLike,
    b: ArrayLike,
    *,
    n_resamples: int = 2000,
    n_permutations: int = 10000,
    confidence_level: float = CONFIDENCE_LEVEL,
    seed: int | np.random.Generator | None = SEED,
) -> PairedComparison:
    """The mean per-subject difference A - B, its bootstrap interval and a permutation p-value.

    Parameters
    ----------
    a, b : array_like, shape (n_subjects,)
        The two algorithms' values of one metric, aligned by subject (see
        :func:`align_subjects`); NaN where undefined, and such subjects are left out.
    n_resamples : int
        Bootstrap resamples of the subjects (as pairs).
    n_permutations : int
        Random sign flips when the exact test would be too large
        (see :func:`paired_permutation_test`).
    confidence_level : float
        For example 0.95.
    seed : int or Generator or None
        The same seed gives the same result.

    Returns
    -------
    PairedComparison

    Examples
    --------
    >>> c = paired_comparison([0.5, 0.6, 0.7, 0.8, float("nan")], [0.1, 0.2, 0.3, 0.4, 0.9])
    >>> round(c.mean_difference, 6), c.n_subjects, c.p_value, c.exact
    (0.4, 4, 0.125, True)
    >>> c.low <= c.mean_difference <= c.high
    True
    """
    _check_level(confidence_level)
    d = _paired(a, b)
    if d.size == 0:
        nan = math.nan
        return PairedComparison(nan, nan, nan, nan, 0, confidence_level, n_resamples, True)
    rng = np.random.default_rng(seed)
    idx = _resample_index(d.size, n_resamples, rng)
    ci = _interval(float(d.mean()), d[idx].mean(axis=1), confidence_level, d.size, n_resamples)
    p_value, exact = paired_permutation_test(
        d, np.zeros_like(d), n_resamples=n_permutations, seed=rng
    )
    return PairedComparison(
        mean_difference=ci.estimate,
        low=ci.low,
        high=ci.high,
        p_value=p_value,
        n_subjects=d.size,
        confidence_level=confidence_level,
        n_resamples=n_resamples,
        exact=exact,
    )
