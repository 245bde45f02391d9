"""Team pages: the caller's teams, one team (members, algorithms, what it may still start)
and the admins' list of every team (docs/web-ui.md, "Teams")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.auth import policy
from szbench.auth.dependencies import AdminOnly, SignedIn, Submitter
from szbench.errors import BadRequest, SzbenchError
from szbench.models import Team, TeamMember, TeamRole, User
from szbench.quotas import service as quotas
from szbench.teams import service
from szbench.web import forms
from szbench.web.common import CsrfChecked, redirect, render

router = APIRouter(include_in_schema=False)

# Errors whose detail starts with one of these names are shown next to that field.
_FIELDS = ("name", "email", "confirm")


def _list_page(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    *,
    errors: dict[str, str] | None = None,
    typed: str = "",
    status_code: int = 200,
) -> Response:
    assert caller.user is not None
    mine = service.teams_of(session, caller.user)
    rows = [
        (team, next(m.role for m in team.members if m.user_id == caller.user.id)) for team in mine
    ]
    context = {"title": "Teams", "rows": rows, "errors": errors or {}, "typed": typed}
    return render(request, "teams.html", caller, context, status_code=status_code)


@router.get("/teams", response_class=HTMLResponse)
def teams_page(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's teams and a form to start one."""
    return _list_page(request, session, caller)


@router.post("/teams", response_class=HTMLResponse)
def create_team(
    request: Request,
    session: SessionDep,
    caller: Submitter,
    _csrf: CsrfChecked,
    # No length limit here: the service's is said under the field, not on an error page.
    name: Annotated[str, Form()] = "",
) -> Response:
    """Start a team; the caller is its first owner."""
    assert caller.user is not None
    try:
        team = service.create_team(session, owner=caller.user, name=name)
    except SzbenchError as exc:
        session.rollback()
        return _list_page(
            request, session, caller, errors=forms.service_errors(exc, _FIELDS), typed=name,
            status_code=exc.status_code,
        )  # fmt: skip
    return redirect(f"/teams/{team.id}", f"Team {team.name} created: add its members below.")


def _team_page(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    team_id: int,
    *,
    errors: dict[str, str] | None = None,
    typed: dict[str, Any] | None = None,
    status_code: int = 200,
) -> Response:
    user = caller.user
    assert user is not None
    team = service.get_team(session, team_id, viewer=user)
    in_team = service.algorithms_of(session, team)
    own, _ = algorithms.list_algorithms(session, viewer=user, mine=True, limit=500, offset=0)
    context = {
        "title": f"Team {team.name}",
        "team": team,
        "manages": policy.can_manage_team(user, team),
        "me": user.id,
        "algorithms": in_team,
        # The caller's own algorithms not in this team: the ones they may put in it.
        "movable": [a for a in own if policy.can_edit_algorithm(user, a) and a.team_id != team.id]
        if team.id in policy.team_ids(user)
        else [],
        "editable": {a.id for a in in_team if policy.can_edit_algorithm(user, a)},
        "quota": quotas.team_quotas(session, team),
        "roles": list(TeamRole),
        "errors": errors or {},
        "typed": typed or {},
    }
    return render(request, "team.html", caller, context, status_code=status_code)


