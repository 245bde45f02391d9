"""Cached answers of the hot result reads: an evaluation's result and subjects, an
algorithm's results side by side (see :mod:`szbench.stamped_cache`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

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
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    User,
    Visibility,
)
from szbench.results import disclosure
from szbench.stamped_cache import Answer, StampedCache, viewer_key


class EvaluationFacts(NamedTuple):
    """Who may see an evaluation, and what its results depend on."""

    owner_id: int
    visibility: Visibility
    published: bool
    kind: EvaluationKind
    status: EvaluationStatus
    finished_at: datetime | None
    recordings_done: int
    result_id: int | None
    # What the disclosure rules need (see disclosure_view): a change of level changes the
    # facts, so no answer built under the old level is served again.
    dataset_kind: DatasetKind
    dataset_disclosure: Disclosure | None
    phase_disclosure: Disclosure | None


class AlgorithmFacts(NamedTuple):
    """An algorithm's owner and visibility, and a stamp of its evaluations (a new one, a
    finish, a publish or hide changes it: the sums are weighted by id so that two changes
    rarely cancel out)."""

    owner_id: int
    visibility: Visibility
    name: str
    evaluations: int
    last_id: int | None
    last_finished_at: datetime | None
    published_ids: int | None
    done_ids: int | None


def _evaluation_facts(session: Session, evaluation_id: int) -> EvaluationFacts | None:
    row = session.execute(
        select(
            Algorithm.owner_id,
            Algorithm.visibility,
            Evaluation.published,
            Evaluation.kind,
            Evaluation.status,
            Evaluation.finished_at,
            Evaluation.recordings_done,
            DatasetResult.id,
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
        .where(Evaluation.id == evaluation_id)
    ).first()
    return EvaluationFacts(*row) if row is not None else None


def _algorithm_facts(session: Session, algorithm_id: int) -> AlgorithmFacts | None:
    row = session.execute(
        select(
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
        .where(Algorithm.id == algorithm_id)
        .group_by(Algorithm.id, Algorithm.owner_id, Algorithm.visibility, Algorithm.name)
    ).first()
    return AlgorithmFacts(*row) if row is not None else None


evaluation_answers: StampedCache[int, EvaluationFacts] = StampedCache(
    "evaluation results",
    _evaluation_facts,
    ttl_s=lambda: get_settings().results_cache_s,
)
algorithm_answers: StampedCache[int, AlgorithmFacts] = StampedCache(
    "algorithm results",
    _algorithm_facts,
    ttl_s=lambda: get_settings().results_cache_s,
)


def clear_cache() -> None:
    evaluation_answers.clear()
    algorithm_answers.clear()


def authorize_evaluation(viewer: User | None, evaluation_id: int, facts: EvaluationFacts) -> None:
    """:func:`policy.can_view_evaluation` on the facts; the same not-found error."""
    if not policy.may_view_results(
        viewer,
        owner_id=facts.owner_id,
        public=facts.visibility == Visibility.PUBLIC,
        published=facts.published,
        smoke_test=facts.kind == EvaluationKind.SMOKE_TEST,
    ):
        raise NotFound(f"evaluation {evaluation_id} does not exist")


def disclosure_view(viewer: User | None, facts: EvaluationFacts) -> disclosure.View:
    """:func:`disclosure.view_of` on the facts of an evaluation."""
    return disclosure.View(
        admin=policy.is_admin(viewer),
        owner=viewer is not None and viewer.id == facts.owner_id,
        held_out=facts.dataset_kind != DatasetKind.PUBLIC_SAMPLE,
        level=disclosure.level_of(
            facts.dataset_kind, facts.dataset_disclosure, facts.phase_disclosure
        ),
        signed_in=viewer is not None,
    )


def authorize_subjects(viewer: User | None, evaluation_id: int, facts: EvaluationFacts) -> None:
    """:func:`authorize_evaluation`, and the per-subject figures must be disclosed."""
    authorize_evaluation(viewer, evaluation_id, facts)
    disclosure_view(viewer, facts).require_subjects(evaluation_id)


def authorize_algorithm(viewer: User | None, algorithm_id: int, facts: AlgorithmFacts) -> None:
    """:func:`policy.can_view_algorithm` on the facts; the same not-found error."""
    if not policy.may_view_algorithm(
        viewer, owner_id=facts.owner_id, public=facts.visibility == Visibility.PUBLIC
    ):
        raise NotFound(f"algorithm {algorithm_id} does not exist")


def evaluation_answer(
    session: Session,
    evaluation_id: int,
    *,
    viewer: User | None,
    variant: Hashable,
    build: Callable[[], bytes],
    authorize: Callable[[User | None, int, EvaluationFacts], None] = authorize_evaluation,
) -> Answer:
    """An answer about one evaluation, shared by every viewer who sees the same: admins,
    the owner, everyone else (what differs is in :mod:`szbench.results.disclosure`)."""
    facts = evaluation_answers.facts(session, evaluation_id)
    if facts is None:
        raise NotFound(f"evaluation {evaluation_id} does not exist")
    authorize(viewer, evaluation_id, facts)
    view = disclosure_view(viewer, facts)
    return evaluation_answers.answer(evaluation_id, facts, (variant, view.admin, view.owner), build)


def algorithm_answer(
    session: Session,
    algorithm_id: int,
    *,
    viewer: User | None,
    variant: Hashable,
    build: Callable[[], bytes],
) -> Answer:
    """An answer about one algorithm's evaluations: what a viewer sees of them depends on
    who they are, so each viewer has their own."""
    facts = algorithm_answers.facts(session, algorithm_id)
    if facts is None:
        raise NotFound(f"algorithm {algorithm_id} does not exist")
    authorize_algorithm(viewer, algorithm_id, facts)
    return algorithm_answers.answer(algorithm_id, facts, (viewer_key(viewer), variant), build)
