"""Who may see what. Pure functions on models plus the matching SQL filters.

The rules:
- admins see everything, when their token has the ``admin`` scope: an admin's token without
  it (and so the user object resolved from it, see ``User.admin_scope``) sees what a
  researcher sees;
- an algorithm is seen by everyone when public, else by its owner only;
- an evaluation's results are seen by the algorithm's owner; by others only when the
  algorithm is public, the evaluation is published (hidden phases stay unpublished until an
  admin publishes them) and it is not a smoke test;
- held-out datasets' recordings and annotations are never served to non-admins; a public
  sample's are served to anyone signed in (what a viewer learns of an evaluation, the
  detections made on the data included, is :func:`szbench.results.disclosure.decide`'s);
- admin logs of runs are for admins only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, false, or_, true

from szbench.auth import mail
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


def needs_verification(user: User) -> bool:
    """With e-mail configured, a self-service account verifies its address before it
    submits (and before notifications are mailed to it). Accounts an admin or the CLI made
    count as verified from the start."""
    return mail.enabled() and user.email_verified_at is None and user.role != Role.ADMIN


def is_admin(user: User | None) -> bool:
    return user is not None and user.role == Role.ADMIN and user.admin_scope


def owns(user: User | None, algorithm: Algorithm) -> bool:
    return user is not None and algorithm.owner_id == user.id


def can_view_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    return may_view_algorithm(
        user, owner_id=algorithm.owner_id, public=algorithm.visibility == Visibility.PUBLIC
    )


def may_view_algorithm(user: User | None, *, owner_id: int, public: bool) -> bool:
    """:func:`can_view_algorithm` on plain facts (the result caches keep only those)."""
    return public or is_admin(user) or (user is not None and user.id == owner_id)


def can_manage_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    return owns(user, algorithm) or is_admin(user)


def can_view_evaluation(user: User | None, evaluation: Evaluation) -> bool:
    algorithm = evaluation.algorithm_version.algorithm
    return may_view_results(
        user,
        owner_id=algorithm.owner_id,
        public=algorithm.visibility == Visibility.PUBLIC,
        published=evaluation.published,
        smoke_test=evaluation.kind == EvaluationKind.SMOKE_TEST,
    )


def may_view_results(
    user: User | None, *, owner_id: int, public: bool, published: bool, smoke_test: bool
) -> bool:
    """:func:`can_view_evaluation` on plain facts (the result caches keep only those)."""
    if is_admin(user) or (user is not None and user.id == owner_id):
        return True
    return public and published and not smoke_test


def can_read_recordings(user: User | None, dataset: Dataset) -> bool:
    """Recording files and reference annotations of ``dataset``."""
    if is_admin(user):
        return True
    return user is not None and dataset.kind == DatasetKind.PUBLIC_SAMPLE


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
