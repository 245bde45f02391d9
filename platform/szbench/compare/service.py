"""Two or more algorithms on one dataset version: per-subject values side by side and a
paired test over subjects (:func:`szbench_scoring.stats.paired_comparison`).

What a viewer gets is decided by :mod:`szbench.disclosure` (each evaluation's
:attr:`~szbench.disclosure.decision.View.comparison`, each pair by
:func:`~szbench.disclosure.release.released_test`): per-subject values and exact tests where
per-subject figures are disclosed; at the aggregate level the paired tests alone, rounded,
over enough subjects; nothing under the Ladder. Each evaluation must also be visible to the
viewer (:func:`szbench.auth.policy.can_view_evaluation`).
"""

from __future__ import annotations

import functools
import math
from itertools import combinations

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.compare.schemas import ComparedEvaluation, Comparison, PairedTest, SubjectRow
from szbench.disclosure import decision, release
from szbench.errors import BadRequest
from szbench.evaluations import queries as evaluations
from szbench.leaderboards import statistics
from szbench.models import Evaluation, EvaluationKind, EvaluationStatus, SubjectResult, User
from szbench.results.queries import METRICS
from szbench_scoring.stats import (
    CONFIDENCE_LEVEL,
    PairedComparison,
    paired_comparison,
    smallest_p_value,
)

#: The ranking metric: the paired test defaults to it.
RANKING_METRIC = "event_f1"
MAX_COMPARED = 8
# Random sign flips of the paired permutation test past szbench_scoring.stats.
# EXACT_MAX_SUBJECTS subjects (below, every flip is enumerated and p is exact). Its smallest
# p is 1/(1 + this), the floor docs/security.md states for a comparison ("What a submitter
# can learn, decided in one place, and its bound"): 10,000 makes that about 0.0001, below what
# a p released to two decimals can show.
COMPARE_PERMUTATIONS = 10_000


