"""Released figures: a dataset-level figure, an interval, a rank, a report, a paired test,
each as one viewer's :class:`~szbench.disclosure.decision.View` lets them read it.

Exact where the view is exact; at the aggregate level (``rounded``) only the leaderboard's
figures (:data:`ROUNDED_METRICS`) on a fixed grid and never a raw count; under the Ladder
only the ranking metric, as :mod:`szbench.disclosure.ladder` released it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from szbench.disclosure.decision import _COMPARING_ORDER, Comparing, Release, View

#: The figures released at the aggregate level: those the leaderboard shows. The other
#: metrics (sample sensitivity, precision and FP/day) and every raw count are withheld.
ROUNDED_METRICS = ("event_f1", "event_sensitivity", "event_precision", "event_fp_rate", "sample_f1")
#: The one figure the Ladder releases: the ranking metric.
LADDER_METRIC = "event_f1"
#: The metrics a paired test is released on at the aggregate level: the ranking one alone.
COMPARED_METRICS = ("event_f1",)
#: FP/day at the aggregate level: 0.1 below 10, 1 below 100, 10 below 1000, then capped.
FP_RATE_CAP = 1000.0
FP_RATE_GRID_SIZE = 100 + 90 + 90 + 1
#: Rank stability at the aggregate level: medians and percentiles on half ranks.
RANK_STEP = 0.5


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def round_ratio(value: float | None, decimals: int) -> float | None:
    """A ratio metric (0 to 1) rounded to ``decimals``.

    >>> round_ratio(0.31415, 2)
    0.31
    """
    value = _finite(value)
    return None if value is None else round(value, decimals)


def round_fp_rate(value: float | None) -> float | None:
    """FP/day on the released grid: 0.1 below 10, 1 below 100, 10 below 1000, then
    capped at 1000 (meaning "1000 or more"): :data:`FP_RATE_GRID_SIZE` values.

    >>> [round_fp_rate(x) for x in (3.14159, 42.4, 123.0, 98765.0)]
    [3.1, 42.0, 120.0, 1000.0]
    """
    value = _finite(value)
    if value is None:
        return None
    value = max(0.0, value)
    for limit, step in ((10.0, 0.1), (100.0, 1.0), (FP_RATE_CAP, 10.0)):
        rounded = round(round(value / step) * step, 1)
        if rounded < limit:
            return rounded
    return FP_RATE_CAP


def _round(metric: str, value: float | None, decimals: int) -> float | None:
    if metric.endswith("fp_rate"):
        return round_fp_rate(value)
    return round_ratio(value, decimals)


def released_value(view: View, metric: str, value: float | None) -> float | None:
    """One dataset-level figure as this viewer gets it (the Ladder's score is apart:
    :func:`released_metrics`)."""
    if view.release == Release.EXACT:
        return _finite(value)
    if view.release == Release.ROUNDED and metric in ROUNDED_METRICS:
        return _round(metric, value, view.decimals)
    return None


def released_metrics(
    view: View, metrics: Mapping[str, float | None], *, ladder_score: float | None = None
) -> dict[str, float | None]:
    """Every dataset-level figure as this viewer gets it; under the Ladder only the ranking
    metric, as the ladder released it (``ladder_score``)."""
    out = {m: released_value(view, m, v) for m, v in metrics.items()}
    if view.release == Release.LADDER and LADDER_METRIC in out:
        out[LADDER_METRIC] = ladder_score
    return out


def released_interval(
    view: View, metric: str, low: float | None, high: float | None
) -> tuple[float | None, float | None] | None:
    """A confidence interval as this viewer gets it; None where intervals are withheld."""
    if not view.intervals:
        return None
    if view.release == Release.EXACT:
        return _finite(low), _finite(high)
    return _round(metric, low, view.decimals), _round(metric, high, view.decimals)


def released_rank(view: View, value: float | None) -> float | None:
    """A median or percentile of the per-subject ranks as this viewer gets it."""
    value = _finite(value)
    if value is None or view.release == Release.EXACT:
        return value
    return round(value / RANK_STEP) * RANK_STEP


#: Report entries every viewer may read: the scorer's parameters and the dataset's sizes.
_REPORT_KEPT = ("params", "scorer_version", "subjects", "recordings", "missing_hypotheses")


def released_report(view: View, report: Mapping[str, Any]) -> dict[str, Any]:
    """The stored scorer report as this viewer gets it.

    Exact: whole (per-subject means and ``*_std``, pooled ratios and the pooled counts) where
    intervals are disclosed; without them, no ``*_std`` (over two subjects mean and std are
    the two figures). Rounded: the released figures and, where intervals are disclosed,
    their ``*_std``, rounded; never a raw count. Ladder: the parameters only.
    """
    kept = {k: report[k] for k in _REPORT_KEPT if k in report}
    if view.release == Release.LADDER:
        return kept
    if view.release == Release.EXACT:
        out = dict(report)
        if not view.intervals:
            for block in ("event_results", "sample_results"):
                if isinstance(out.get(block), dict):
                    out[block] = {k: v for k, v in out[block].items() if not k.endswith("_std")}
        return out
    for block, prefix in (("event_results", "event_"), ("sample_results", "sample_")):
        source = report.get(block)
        if not isinstance(source, dict):
            continue
        released: dict[str, float | None] = {}
        for name, value in source.items():
            base = name.removesuffix("_std")
            metric = prefix + ("fp_rate" if base == "fpRate" else base)
            if metric not in ROUNDED_METRICS or (name.endswith("_std") and not view.intervals):
                continue
            number = value if isinstance(value, int | float) else None
            released[name] = _round(metric, number, view.decimals)
        kept[block] = released
    return kept


def released_histogram(view: View, histogram: list[int]) -> list[int]:
    """Subjects at each rank: the per-subject ranks themselves, so exact views only."""
    return list(histogram) if view.release == Release.EXACT else []


# --- comparisons -----------------------------------------------------------------------------


def comparing(views: Iterable[View]) -> Comparing:
    """What a comparison of evaluations with these views may show: the least any allows."""
    return min((v.comparison for v in views), key=_COMPARING_ORDER.index, default=Comparing.NONE)


def require_comparison(views: Mapping[int, View]) -> Comparing:
    """:func:`comparing` for views by evaluation id; refuses where nothing may be shown."""
    for evaluation_id, view in views.items():
        if view.comparison == Comparing.NONE:
            view._refuse(f"comparisons of evaluation {evaluation_id}")
    return comparing(views.values())


def comparison_withheld(views: Mapping[int, View]) -> str | None:
    """Why a comparison shows no per-subject values (None where it shows them), and what it
    shows instead; for the comparison page and the API."""
    for evaluation_id, view in views.items():
        if view.comparison == Comparing.NONE:
            return view.withheld(f"Comparisons of evaluation {evaluation_id}") + "."
    for evaluation_id, view in views.items():
        if view.comparison != Comparing.SUBJECTS:
            what = view.withheld(f"Per-subject results of evaluation {evaluation_id}")
            return (
                f"{what}, so no per-subject values are shown: each pair gets the paired test "
                f"alone on {', '.join(COMPARED_METRICS)} (mean difference, interval, p) where "
                f"at least {view.min_subjects} subjects have a value under both and the two "
                f"differ on at least as many, rounded to {view.decimals} decimals (p rounded up)."
            )
    return None


@dataclass(frozen=True)
class ReleasedTest:
    """A paired test as a viewer gets it; ``withheld`` says why its figures are null."""

    mean_difference: float | None
    low: float | None
    high: float | None
    p_value: float | None
    withheld: str | None = None


def _round_signed(metric: str, value: float | None, decimals: int) -> float | None:
    value = _finite(value)
    if value is None:
        return None
    rounded = _round(metric, abs(value), decimals)
    return None if rounded is None else math.copysign(rounded, value) + 0.0


def round_p_up(value: float | None, decimals: int) -> float | None:
    """A p-value rounded *up* to ``decimals`` (a released 0.01 means p <= 0.01), so that
    rounding never makes a difference look more significant than it is.

    >>> round_p_up(0.0039, 2), round_p_up(0.125, 2), round_p_up(0.25, 2)
    (0.01, 0.13, 0.25)
    """
    value = _finite(value)
    if value is None:
        return None
    scale = float(10**decimals)
    return min(1.0, math.ceil(value * scale - 1e-9) / scale)


def released_test(
    views: Sequence[View],
    metric: str,
    *,
    mean_difference: float | None,
    low: float | None,
    high: float | None,
    p_value: float | None,
    pairs: int,
    differing: int,
    smallest_p: float | None,
) -> ReleasedTest:
    """The paired test of two evaluations (``views``: theirs) as the viewer gets it.

    Per-subject disclosure (both): as computed. Aggregate (either): from ``min_subjects``
    ``pairs`` (subjects with a value under both) on, when the two differ on at least as
    many subjects (``differing``; else comparing an entry with one that differs on one
    subject would give that subject's difference away as ``n`` times the mean), the mean
    difference and its interval on the released grid and p rounded up; otherwise nulls
    and why, with the smallest p-value ``pairs`` subjects can give (``smallest_p``).
    """
    mode = comparing(views)
    if mode == Comparing.SUBJECTS:
        return ReleasedTest(_finite(mean_difference), _finite(low), _finite(high), _finite(p_value))
    minimum = max(v.min_subjects for v in views)
    decimals = min(v.decimals for v in views)
    if mode == Comparing.NONE:
        reason = "Comparisons are not disclosed for these entries."
    elif metric not in COMPARED_METRICS:
        reason = (
            f"No test: at the aggregate level pairs are compared on "
            f"{', '.join(COMPARED_METRICS)} only (each metric compared is another channel "
            "out of the held-out data)."
        )
    elif pairs < minimum:
        floor = (
            ""
            if smallest_p is None
            else (
                f" With {pairs} subjects the smallest p-value this test can give is "
                f"{smallest_p:.3g}."
            )
        )
        reason = (
            f"No test: {pairs} subjects have a value under both entries, and a paired test "
            f"is released from {minimum} on (over fewer it would give per-subject figures "
            f"away).{floor}"
        )
    elif differing < minimum:
        reason = (
            f"No test: the two entries differ on fewer than {minimum} subjects, and over so "
            "few the test would give those subjects' figures away."
        )
    else:
        return ReleasedTest(
            _round_signed(metric, mean_difference, decimals),
            _round_signed(metric, low, decimals),
            _round_signed(metric, high, decimals),
            round_p_up(p_value, decimals),
        )
    return ReleasedTest(None, None, None, None, withheld=reason)
