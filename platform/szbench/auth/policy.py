"""Who may see what. Pure functions on models plus the matching SQL filters.

The rules:
- admins see everything;
- an algorithm is seen by everyone when public, else by its owner only;
- an evaluation's results are seen by the algorithm's owner; by others only when the
  algorithm is public, the evaluation is published (hidden phases stay unpublished until an
  admin publishes them) and it is not a smoke test;
- held-out datasets' recordings, annotations and the detections made on them are never
  served to non-admins; a public sample's are served to anyone signed in;
- admin logs of runs are for admins only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, false, or_, true

from szbench.models import (
    Algorithm,
    Dataset,
    DatasetKind,
    Evaluation,
    EvaluationKind,
    Role,
    User,
    Visibility,
)


def is_admin(user: User | None) -> bool:
    return user is not None and user.role == Role.ADMIN


def owns(user: User | None, algorithm: Algorithm) -> bool:
    return user is not None and algorithm.owner_id == user.id


def can_view_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    return algorithm.visibility == Visibility.PUBLIC or owns(user, algorithm) or is_admin(user)


def can_manage_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    return owns(user, algorithm) or is_admin(user)


def can_view_evaluation(user: User | None, evaluation: Evaluation) -> bool:
    algorithm = evaluation.algorithm_version.algorithm
    if is_admin(user) or owns(user, algorithm):
        return True
    return (
        algorithm.visibility == Visibility.PUBLIC
        and evaluation.published
        and evaluation.kind != EvaluationKind.SMOKE_TEST
    )


def can_read_recordings(user: User | None, dataset: Dataset) -> bool:
    """Recording files and reference annotations of ``dataset``."""
    if is_admin(user):
        return True
    return user is not None and dataset.kind == DatasetKind.PUBLIC_SAMPLE


def can_read_detections(user: User | None, evaluation: Evaluation) -> bool:
    """The algorithm's raw output TSVs: on held-out data they could carry the data out."""
    if is_admin(user):
        return True
    dataset = evaluation.dataset_version.dataset
    return owns(user, evaluation.algorithm_version.algorithm) and (
        dataset.kind == DatasetKind.PUBLIC_SAMPLE
    )


def visible_algorithms(user: User | None) -> Any:
    """SQL filter on :class:`Algorithm` matching :func:`can_view_algorithm`."""
    if is_admin(user):
        return true()
    public = Algorithm.visibility == Visibility.PUBLIC
    return or_(public, Algorithm.owner_id == user.id) if user else public


def visible_evaluations(user: User | None) -> Any:
    """SQL filter on :class:`Evaluation` joined to :class:`Algorithm` (via its version)."""
    if is_admin(user):
        return true()
    shared = and_(
        Algorithm.visibility == Visibility.PUBLIC,
        Evaluation.published.is_(True),
        Evaluation.kind != EvaluationKind.SMOKE_TEST,
    )
    mine = Algorithm.owner_id == user.id if user else false()
    return or_(shared, mine)