def _clean(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def load(session: Session, evaluation_ids: list[int], *, viewer: User | None) -> list[Evaluation]:
    """The evaluations to compare, checked: visible, finished, one dataset version."""
    ids = list(dict.fromkeys(evaluation_ids))
    if not 2 <= len(ids) <= MAX_COMPARED:
        raise BadRequest(
            f"evaluation: give between 2 and {MAX_COMPARED} different evaluation ids "
            f"(got {len(ids)})"
        )
    rows = [evaluations.get_evaluation(session, i, viewer=viewer) for i in ids]
    for row in rows:
        if row.status != EvaluationStatus.DONE or row.kind == EvaluationKind.SMOKE_TEST:
            raise BadRequest(
                f"evaluation: {row.id} has no results to compare (status {row.status.value}, "
                f"kind {row.kind.value})"
            )
    first = rows[0].dataset_version
    for row in rows[1:]:
        if row.dataset_version_id != first.id:
            dv = row.dataset_version
            raise BadRequest(
                f"evaluation: {row.id} is on {dv.dataset.slug} {dv.version}, {rows[0].id} on "
                f"{first.dataset.slug} {first.version}; compare evaluations of one dataset version"
            )
    return rows


def views_of(rows: list[Evaluation], *, viewer: User | None) -> dict[int, decision.View]:
    return {row.id: decision.view_of(viewer, row) for row in rows}


def _differing(xa: list[float], xb: list[float]) -> int:
    """Subjects with a value under both on which the two differ."""
    return sum(
        1
        for x, y in zip(xa, xb, strict=True)
        if math.isfinite(x) and math.isfinite(y) and abs(x - y) > 1e-12
    )


@functools.lru_cache(maxsize=1024)
def paired_test(
    xa: tuple[float | None, ...],
    xb: tuple[float | None, ...],
    n_resamples: int,
    n_permutations: int,
) -> PairedComparison:
    """:func:`paired_comparison` of two per-subject columns (None: missing), kept by value.

    The resampling costs a few hundred ms per pair, every time a comparison is asked for;
    its result is a pure function of these arguments (the seed is fixed), so it is kept
    keyed on them: a new result changes the values, hence the key, and nothing needs
    invalidating. What a viewer may see is still checked on every request, before this.
    """
    return paired_comparison(
        [math.nan if v is None else v for v in xa],
        [math.nan if v is None else v for v in xb],
        n_resamples=n_resamples,
        n_permutations=n_permutations,
    )


def compare(
    session: Session,
    evaluation_ids: list[int],
    *,
    viewer: User | None,
    metric: str = RANKING_METRIC,
) -> Comparison:
    """Per-subject ``metric`` side by side and a paired test for each pair of evaluations."""
    if metric not in METRICS:
        raise BadRequest(f"metric: unknown metric {metric!r} (known: {', '.join(METRICS)})")
    rows = load(session, evaluation_ids, viewer=viewer)
    views = views_of(rows, viewer=viewer)
    mode = release.require_comparison(views)
    column = getattr(SubjectResult, metric)
    per_eval: dict[int, dict[str, float | None]] = {row.id: {} for row in rows}
    for evaluation_id, subject, value in session.execute(
        select(SubjectResult.evaluation_id, SubjectResult.subject, column).where(
            SubjectResult.evaluation_id.in_(list(per_eval))
        )
    ):
        per_eval[evaluation_id][subject] = _clean(value)
    subjects = sorted({s for values in per_eval.values() for s in values})
    table = (
        [SubjectRow(subject=s, values=[per_eval[row.id].get(s) for row in rows]) for s in subjects]
        if mode == decision.Comparing.SUBJECTS
        else []
    )
    tests = []
    for a, b in combinations(rows, 2):
        xa = [math.nan if (v := per_eval[a.id].get(s)) is None else v for s in subjects]
        xb = [math.nan if (v := per_eval[b.id].get(s)) is None else v for s in subjects]
        c = paired_test(
            tuple(per_eval[a.id].get(s) for s in subjects),
            tuple(per_eval[b.id].get(s) for s in subjects),
            statistics.BOOTSTRAP_RESAMPLES,
            COMPARE_PERMUTATIONS,
        )
        smallest = smallest_p_value(c.n_subjects, COMPARE_PERMUTATIONS) if c.n_subjects else None
        released = release.released_test(
            [views[a.id], views[b.id]],
            metric,
            mean_difference=c.mean_difference,
            low=c.low,
            high=c.high,
            p_value=c.p_value,
            pairs=c.n_subjects,
            differing=_differing(xa, xb),
            smallest_p=smallest,
        )
        tests.append(
            PairedTest(
                a=a.id,
                b=b.id,
                mean_difference=released.mean_difference,
                low=released.low,
                high=released.high,
                p_value=released.p_value,
                exact=c.exact,
                n_subjects=c.n_subjects,
                smallest_p=smallest,
                withheld=released.withheld,
            )
        )
    dv = rows[0].dataset_version
    compared = []
    for row in rows:
        algorithm = row.algorithm_version.algorithm
        compared.append(
            ComparedEvaluation(
                evaluation_id=row.id,
                algorithm_id=algorithm.id,
                algorithm=algorithm.name,
                algorithm_version=row.algorithm_version.version,
                title=algorithm.title,
                owner=algorithm.owner.name or f"user {algorithm.owner_id}",
                value=release.released_value(
                    views[row.id], metric, getattr(row.result, metric) if row.result else None
                ),
            )
        )
    return Comparison(
        dataset=dv.dataset.slug,
        dataset_version=dv.version,
        metric=metric,
        confidence_level=CONFIDENCE_LEVEL,
        n_resamples=statistics.BOOTSTRAP_RESAMPLES,
        release=mode,
        min_subjects=decision.INTERVALS_MIN_SUBJECTS,
        subjects_withheld=release.comparison_withheld(views),
        evaluations=compared,
        subjects=table,
        tests=tests,
    )
