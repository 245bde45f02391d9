"""The web session cookie: a signed wrapper around an ordinary API token.

The web UI signs a user in with :func:`login_with_password` (it checks the password, makes
a login token like ``POST /api/v1/auth/login`` does, and sets the cookie on the response)
and out with :func:`logout` (revokes that token and clears the cookie). Every route's auth
dependency (:mod:`szbench.auth.dependencies`) accepts the cookie as well as an
``Authorization: Bearer`` header, so pages and the API share one permission model.

The cookie is ``HttpOnly`` and ``SameSite=Lax`` (``Secure`` when
``SZBENCH_SESSION_COOKIE_SECURE`` is set), signed with ``SZBENCH_SECRET_KEY`` (or a random
key kept in ``data_dir/secret_key``) and expires with its token. Because browsers do not
send a Lax cookie on cross-site POSTs, and :mod:`szbench.auth.csrf` refuses every
state-changing request without a bearer token whose ``Origin`` (or, without one, ``Referer``)
is another site or ``null``, the API needs no separate CSRF token (web forms carry one too).

Example, in a page router::

    @router.post("/login")
    def login_page(
        request: Request, session: SessionDep, email: str = Form(), password: str = Form()
    ):
        response = RedirectResponse("/", status_code=303)
        login_with_password(
            session, response, email=email, password=password, client=client_address(request)
        )
        return response
"""

from __future__ import annotations

import os
import secrets
from functools import lru_cache

from fastapi import Request, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy.orm import Session

from szbench.auth import service
from szbench.config import get_settings
from szbench.models import User

SESSION_COOKIE = "szbench_session"

_SALT = "szbench-session"
# The name of every web sign-in's token: the account page lists them apart from API tokens.
WEB_SESSION_NAME = "web session"
_SESSION_TOKEN_NAME = WEB_SESSION_NAME


@lru_cache
def _key_for(explicit: str, data_dir: str) -> str:
    if explicit:
        return explicit
    path = os.path.join(data_dir, "secret_key")
    try:
        with open(path, encoding="ascii") as fh:
            key = fh.read().strip()
            if key:
                return key
    except FileNotFoundError:
        pass
    os.makedirs(data_dir, exist_ok=True)
    key = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key)
    return key


def secret_key() -> str:
    settings = get_settings()
    return _key_for(settings.secret_key, str(settings.data_dir))


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key(), salt=_SALT)


def set_session_cookie(response: Response, token_secret: str) -> None:
    """Put ``token_secret`` in the signed session cookie on ``response``."""
    settings = get_settings()
    response.set_cookie(
        SESSION_COOKIE,
        _serializer().dumps(token_secret),
        max_age=settings.login_token_ttl_s,
        httponly=True,
        samesite="lax",
        secure=settings.session_cookie_secure,
        path="/",
    )


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/")


def read_session_cookie(request: Request) -> str | None:
    """The token secret in the request's session cookie, or None (absent, forged, too old)."""
    settings = get_settings()
    raw = request.cookies.get(SESSION_COOKIE)
    if not raw:
        return None
    try:
        value = _serializer().loads(raw, max_age=settings.login_token_ttl_s)
    except BadSignature:
        return None
    return value if isinstance(value, str) else None


def client_address(request: Request) -> str | None:
    """The caller's address for the sign-in and sign-up throttles, as
    :mod:`szbench.api.proxies` settled it (what a trusted proxy appended to
    ``X-Forwarded-For``, else the peer); None when the server does not know it."""
    return request.client.host if request.client else None


def login_with_password(
    session: Session,
    response: Response,
    *,
    email: str,
    password: str,
    client: str | None = None,
) -> User:
    """Check the password (throttled per account and per ``client`` address), create a
    login token and set the session cookie; the user."""
    token, secret = service.login(
        session, email=email, password=password, client=client, name=_SESSION_TOKEN_NAME
    )
    set_session_cookie(response, secret)
    return token.user


def start_session(session: Session, response: Response, user: User) -> None:
    """Sign ``user`` in without a password check: just after sign-up or a password change."""
    _, secret = service.issue_login_token(session, user, name=_SESSION_TOKEN_NAME)
    set_session_cookie(response, secret)


def logout(session: Session, request: Request, response: Response) -> None:
    """Revoke the cookie's token (if any) and clear the cookie."""
    secret = read_session_cookie(request)
    if secret:
        token = service.resolve_token(session, secret)
        if token is not None:
            service.revoke_token(session, token)
    clear_session_cookie(response)
