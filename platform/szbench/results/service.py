"""Cached answers of the hot result reads: an evaluation's result and subjects, an
algorithm's results side by side (see :mod:`szbench.api.cache`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from szbench.api.cache import StampedCache
from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import NotFound
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetKind,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    User,
    Visibility,
)
from szbench.results import disclosure


def _evaluation_facts(session: Session, ids: list[int]) -> dict[Any, Hashable]:
    """Who may see each evaluation, and what its results depend on, in one query."""
    rows = session.execute(
        select(
            Evaluation.id,
            Algorithm.owner_id,
            Algorithm.visibility,
            Evaluation.published,
            Evaluation.kind,
            Evaluation.status,
            Evaluation.finished_at,
            Evaluation.recordings_done,
            DatasetResult.id,
            # What the disclosure rules need (see disclosure_view): a change of level
            # changes the facts, so no answer built under the old level is served again.
            Dataset.kind,
            Dataset.disclosure,
            Phase.disclosure,
        )
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .join(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
        .outerjoin(Phase, AlgorithmVersion.phase_id == Phase.id)
        .outerjoin(DatasetResult, DatasetResult.evaluation_id == Evaluation.id)
        .where(Evaluation.id.in_(ids))
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def _algorithm_facts(session: Session, ids: list[int]) -> dict[Any, Hashable]:
    """Per algorithm: its owner and visibility, and a stamp of its evaluations (a new one,
    a finish, a publish or hide changes it: the sums are weighted by id so that two changes
    rarely cancel out)."""
    rows = session.execute(
        select(
            Algorithm.id,
            Algorithm.owner_id,
            Algorithm.visibility,
            Algorithm.name,
            func.count(Evaluation.id),
            func.max(Evaluation.id),
            func.max(Evaluation.finished_at),
            func.sum(case((Evaluation.published.is_(True), Evaluation.id), else_=0)),
            func.sum(case((Evaluation.status == EvaluationStatus.DONE, Evaluation.id), else_=0)),
        )
        .outerjoin(AlgorithmVersion, AlgorithmVersion.algorithm_id == Algorithm.id)
        .outerjoin(Evaluation, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .where(Algorithm.id.in_(ids))
        .group_by(Algorithm.id, Algorithm.owner_id, Algorithm.visibility, Algorithm.name)
    )
    return {row[0]: tuple(row[1:]) for row in rows}


evaluation_answers = StampedCache(
    "evaluation results",
    _evaluation_facts,
    window_s=lambda: get_settings().results_fresh_s,
    ttl_s=lambda: get_settings().results_cache_s,
)
algorithm_answers = StampedCache(
    "algorithm results",
    _algorithm_facts,
    window_s=lambda: get_settings().results_fresh_s,
    ttl_s=lambda: get_settings().results_cache_s,
)


def clear_cache() -> None:
    evaluation_answers.clear()
    algorithm_answers.clear()


def authorize_evaluation(viewer: User | None, evaluation_id: int, facts: Any) -> None:
    """:func:`policy.can_view_evaluation` on the cached facts; the same not-found error."""
    owner_id, visibility, published, kind = facts[:4]
    if not policy.may_view_results(
        viewer,
        owner_id=owner_id,
        public=visibility == Visibility.PUBLIC,
        published=published,
        smoke_test=kind == EvaluationKind.SMOKE_TEST,
    ):
        raise NotFound(f"evaluation {evaluation_id} does not exist")


def disclosure_view(viewer: User | None, facts: Any) -> disclosure.View:
    """:func:`disclosure.view_of` on the cached facts of an evaluation."""
    owner_id = facts[0]
    dataset_kind, dataset_level, phase_level = facts[8:11]
    return disclosure.View(
        admin=policy.is_admin(viewer),
        owner=viewer is not None and viewer.id == owner_id,
        held_out=dataset_kind != DatasetKind.PUBLIC_SAMPLE,
        level=disclosure.level_of(dataset_kind, dataset_level, phase_level),
        signed_in=viewer is not None,
    )


def authorize_subjects(viewer: User | None, evaluation_id: int, facts: Any) -> None:
    """:func:`authorize_evaluation`, and the per-subject figures must be disclosed."""
    authorize_evaluation(viewer, evaluation_id, facts)
    disclosure_view(viewer, facts).require_subjects(evaluation_id)


def authorize_algorithm(viewer: User | None, algorithm_id: int, facts: Any) -> None:
    """:func:`policy.can_view_algorithm` on the cached facts; the same not-found error."""
    owner_id, visibility = facts[:2]
    if not policy.may_view_algorithm(
        viewer, owner_id=owner_id, public=visibility == Visibility.PUBLIC
    ):
        raise NotFound(f"algorithm {algorithm_id} does not exist")
