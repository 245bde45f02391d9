"""Who is calling, and may they call this route?

Every route declares one of :data:`Anyone`, :data:`SignedIn`, :data:`Submitter`,
:data:`AdminOnly` or :data:`WorkerOnly` (the recording fetch of workers on other hosts).
Each resolves the caller from ``Authorization: Bearer <token>`` or the web session cookie,
then checks the role and the token's scope (``read`` for GET/HEAD, ``write`` for changes,
``admin`` on admin routes, ``worker`` alone on the worker's). Ownership and visibility of
the objects a route touches are checked by the services through :mod:`szbench.auth.policy`.
Cross-site state changes are refused app-wide before any of this (:mod:`szbench.auth.csrf`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from szbench.api.deps import SessionDep, SideSessionDep, get_side_session
from szbench.api.openapi import no_credentials
from szbench.auth import accounts, service
from szbench.auth.cookies import read_session_cookie
from szbench.config import get_settings
from szbench.errors import Forbidden, Unauthorized
from szbench.models import ApiToken, Role, User

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class Principal:
    """The caller: a user and the token they came with, or nobody (anonymous)."""

    user: User | None
    token: ApiToken | None = None
    via_cookie: bool = False

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.token.scopes) if self.token else frozenset()

    @property
    def is_admin(self) -> bool:
        """An admin acting as one: the role, and the token's ``admin`` scope."""
        return self.user is not None and self.user.role == Role.ADMIN and "admin" in self.scopes


def _bearer_secret(header: str) -> str | None:
    """The secret of an ``Authorization: Bearer <secret>`` header; None when malformed."""
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    return secret if scheme.lower() == "bearer" and secret else None


def _credential(request: Request) -> tuple[str, bool] | None:
    """The token secret the request carries, and whether it came in the session cookie."""
    header = request.headers.get("authorization")
    if header:
        secret = _bearer_secret(header)
        if secret is None:
            raise Unauthorized("Authorization header: expected 'Bearer <token>'")
        return secret, False
    secret = read_session_cookie(request)
    return (secret, True) if secret else None


def _principal(
    request: Request, found: tuple[ApiToken, User] | None, via_cookie: bool
) -> Principal:
    if found is not None:
        token, user = found
        _mark_admin_scope(token, user)
        principal = Principal(user=user, token=token, via_cookie=via_cookie)
    elif via_cookie:
        principal = Principal(None)  # a stale cookie must not break public pages
    else:
        raise Unauthorized("the token is invalid, expired or revoked")
    request.state.user_id = principal.user.id if principal.user else None
    if principal.user is not None:
        # Plain values for an error page's navigation: by the time it renders, the request's
        # session may have rolled back and expired the user object.
        request.state.nav = NavCaller(
            name=principal.user.name, email=principal.user.email, is_admin=principal.is_admin
        )
    return principal


@dataclass(frozen=True)
class NavCaller:
    """Who is signed in, as the site's navigation shows it."""

    name: str
    email: str
    is_admin: bool


def _mark_admin_scope(token: ApiToken, user: User) -> None:
    """Admin data needs the admin scope: the services decide on the user object alone
    (:func:`szbench.auth.policy.is_admin`), so the object this request resolved carries it."""
    user.admin_scope = "admin" in token.scopes


def _resolve(request: Request, session: Session, credential: tuple[str, bool] | None) -> Principal:
    """The caller, read from the database."""
    if credential is None:
        request.state.user_id = None
        return Principal(None)
    secret, via_cookie = credential
    token = service.resolve_token(session, secret)
    return _principal(request, (token, token.user) if token else None, via_cookie)


# Declares the bearer scheme in the OpenAPI schema (the docs page's "Authorize" button); the
# header itself is read by _credential, which also knows the session cookie.
_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="An API token (`szb_...`) from `POST /api/v1/auth/login` or `POST /api/v1/tokens`.",
)


