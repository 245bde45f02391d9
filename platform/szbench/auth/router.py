"""``/api/v1/auth`` and ``/api/v1/tokens``: sign in, sign up, who am I, API tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, BackgroundTasks, Request, Response, status

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, Page, PageDep
from szbench.auth import accounts, mail, service
from szbench.auth.cookies import clear_session_cookie, client_address, set_session_cookie
from szbench.auth.dependencies import SignedIn
from szbench.auth.schemas import (
    LoginIn,
    LoginOut,
    PasswordChangeIn,
    PasswordResetIn,
    ResetRequested,
    ResetRequestIn,
    SignupIn,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserOut,
    VerifyIn,
)
from szbench.errors import Conflict

router = APIRouter(tags=["auth"], responses=ERROR_RESPONSES)


# Login and sign-up take no caller dependency: they are how an anonymous caller stops being
# one, so SZBENCH_ANONYMOUS_READ=false (which Anyone enforces) must not close them.
@router.post("/auth/login", response_model=LoginOut)
def login(request: Request, body: LoginIn, session: SessionDep) -> LoginOut:
    """Exchange email and password for a bearer token (expires after the login lifetime).

    Repeated failures for an account or from a client address are answered 429 with
    Retry-After until the wait (doubling with each failure) has passed."""
    token, secret = service.login(
        session, email=body.email, password=body.password, client=client_address(request)
    )
    return LoginOut(
        token=secret, expires_at=token.expires_at, user=UserOut.model_validate(token.user)
    )


@router.post("/auth/logout", status_code=status.HTTP_204_NO_CONTENT)
def logout(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """Revoke the token this request came with and clear the session cookie."""
    assert caller.token is not None
    service.revoke_token(session, caller.token)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    clear_session_cookie(response)
    return response


@router.post("/auth/signup", response_model=UserOut, status_code=status.HTTP_201_CREATED)
def signup(
    request: Request, body: SignupIn, session: SessionDep, background: BackgroundTasks
) -> UserOut:
    """Create a researcher account (when sign-up is open); with e-mail configured, a
    verification link goes to the address (submitting waits for it).

    Sign-ups from one client address are throttled: past a few, 429 with Retry-After."""
    try:
        user, message = accounts.sign_up(
            session,
            email=body.email,
            password=body.password,
            name=body.name,
            client=client_address(request),
        )
    except Conflict:
        reset = (
            "POST /api/v1/auth/password-reset/request"
            if mail.enabled()
            else "ask an admin for a reset link"
        )
        raise Conflict(
            f"email: an account with {body.email.strip().lower()} exists already: sign in "
            f"(POST /api/v1/auth/login) or reset its password ({reset})"
        ) from None
    mail.send_after(background, message)
    return UserOut.model_validate(user)


@router.post("/auth/password", response_model=LoginOut)
def change_password(
    request: Request,
    response: Response,
    body: PasswordChangeIn,
    session: SessionDep,
    caller: SignedIn,
) -> LoginOut:
    """Change the caller's password. Every token and web session of the account is revoked;
    the answer holds a new login token (also set as the session cookie for a cookie caller)."""
    assert caller.user is not None
    service.change_password(
        session,
        caller.user,
        current_password=body.current_password,
        new_password=body.new_password,
        client=client_address(request),
    )
    token, secret = service.issue_login_token(session, caller.user, name="login")
    if caller.via_cookie:
        set_session_cookie(response, secret)
    return LoginOut(
        token=secret, expires_at=token.expires_at, user=UserOut.model_validate(caller.user)
    )


@router.get("/auth/me", response_model=UserOut)
def me(caller: SignedIn) -> UserOut:
    """The signed-in user."""
    return UserOut.model_validate(caller.user)


@router.get("/tokens", response_model=Page[TokenOut])
def list_tokens(session: SessionDep, caller: SignedIn, page: PageDep) -> Page[TokenOut]:
    """The caller's API tokens (never their secrets)."""
    assert caller.user is not None
    rows, total = service.list_tokens(session, caller.user, limit=page.limit, offset=page.offset)
    return Page(
        items=[TokenOut.model_validate(t) for t in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("/tokens", response_model=TokenCreated, status_code=status.HTTP_201_CREATED)
def create_token(body: TokenIn, session: SessionDep, caller: SignedIn) -> TokenCreated:
    """Create an API token; its secret is in this response only."""
    assert caller.user is not None
    expires_at = (
        datetime.now(UTC) + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    )
    accounts.check_token_name(body.name)
    token, secret = service.create_token(
        session,
        caller.user,
        name=body.name,
        scopes=body.scopes,
        expires_at=expires_at,
        within=caller.scopes,
    )
    return TokenCreated(**TokenOut.model_validate(token).model_dump(), token=secret)


@router.delete("/tokens/{token_id}", response_model=TokenOut)
def revoke_token(token_id: IdPath, session: SessionDep, caller: SignedIn) -> TokenOut:
    """Revoke one of the caller's tokens (admins: anyone's)."""
    assert caller.user is not None
    token = service.get_token(session, token_id, viewer=caller.user)
    return TokenOut.model_validate(service.revoke_token(session, token))


@router.post("/auth/password-reset", response_model=UserOut)
def reset_password(body: PasswordResetIn, session: SessionDep) -> UserOut:
    """Set a new password with a reset link's token (admin-issued or e-mailed). The link is
    spent, and every session and API token of the account is revoked: sign in anew."""
    return UserOut.model_validate(accounts.reset_password(session, body.token, body.new_password))


@router.post(
    "/auth/password-reset/request",
    response_model=ResetRequested,
    status_code=status.HTTP_202_ACCEPTED,
)
def request_password_reset(
    body: ResetRequestIn, session: SessionDep, background: BackgroundTasks
) -> ResetRequested:
    """E-mail a reset link (needs SMTP). The answer, and the work done before it, are the
    same whether or not the address has an account (the e-mail goes out after answering);
    at most one e-mail per address per SZBENCH_PASSWORD_RESET_MAIL_INTERVAL_S."""
    if not mail.enabled():
        raise Conflict("e-mail is not configured on this server: ask an admin for a reset link")
    mail.send_after(background, accounts.request_reset_mail(session, body.email))
    return ResetRequested(
        detail="If an account has this address, a reset link is on its way to it."
    )


@router.post("/auth/verify", response_model=UserOut)
def verify_email(body: VerifyIn, request: Request, session: SessionDep) -> UserOut:
    """Confirm an e-mail address with the token of the link sent to it."""
    client = client_address(request)
    return UserOut.model_validate(accounts.verify_email(session, body.token, client=client))
