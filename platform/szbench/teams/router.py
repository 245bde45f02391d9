"""``/api/v1/teams``: teams, their members and their algorithms (docs/api.md, "Teams")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, Page, PageDep
from szbench.auth.dependencies import Principal, SignedIn, Submitter
from szbench.errors import Forbidden, NotFound
from szbench.models import Team, TeamMember, User
from szbench.quotas import service as quotas
from szbench.teams import service
from szbench.teams.schemas import (
    MemberAdd,
    MemberOut,
    MemberUpdate,
    TeamAlgorithmOut,
    TeamCreate,
    TeamOut,
    TeamSummary,
)

router = APIRouter(prefix="/teams", tags=["teams"], responses=ERROR_RESPONSES)


def team_out(session: SessionDep, team: Team, caller: User) -> TeamOut:
    found = [
        TeamAlgorithmOut(id=a.id, name=a.name, title=a.title, owner_id=a.owner_id)
        for a in service.algorithms_of(session, team)
    ]
    return TeamOut.full(team, caller.id, found, quotas.team_quotas(session, team))


@router.get("", response_model=Page[TeamSummary])
def list_teams(
    session: SessionDep,
    caller: SignedIn,
    page: PageDep,
    every: Annotated[bool, Query(alias="all", description="Every team (admins only).")] = False,
) -> Page[TeamSummary]:
    """The caller's teams; ``all=true``: every team (admins only)."""
    assert caller.user is not None
    if every:
        if not caller.is_admin:
            raise Forbidden("all: every team is listed to admins only")
        rows, total = service.list_teams(session, limit=page.limit, offset=page.offset)
    else:
        mine = service.teams_of(session, caller.user)
        rows, total = mine[page.offset : page.offset + page.limit], len(mine)
    return Page(
        items=[TeamSummary.of(t, caller.user.id) for t in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=TeamOut, status_code=status.HTTP_201_CREATED)
def create_team(body: TeamCreate, session: SessionDep, caller: Submitter) -> TeamOut:
    """Create a team; the caller is its first owner."""
    assert caller.user is not None
    team = service.create_team(session, owner=caller.user, name=body.name)
    return team_out(session, service.get_team(session, team.id, viewer=caller.user), caller.user)


def _caller_team(session: SessionDep, team_id: int, caller: Principal) -> tuple[Team, User]:
    """The team as the caller may see it (404 otherwise), and the caller's account."""
    user = caller.user
    assert user is not None
    return service.get_team(session, team_id, viewer=user), user


def _member_out(m: TeamMember) -> MemberOut:
    return MemberOut(
        user_id=m.user_id, name=m.user.name, email=m.user.email, role=m.role, added_at=m.added_at
    )


def _no_content() -> Response:
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{team_id}", response_model=TeamOut)
def get_team(team_id: IdPath, session: SessionDep, caller: SignedIn) -> TeamOut:
    """One team: its members, its algorithms and what it may still start (members, admins)."""
    team, user = _caller_team(session, team_id, caller)
    return team_out(session, team, user)


@router.delete("/{team_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_team(team_id: IdPath, session: SessionDep, caller: SignedIn) -> Response:
    """Delete a team (its owners, admins); its algorithms stay with their owners."""
    team, user = _caller_team(session, team_id, caller)
    service.delete_team(session, team, by=user)
    return _no_content()


@router.post("/{team_id}/members", response_model=MemberOut, status_code=status.HTTP_201_CREATED)
def add_member(
    team_id: IdPath, body: MemberAdd, session: SessionDep, caller: SignedIn
) -> MemberOut:
    """Add an existing account by its e-mail address (the team's owners, admins)."""
    team, user = _caller_team(session, team_id, caller)
    return _member_out(service.add_member(session, team, by=user, email=body.email, role=body.role))


@router.patch("/{team_id}/members/{user_id}", response_model=MemberOut)
def update_member(
    team_id: IdPath, user_id: IdPath, body: MemberUpdate, session: SessionDep, caller: SignedIn
) -> MemberOut:
    """Make a member an owner or a plain member (the team's owners, admins)."""
    team, user = _caller_team(session, team_id, caller)
    return _member_out(service.set_role(session, team, user_id, body.role, by=user))


@router.delete("/{team_id}/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_member(
    team_id: IdPath, user_id: IdPath, session: SessionDep, caller: SignedIn
) -> Response:
    """Remove a member (owners: anyone; a member: themselves). Their past work stays
    charged to the team."""
    team, user = _caller_team(session, team_id, caller)
    service.remove_member(session, team, user_id, by=user)
    return _no_content()


@router.put("/{team_id}/algorithms/{algorithm_id}", status_code=status.HTTP_204_NO_CONTENT)
def add_algorithm(
    team_id: IdPath, algorithm_id: IdPath, session: SessionDep, caller: SignedIn
) -> Response:
    """Put one of the caller's algorithms in the team (its owner, a member of the team)."""
    team, user = _caller_team(session, team_id, caller)
    algorithm = algorithms.get_editable_algorithm(session, algorithm_id, user=user)
    service.set_algorithm_team(session, algorithm, team, by=user)
    return _no_content()


@router.delete("/{team_id}/algorithms/{algorithm_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_algorithm(
    team_id: IdPath, algorithm_id: IdPath, session: SessionDep, caller: SignedIn
) -> Response:
    """Take an algorithm out of the team (its owner); work already charged stays charged."""
    team, user = _caller_team(session, team_id, caller)
    algorithm = algorithms.get_editable_algorithm(session, algorithm_id, user=user)
    if algorithm.team_id != team.id:
        raise NotFound(f"algorithm {algorithm_id} is not in team {team.name!r}")
    service.set_algorithm_team(session, algorithm, None, by=user)
    return _no_content()
