"""Teams: create one, add and remove members, put algorithms in it, delete it.

What membership allows is decided in :mod:`szbench.auth.policy` (:func:`~szbench.auth.policy.
acts_for`: a member acts as an owner of the team's algorithms; :func:`~szbench.auth.policy.
can_manage_team`: a team's owners manage it); what it costs in :mod:`szbench.quotas.service`.

Invitations are the simplest honest design: an owner adds an existing account by its e-mail
address, and where this server sends e-mail the account must have confirmed that address
(docs/web-ui.md, "Teams"). Nothing is sent to the person added; they see the team on their
teams page and may leave it at any time.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, selectinload

from szbench import changes, names
from szbench.auth import policy
from szbench.errors import BadRequest, Conflict, Forbidden, NotFound
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Evaluation,
    Team,
    TeamMember,
    TeamRole,
    User,
)
from szbench.quotas import service as quotas

NAME_MAX = 100


def _clean_name(name: str) -> str:
    """The name as stored and shown (:func:`szbench.names.cleaned`: no invisible or
    bidirectional characters), or :class:`BadRequest`."""
    name = names.cleaned(name)
    if not names.skeleton(name):
        raise BadRequest("name: a team needs a name with a letter or a digit in it")
    if len(name) > NAME_MAX:
        raise BadRequest(f"name: at most {NAME_MAX} characters")
    return name


def create_team(session: Session, *, owner: User, name: str) -> Team:
    """A new team with ``owner`` as its first owner.

    Its name may not read as the name of a team ``owner`` is in already
    (:func:`szbench.names.reads_as`: case, compatibility forms, invisible characters,
    look-alike letters), so that nobody has two teams they cannot tell apart. Names are not
    unique across the platform: a refusal because some other team, which ``owner`` cannot
    see, has the name would tell them that it exists (and who is behind a name)."""
    name = _clean_name(name)
    quotas.lock_user(session, owner)  # one decision at a time per user (two tabs, two calls)
    for mine in teams_of(session, owner):
        if names.reads_as(name, mine.name):
            raise Conflict(
                f"name: you are in a team called {mine.name!r} already, which {name!r} reads "
                "as; choose a name you can tell apart"
            )
    team = Team(name=name)
    team.members.append(TeamMember(user_id=owner.id, role=TeamRole.OWNER))
    session.add(team)
    session.flush()
    session.expire(owner, ["memberships"])
    return team


def get_team(session: Session, team_id: int, *, viewer: User) -> Team:
    """A team its members (and admins) see; to anyone else it does not exist."""
    team = session.get(
        Team, team_id, options=[selectinload(Team.members).selectinload(TeamMember.user)]
    )
    if team is None or not policy.can_view_team(viewer, team):
        raise NotFound(f"team {team_id} does not exist")
    return team


def teams_of(session: Session, user: User) -> list[Team]:
    """The teams ``user`` is a member of, by name."""
    return list(
        session.scalars(
            select(Team)
            .join(TeamMember, TeamMember.team_id == Team.id)
            .where(TeamMember.user_id == user.id)
            .order_by(Team.name)
            .options(selectinload(Team.members).selectinload(TeamMember.user))
        ).all()
    )


def list_teams(session: Session, *, limit: int, offset: int) -> tuple[list[Team], int]:
    """Every team (admins), by name."""
    total = session.scalar(select(func.count(Team.id))) or 0
    rows = session.scalars(
        select(Team)
        .order_by(Team.name)
        .limit(limit)
        .offset(offset)
        .options(selectinload(Team.members).selectinload(TeamMember.user))
    ).all()
    return list(rows), total


def algorithms_of(session: Session, team: Team) -> list[Algorithm]:
    return list(
        session.scalars(
            select(Algorithm).where(Algorithm.team_id == team.id).order_by(Algorithm.name)
        ).all()
    )


def algorithm_counts(session: Session) -> dict[int, int]:
    """How many algorithms each team has (teams without any are absent)."""
    rows = session.execute(
        select(Algorithm.team_id, func.count(Algorithm.id))
        .where(Algorithm.team_id.is_not(None))
        .group_by(Algorithm.team_id)
    ).all()
    return {team_id: n for team_id, n in rows if team_id is not None}


def _membership(team: Team, user_id: int) -> TeamMember:
    for member in team.members:
        if member.user_id == user_id:
            return member
    raise NotFound(f"user {user_id} is not a member of team {team.name!r}")


def _access_changed(session: Session, team: Team, user_ids: list[int]) -> None:
    """Who acts for the team's algorithms changed: the result caches that answer per viewer
    key on the algorithms' counters, and the users' loaded memberships are stale."""
    changes.algorithm_changed_many(session, [a.id for a in algorithms_of(session, team)])
    for user_id in user_ids:
        user = session.get(User, user_id)
        if user is not None:
            session.expire(user, ["memberships"])


def _check_manages(by: User, team: Team) -> None:
    if not policy.can_manage_team(by, team):
        raise Forbidden(f"team {team.id}: only its owners manage it")


def add_member(
    session: Session, team: Team, *, by: User, email: str, role: TeamRole = TeamRole.MEMBER
) -> TeamMember:
    """Add the account with this e-mail address (active, and confirmed where this server
    sends e-mail); ``by`` manages the team."""
    _check_manages(by, team)
    address = email.strip().lower()
    user = session.scalar(select(User).where(User.email == address))
    if user is None or not user.is_active or policy.needs_verification(user):
        raise NotFound(
            f"email: no active account with a confirmed address {address!r} (they sign up "
            "first, then you add them)"
        )
    if any(m.user_id == user.id for m in team.members):
        raise Conflict(f"email: {address} is already a member of team {team.name!r}")
    member = TeamMember(user_id=user.id, role=role)
    team.members.append(member)
    session.flush()
    _access_changed(session, team, [user.id])
    return member


def _keep_an_owner(team: Team, leaving: TeamMember) -> None:
    owners = [m for m in team.members if m.role == TeamRole.OWNER]
    if owners == [leaving] and len(team.members) > 1:
        raise Conflict(
            f"team {team.name!r} needs an owner: make another member an owner first "
            "(or delete the team)"
        )


def set_role(session: Session, team: Team, user_id: int, role: TeamRole, *, by: User) -> TeamMember:
    """Make a member an owner or a plain member (the team keeps at least one owner); ``by``
    manages the team."""
    _check_manages(by, team)
    member = _membership(team, user_id)
    if role != TeamRole.OWNER and member.role == TeamRole.OWNER:
        owners = [m for m in team.members if m.role == TeamRole.OWNER]
        if owners == [member]:
            raise Conflict(f"team {team.name!r} needs an owner: make another member an owner first")
    member.role = role
    session.flush()
    return member


def remove_member(session: Session, team: Team, user_id: int, *, by: User) -> None:
    """Remove a member: an owner removes anyone, a member removes themselves (leaves).

    What they started while a member stays charged to the team (the rows record it); the
    team's algorithms they own stay in the team (their owner still edits them).
    """
    member = _membership(team, user_id)
    if user_id != by.id and not policy.can_manage_team(by, team):
        raise Forbidden(f"team {team.id}: only its owners remove other members")
    _keep_an_owner(team, member)
    team.members.remove(member)
    session.flush()
    if not team.members:
        _delete(session, team)
        return
    _access_changed(session, team, [user_id])


def _delete(session: Session, team: Team) -> None:
    algorithm_ids = [a.id for a in algorithms_of(session, team)]
    # Not left to the foreign keys' ON DELETE: SQLite enforces them only where switched on.
    for table in (Algorithm, AlgorithmVersion, Evaluation):
        session.execute(
            update(table)
            .where(table.team_id == team.id)
            .values(team_id=None)
            .execution_options(synchronize_session=False)
        )
    changes.algorithm_changed_many(session, algorithm_ids)
    user_ids = [m.user_id for m in team.members]
    session.delete(team)
    session.flush()
    for user_id in user_ids:
        user = session.get(User, user_id)
        if user is not None:
            session.expire(user, ["memberships"])
    for algorithm_id in algorithm_ids:
        algorithm = session.get(Algorithm, algorithm_id)
        if algorithm is not None:
            session.expire(algorithm, ["team_id", "team"])


def delete_team(session: Session, team: Team, *, by: User) -> None:
    """Delete the team (``by`` manages it): its algorithms stay with their owners, out of any
    team; what its members started stays charged to each of them."""
    _check_manages(by, team)
    _delete(session, team)


def set_algorithm_team(
    session: Session, algorithm: Algorithm, team: Team | None, *, by: User
) -> Algorithm:
    """Put ``algorithm`` in ``team`` (None: out of its team). Its owner does, being a
    member of that team (admins: any). Work already charged stays charged where it was."""
    if not policy.can_edit_algorithm(by, algorithm):
        raise Forbidden(f"algorithm {algorithm.id}: only its owner moves it between teams")
    if team is not None and not (policy.is_admin(by) or team.id in policy.team_ids(by)):
        raise Forbidden(f"team {team.id}: only its members put algorithms in it")
    algorithm.team_id = team.id if team is not None else None
    session.flush()
    session.expire(algorithm, ["team"])
    changes.algorithm_changed(session, algorithm.id)
    return algorithm
