"""Cached answers of the hot result reads: an evaluation's result and subjects, an
algorithm's results side by side (see :mod:`szbench.stamped_cache`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.config import get_settings
from szbench.disclosure import decision
from szbench.disclosure import facts as rule_facts
from szbench.errors import NotFound
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    Phase,
    PhaseDatasetVersion,
    User,
    Visibility,
)
from szbench.stamped_cache import Answer, StampedCache, viewer_key


class EvaluationFacts(NamedTuple):
    """Who may see an evaluation, what decides what they learn of it, and the change
    counters of what its answers show (:mod:`szbench.changes`)."""

    owner_id: int
    team_id: int | None
    visibility: Visibility
    published: bool
    kind: EvaluationKind
    disclosure: rule_facts.Facts
    # The evaluation's, its algorithm's and its dataset version's counters: a result, a
    # publish, a rule of the dataset or of the governing phase bumps one of them.
    revisions: tuple[int, int, int]


class AlgorithmFacts(NamedTuple):
    """An algorithm's owner and visibility, and the change counters of what its results
    show: its own, the sum of its evaluations' dataset versions' (counters only grow, so
    the sum moves with any of them), and whether each of its phases is closed now (a
    closing date passes without a write)."""

    owner_id: int
    team_id: int | None
    visibility: Visibility
    name: str
    revision: int
    dataset_revisions: int
    phases_closed: tuple[tuple[int, bool], ...]


def _evaluation_facts(session: Session, evaluation_id: int) -> EvaluationFacts | None:
    query = (
        select(
            Algorithm.owner_id,
            Algorithm.team_id,
            Algorithm.visibility,
            Evaluation.published,
            Evaluation.kind,
            Dataset.kind,
            Dataset.disclosure,
            *rule_facts.PHASE_COLUMNS,
            Evaluation.dataset_version_id,
            DatasetResult.subjects,
            Evaluation.revision,
            Algorithm.revision,
            DatasetVersion.revision,
        )
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .join(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
        .outerjoin(DatasetResult, DatasetResult.evaluation_id == Evaluation.id)
        .where(Evaluation.id == evaluation_id)
    )
    row = session.execute(rule_facts.join_own_phase(query)).first()
    if row is None:
        return None
    owner_id, team_id, visibility, published, kind, dataset_kind, level, *rest = row
    phase, (dv_id, subjects, *revisions) = tuple(rest[:6]), rest[6:]
    facts = rule_facts.facts_from_row(
        dataset_kind,
        level,
        phase,
        data=rule_facts.data_phases(session, [dv_id])[dv_id],
        subjects=subjects,
        owner_id=owner_id,
        team_id=team_id,
    )
    evaluation_rev, algorithm_rev, dataset_rev = revisions
    return EvaluationFacts(
        owner_id,
        team_id,
        visibility,
        published,
        kind,
        facts,
        (evaluation_rev, algorithm_rev, dataset_rev),
    )


def _algorithm_facts(session: Session, algorithm_id: int) -> AlgorithmFacts | None:
    row = session.execute(
        select(
            Algorithm.owner_id,
            Algorithm.team_id,
            Algorithm.visibility,
            Algorithm.name,
            Algorithm.revision,
            func.coalesce(func.sum(DatasetVersion.revision), 0),
        )
        .outerjoin(AlgorithmVersion, AlgorithmVersion.algorithm_id == Algorithm.id)
        .outerjoin(Evaluation, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .outerjoin(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
        .where(Algorithm.id == algorithm_id)
        .group_by(
            Algorithm.id,
            Algorithm.owner_id,
            Algorithm.team_id,
            Algorithm.visibility,
            Algorithm.name,
        )
    ).first()
    if row is None:
        return None
    # Its versions' own phases and every phase naming data it was evaluated on: their rules
    # decide what its results show.
    evaluated_on = (
        select(Evaluation.dataset_version_id)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .where(AlgorithmVersion.algorithm_id == algorithm_id)
    )
    phases = session.execute(
        select(Phase.id, Phase.is_open, Phase.closes_at)
        .where(
            or_(
                Phase.id.in_(
                    select(AlgorithmVersion.phase_id).where(
                        AlgorithmVersion.algorithm_id == algorithm_id
                    )
                ),
                Phase.id.in_(
                    select(PhaseDatasetVersion.phase_id).where(
                        PhaseDatasetVersion.dataset_version_id.in_(evaluated_on)
                    )
                ),
            )
        )
        .order_by(Phase.id)
    ).all()
    closed = tuple(
        (pid, rule_facts.phase_closed(is_open, closes_at)) for pid, is_open, closes_at in phases
    )
    return AlgorithmFacts(*row, phases_closed=closed)


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
        team_id=facts.team_id,
        public=facts.visibility == Visibility.PUBLIC,
        published=facts.published,
        smoke_test=facts.kind == EvaluationKind.SMOKE_TEST,
    ):
        raise NotFound(f"evaluation {evaluation_id} does not exist")


def authorize_subjects(viewer: User | None, evaluation_id: int, facts: EvaluationFacts) -> None:
    """:func:`authorize_evaluation`, and the per-subject figures must be disclosed."""
    authorize_evaluation(viewer, evaluation_id, facts)
    decision.decide(viewer, facts.disclosure).require_subjects(evaluation_id)


def authorize_algorithm(viewer: User | None, algorithm_id: int, facts: AlgorithmFacts) -> None:
    """:func:`policy.can_view_algorithm` on the facts; the same not-found error."""
    if not policy.may_view_algorithm(
        viewer,
        owner_id=facts.owner_id,
        team_id=facts.team_id,
        public=facts.visibility == Visibility.PUBLIC,
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
    """An answer about one evaluation, shared by every viewer with the same
    :class:`~szbench.disclosure.decision.View` of it (admins, the owner, everyone else)."""
    facts = evaluation_answers.facts(session, evaluation_id)
    if facts is None:
        raise NotFound(f"evaluation {evaluation_id} does not exist")
    authorize(viewer, evaluation_id, facts)
    view = decision.decide(viewer, facts.disclosure)
    return evaluation_answers.answer(evaluation_id, facts, (variant, view.shape), build)


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
