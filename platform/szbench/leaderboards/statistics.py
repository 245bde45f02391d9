"""Bootstrap confidence intervals and rank stability for a leaderboard, with a cache.

The statistics themselves are pure functions in :mod:`szbench_scoring.stats`; this module
feeds them the per-subject values from ``subject_results`` and caches the answer per set
of evaluations (new results change the set, so the cache never serves stale figures; the
time limit only bounds memory and picks up settings changes).
"""

from __future__ import annotations

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
_CACHE_SIZE = 256


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


def _compute(
    session: Session, evaluation_ids: Sequence[int]
) -> BoardStats:  # pragma: no cover - replaced when szbench_scoring.stats lands
    try:
        from szbench_scoring import stats  # noqa: F401
    except ImportError:
        return BoardStats(
            status="unavailable: szbench_scoring.stats is not installed", by_evaluation={}
        )
    raise NotImplementedError


def board_statistics(session: Session, evaluation_ids: Sequence[int]) -> BoardStats:
    """Statistics for these entries (in rank order), from the cache when fresh."""
    settings = get_settings()
    key = (
        tuple(evaluation_ids),
        settings.bootstrap_resamples,
        settings.bootstrap_seed,
        settings.confidence_level,
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