@router.get("/teams/{team_id}", response_class=HTMLResponse)
def team_page(team_id: int, request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """One team: members, algorithms and the team's remaining held-out quota."""
    return _team_page(request, session, caller, team_id)


#: Where a team form sends the browser when it succeeds, and the message shown there.
_Redirect = tuple[str, str]


def _team_form(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    team_id: int,
    act: Callable[[Team, User], _Redirect],
    typed: dict[str, Any] | None = None,
) -> Response:
    """One form of the team page: ``act`` does the work on the team as the caller may see it
    (the services decide who may do what). A refusal shows the page again with the error
    next to its field and ``typed`` kept, so a mistyped address need not be typed again."""
    user = caller.user
    assert user is not None
    try:
        team = service.get_team(session, team_id, viewer=user)
        path, message = act(team, user)
    except SzbenchError as exc:
        session.rollback()
        return _team_page(
            request, session, caller, team_id, errors=forms.service_errors(exc, _FIELDS),
            typed=typed, status_code=exc.status_code,
        )  # fmt: skip
    return redirect(path, message)


@router.post("/teams/{team_id}/members", response_class=HTMLResponse)
def add_member(
    team_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    email: Annotated[str, Form()] = "",
    role: Annotated[str, Form(max_length=20)] = TeamRole.MEMBER.value,
) -> Response:
    """Add an existing account by its e-mail address (the team's owners)."""

    def act(team: Team, user: User) -> _Redirect:
        if len(email) > _EMAIL_MAX:
            raise BadRequest(f"email: at most {_EMAIL_MAX} characters")
        member = service.add_member(session, team, by=user, email=email, role=_role(role))
        return f"/teams/{team_id}", f"{_who(member)} is now a {member.role.value} of {team.name}."

    return _team_form(request, session, caller, team_id, act, {"email": email, "role": role})


#: The longest e-mail address (RFC 5321's limit, as the accounts' column).
_EMAIL_MAX = 320


def _role(text: str) -> TeamRole:
    try:
        return TeamRole(text)
    except ValueError:
        raise BadRequest(f"role: unknown role {text!r} (owner or member)") from None


def _who(member: TeamMember) -> str:
    return member.user.name or member.user.email


@router.post("/teams/{team_id}/members/{user_id}/role", response_class=HTMLResponse)
def set_role(
    team_id: int,
    user_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    role: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    """Make a member an owner or a plain member (the team's owners)."""

    def act(team: Team, user: User) -> _Redirect:
        member = service.set_role(session, team, user_id, _role(role), by=user)
        return f"/teams/{team_id}", f"{_who(member)} is now a {member.role.value}."

    return _team_form(request, session, caller, team_id, act)


@router.post("/teams/{team_id}/members/{user_id}/remove", response_class=HTMLResponse)
def remove_member(
    team_id: int,
    user_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
) -> Response:
    """Remove a member (owners), or leave (the member themselves)."""

    def act(team: Team, user: User) -> _Redirect:
        name = team.name
        service.remove_member(session, team, user_id, by=user)
        if user_id == user.id:
            return "/teams", f"You left {name}."
        return f"/teams/{team_id}", "Member removed; their past work stays counted."

    return _team_form(request, session, caller, team_id, act)


@router.post("/teams/{team_id}/algorithms", response_class=HTMLResponse)
def add_algorithm(
    team_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    algorithm_id: Annotated[int, Form(ge=1)],
) -> Response:
    """Put one of the caller's algorithms in the team."""

    def act(team: Team, user: User) -> _Redirect:
        algorithm = algorithms.get_editable_algorithm(session, algorithm_id, user=user)
        service.set_algorithm_team(session, algorithm, team, by=user)
        return f"/teams/{team_id}", f"{algorithm.name} is now in {team.name}."

    return _team_form(request, session, caller, team_id, act)


@router.post("/teams/{team_id}/algorithms/{algorithm_id}/remove", response_class=HTMLResponse)
def remove_algorithm(
    team_id: int,
    algorithm_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
) -> Response:
    """Take one of the caller's algorithms out of the team."""

    def act(team: Team, user: User) -> _Redirect:
        algorithm = algorithms.get_editable_algorithm(session, algorithm_id, user=user)
        if algorithm.team_id == team.id:
            service.set_algorithm_team(session, algorithm, None, by=user)
        return f"/teams/{team_id}", f"{algorithm.name} is no longer in {team.name}."

    return _team_form(request, session, caller, team_id, act)


@router.post("/teams/{team_id}/delete", response_class=HTMLResponse)
def delete_team(
    team_id: int,
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    confirm: Annotated[str, Form()] = "",
) -> Response:
    """Delete the team (its owners), once its name is typed."""

    def act(team: Team, user: User) -> _Redirect:
        name = team.name
        # Only someone who may delete it is asked for the name; anyone else gets the
        # service's refusal, not a prompt to type it.
        if policy.can_manage_team(user, team) and (
            " ".join(confirm.split()).lower() != name.lower()
        ):
            raise BadRequest(f"confirm: type the team's name, {name}, to delete it")
        service.delete_team(session, team, by=user)
        return "/teams", f"Team {name} deleted; its algorithms stay with their owners."

    return _team_form(request, session, caller, team_id, act, {"confirm": confirm})


@router.get("/admin/teams", response_class=HTMLResponse)
def admin_teams(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Every team: its owners, members and algorithms."""
    rows, total = service.list_teams(session, limit=500, offset=0)
    counts = service.algorithm_counts(session)
    context = {
        "title": "Teams",
        "teams": rows,
        "total": total,
        "algorithm_counts": counts,
        "owner": TeamRole.OWNER,
    }
    return render(request, "admin/teams.html", caller, context)
