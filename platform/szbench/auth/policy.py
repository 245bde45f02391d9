"""Who may see what. Pure functions on models plus the matching SQL filters.

The rules:
- admins see everything, when their token has the ``admin`` scope: an admin's token without
  it (and so the user object resolved from it, see ``User.admin_scope``) sees what a
  researcher sees;
- an algorithm's owner and every member of its team act for it (:func:`acts_for`, the one
  place where that is decided): they see it, its versions and their evaluations, and submit
  and evaluate versions (charged to the team as well as to themselves, see
  :mod:`szbench.quotas.service`); editing the algorithm itself (its metadata, visibility,
  team, withdrawal) stays with its owner (:func:`can_edit_algorithm`);
- an algorithm is seen by everyone when public, else by those who act for it;
- an evaluation's results are seen by those who act for its algorithm; by others only when the
  algorithm is public, the evaluation is published (hidden phases stay unpublished until an
  admin publishes them) and it is not a smoke test;
- held-out datasets' recordings and annotations are never served to non-admins; a public
  sample's are served to anyone signed in (what a viewer learns of an evaluation, the
  detections made on the data included, is :func:`szbench.disclosure.decision.decide`'s);
- a team is seen by its members; its owners (and admins) manage it (:func:`can_manage_team`);
- admin logs of runs are for admins only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, false, or_, select, true

from szbench.auth import mail
from szbench.models import (
    Algorithm,
    Dataset,
    DatasetKind,
    Evaluation,
    EvaluationKind,
    Role,
    Team,
    TeamMember,
    TeamRole,
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


def team_ids(user: User | None) -> frozenset[int]:
    """The teams ``user`` is a member of (any role)."""
    if user is None:
        return frozenset()
    return frozenset(m.team_id for m in user.memberships)


def acts_for(user: User | None, *, owner_id: int | None, team_id: int | None) -> bool:
    """Does ``user`` act as the owner of the algorithm with this owner and team? Its owner
    and its team's members do (admins are not owners: they see everything anyway)."""
    if user is None:
        return False
    return user.id == owner_id or (team_id is not None and team_id in team_ids(user))


def owns(user: User | None, algorithm: Algorithm) -> bool:
    """:func:`acts_for` on an algorithm."""
    return acts_for(user, owner_id=algorithm.owner_id, team_id=algorithm.team_id)


def can_view_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    return may_view_algorithm(
        user,
        owner_id=algorithm.owner_id,
        team_id=algorithm.team_id,
        public=algorithm.visibility == Visibility.PUBLIC,
    )


def may_view_algorithm(
    user: User | None, *, owner_id: int, team_id: int | None, public: bool
) -> bool:
    """:func:`can_view_algorithm` on plain facts (the result caches keep only those)."""
    return public or is_admin(user) or acts_for(user, owner_id=owner_id, team_id=team_id)


def can_manage_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    """Submit and evaluate its versions, re-run, re-score and cancel its evaluations."""
    return owns(user, algorithm) or is_admin(user)


def can_edit_algorithm(user: User | None, algorithm: Algorithm) -> bool:
    """Change the algorithm itself (metadata, visibility, team, withdrawal): its owner's."""
    return (user is not None and algorithm.owner_id == user.id) or is_admin(user)


def can_view_evaluation(user: User | None, evaluation: Evaluation) -> bool:
    algorithm = evaluation.algorithm_version.algorithm
    return may_view_results(
        user,
        owner_id=algorithm.owner_id,
        team_id=algorithm.team_id,
        public=algorithm.visibility == Visibility.PUBLIC,
        published=evaluation.published,
        smoke_test=evaluation.kind == EvaluationKind.SMOKE_TEST,
    )


def may_view_results(
    user: User | None,
    *,
    owner_id: int,
    team_id: int | None,
    public: bool,
    published: bool,
    smoke_test: bool,
) -> bool:
    """:func:`can_view_evaluation` on plain facts (the result caches keep only those)."""
    if is_admin(user) or acts_for(user, owner_id=owner_id, team_id=team_id):
        return True
    return public and published and not smoke_test


def can_view_team(user: User | None, team: Team) -> bool:
    """A team is seen by its members (its name, members and algorithms) and admins."""
    return is_admin(user) or team.id in team_ids(user)


def can_manage_team(user: User | None, team: Team) -> bool:
    """Add and remove members, change their roles, delete the team: its owners, admins."""
    if is_admin(user):
        return True
    return user is not None and any(
        m.user_id == user.id and m.role == TeamRole.OWNER for m in team.members
    )


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
    return or_(public, algorithms_acted_for(user)) if user else public


def algorithms_acted_for(user: User) -> Any:
    """SQL filter on :class:`Algorithm` matching :func:`acts_for`."""
    teams = sorted(team_ids(user))
    mine = Algorithm.owner_id == user.id
    return or_(mine, Algorithm.team_id.in_(teams)) if teams else mine


def users_acting_for(algorithms: Any) -> Any:
    """The ids of the users who act for the algorithms the SQL filter ``algorithms`` selects
    (:func:`acts_for` the other way round: their owners and their teams' members), e.g. to
    tell them of an evaluation."""
    owners = select(Algorithm.owner_id).where(algorithms)
    members = (
        select(TeamMember.user_id)
        .join(Algorithm, Algorithm.team_id == TeamMember.team_id)
        .where(algorithms)
    )
    return owners.union(members)


def visible_evaluations(user: User | None) -> Any:
    """SQL filter on :class:`Evaluation` joined to :class:`Algorithm` (via its version)."""
    if is_admin(user):
        return true()
    shared = and_(
        Algorithm.visibility == Visibility.PUBLIC,
        Evaluation.published.is_(True),
        Evaluation.kind != EvaluationKind.SMOKE_TEST,
    )
    mine = algorithms_acted_for(user) if user else false()
    return or_(shared, mine)