def get_principal(
    request: Request,
    session: SessionDep,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    return _resolve(request, session, _credential(request))


def browser_principal(request: Request, session: SessionDep) -> Principal:
    """Whoever the session cookie names, or nobody: never a refusal (for pages that answer
    anyone, such as "no page here", which should still show the signed-in navigation)."""
    secret = read_session_cookie(request)
    if not secret:
        return Principal(None)
    try:
        return _resolve(request, session, (secret, True))
    except Unauthorized:
        return Principal(None)


def _check_scope(request: Request, principal: Principal, *, admin: bool = False) -> None:
    needed = "read" if request.method in _SAFE_METHODS else "write"
    if needed not in principal.scopes:
        raise Forbidden(f"this token lacks the {needed!r} scope")
    if admin and "admin" not in principal.scopes:
        raise Forbidden("this token lacks the 'admin' scope")


# The role checks below are async so that FastAPI runs them on the event loop: as plain
# functions each would cost a worker-thread round trip on every request.


async def anyone(
    request: Request,
    principal: Annotated[Principal, Depends(get_principal)],
    _anonymous: Annotated[None, Depends(no_credentials)],
) -> Principal:
    """Signed in or not (anonymous reads can be switched off with SZBENCH_ANONYMOUS_READ)."""
    if principal.user is None:
        if not get_settings().anonymous_read:
            raise Unauthorized("sign in to read this")
        return principal
    _check_scope(request, principal)
    return principal


def _require_signed_in(request: Request, principal: Principal) -> Principal:
    if principal.user is None:
        raise Unauthorized("sign in first (bearer token or session cookie)")
    _check_scope(request, principal)
    return principal


def _require_submitter(principal: Principal) -> Principal:
    assert principal.user is not None
    if principal.user.role not in (Role.ADMIN, Role.RESEARCHER):
        raise Forbidden(f"a {principal.user.role.value} account cannot submit algorithms")
    if accounts.needs_verification(principal.user):
        raise Forbidden(
            f"confirm your e-mail address first: open the link sent to {principal.user.email} "
            "(your account page sends a new one)"
        )
    return principal


async def signed_in(
    request: Request, principal: Annotated[Principal, Depends(get_principal)]
) -> Principal:
    return _require_signed_in(request, principal)


async def submitter(
    request: Request, principal: Annotated[Principal, Depends(signed_in)]
) -> Principal:
    return _require_submitter(principal)


async def admin_only(
    request: Request, principal: Annotated[Principal, Depends(signed_in)]
) -> Principal:
    assert principal.user is not None
    if principal.user.role != Role.ADMIN:
        raise Forbidden("admins only")
    _check_scope(request, principal, admin=True)
    return principal


async def worker_only(
    request: Request, principal: Annotated[Principal, Depends(get_principal)]
) -> Principal:
    """A worker host's bearer token: the ``worker`` scope (alone on its token, see
    :func:`szbench.auth.service.create_token`), held by an admin's account. Every other
    route refuses such a token (it has no ``read`` or ``write`` scope)."""
    if principal.user is None:
        raise Unauthorized("a worker token is needed (Authorization: Bearer <token>)")
    if principal.via_cookie or "worker" not in principal.scopes:
        raise Forbidden(
            "this route is for worker tokens only (szbench token create EMAIL --scopes worker)"
        )
    if principal.user.role != Role.ADMIN:
        raise Forbidden("this worker token's account is no longer an admin's")
    return principal


def submitter_outside_request_session(
    request: Request,
    session: SideSessionDep,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """:func:`submitter`, checked in a side session whose connection is released at once.

    For routes that stream for a long time (uploads): they must not hold a database
    connection, or one of the request session slots, while the bytes arrive. The route
    takes the same ``SideSessionDep`` (one dependency, so FastAPI gives both the same
    session): the caller's user object loads what it lacks (its teams) in the route's
    session. With two sessions, SQLite's one writer made a team member's submit wait for
    itself (the route's transaction held the lock the lazy load needed; issue 30.3).
    """
    principal = _resolve(request, session, _credential(request))
    principal = _require_submitter(_require_signed_in(request, principal))
    session.commit()  # the token's last-used time; ends the transaction, frees the connection
    return principal


def signed_in_outside_request_session(
    request: Request,
    session: Annotated[Session, Depends(get_side_session)],
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """:func:`signed_in`, checked in a side session whose connection is released at once,
    for routes that wait on something outside the platform (a test notification's calls)."""
    principal = _require_signed_in(request, _resolve(request, session, _credential(request)))
    session.commit()
    return principal


Anyone = Annotated[Principal, Depends(anyone)]
SignedIn = Annotated[Principal, Depends(signed_in)]
Submitter = Annotated[Principal, Depends(submitter)]
AdminOnly = Annotated[Principal, Depends(admin_only)]
WorkerOnly = Annotated[Principal, Depends(worker_only)]
StreamingSubmitter = Annotated[Principal, Depends(submitter_outside_request_session)]
SignedInOutsideSession = Annotated[Principal, Depends(signed_in_outside_request_session)]
