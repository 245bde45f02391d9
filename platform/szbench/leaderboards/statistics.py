"""Bootstrap confidence intervals and rank stability for a leaderboard, with a cache.

The statistics themselves are pure functions in :mod:`szbench_scoring.stats`; this module
feeds them the per-subject values from ``subject_results`` and caches the answer per set
of evaluations (new results change the set, so the cache never serves stale figures; the
time limit only bounds memory and picks up settings changes).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import SubjectResult

CI_METRICS = ("event_f1", "event_sensitivity", "event_precision", "event_fp_rate")
# The same metrics under szbench_scoring.stats's names.
_SHORT = ("f1", "sensitivity", "precision", "fp_rate")
_CACHE_SIZE = 256
# Bootstrap resamples behind every interval and rank-stability figure (boards, results,
# comparisons): 1,000, the usual count for 95% percentile intervals, at a cost a board answer
# can pay. Seeded (szbench_scoring.stats.SEED), so every deployment publishes the same
# interval for the same results; that is also why it is not a setting.
BOOTSTRAP_RESAMPLES = 1000


@dataclass(frozen=True)
class EntryStats:
    ci: dict[str, tuple[float | None, float | None]]
    rank_median: float | None
    rank_low: float | None
    rank_high: float | None
    best_share: float | None
    histogram: list[int]


@dataclass(frozen=True)
class BoardStats:
    status: str
    by_evaluation: dict[int, EntryStats]


_cache: OrderedDict[tuple[Any, ...], tuple[float, BoardStats]] = OrderedDict()
_lock = threading.Lock()


def clear_cache() -> None:
    with _lock:
        _cache.clear()


def _load_subjects(
    session: Session, evaluation_ids: Sequence[int]
) -> dict[int, dict[str, dict[str, float | None]]]:
    rows = session.execute(
        select(
            SubjectResult.evaluation_id,
            SubjectResult.subject,
            *(getattr(SubjectResult, m) for m in CI_METRICS),
        ).where(SubjectResult.evaluation_id.in_(list(evaluation_ids)))
    ).all()
    out: dict[int, dict[str, dict[str, float | None]]] = {i: {} for i in evaluation_ids}
    for evaluation_id, subject, *values in rows:
        out[evaluation_id][subject] = dict(zip(CI_METRICS, values, strict=True))
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _compute(session: Session, evaluation_ids: Sequence[int]) -> BoardStats:
    try:
        from szbench_scoring import stats  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return BoardStats(
            status="unavailable: szbench_scoring.stats is not installed", by_evaluation={}
        )
    per_subject = _load_subjects(session, evaluation_ids)
    out: dict[int, EntryStats] = {}
    f1_rows = []
    sens_rows = []
    cis: dict[int, dict[str, tuple[float | None, float | None]]] = {}
    for evaluation_id in evaluation_ids:
        subjects = per_subject.get(evaluation_id, {})
        names = sorted(subjects)
        table = {
            short: [_nan(subjects[s][metric]) for s in names]
            for metric, short in zip(CI_METRICS, _SHORT, strict=True)
        }
        intervals = stats.bootstrap_metrics(
            table,
            metrics=list(_SHORT),
            n_resamples=BOOTSTRAP_RESAMPLES,
        )
        cis[evaluation_id] = {
            metric: (_finite(intervals[short].low), _finite(intervals[short].high))
            for metric, short in zip(CI_METRICS, _SHORT, strict=True)
        }
        f1_rows.append({s: subjects[s]["event_f1"] for s in names})
        sens_rows.append({s: subjects[s]["event_sensitivity"] for s in names})
    # Rank stability: each entry's rank subject by subject, over the subjects they share.
    _, f1 = stats.align_subjects(f1_rows)
    _, sens = stats.align_subjects(sens_rows)
    ranks = stats.per_subject_ranks(f1, sens)
    for evaluation_id, rank in zip(evaluation_ids, ranks, strict=True):
        out[evaluation_id] = EntryStats(
            ci=cis[evaluation_id],
            rank_median=_finite(rank.median),
            rank_low=_finite(rank.low),
            rank_high=_finite(rank.high),
            best_share=_finite(rank.best_share),
            histogram=list(rank.histogram),
        )
    return BoardStats(status="ok", by_evaluation=out)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def board_statistics(session: Session, evaluation_ids: Sequence[int]) -> BoardStats:
    """Statistics for these entries (in rank order), from the cache when fresh."""
    settings = get_settings()
    key = (
        tuple(evaluation_ids),
        BOOTSTRAP_RESAMPLES,
    )
    now = time.monotonic()
    with _lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < settings.leaderboard_cache_s:
            _cache.move_to_end(key)
            return hit[1]
    result = _compute(session, evaluation_ids)
    with _lock:
        _cache[key] = (now, result)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return result
