"""Users, password login and API tokens. Services only flush; the caller commits."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from szbench.auth import policy, throttle
from szbench.auth.passwords import (
    check_new_password,
    dummy_hash,
    hash_password,
    needs_rehash,
    verify_password,
)
from szbench.config import get_settings
from szbench.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized
from szbench.models import ApiToken, Role, User, as_utc

# read: every GET; write: submissions, uploads, cancel/re-run, own tokens;
# admin: admin-only routes (and only for users whose role is admin);
# worker: fetching recordings by checksum for a worker on another host, and nothing else
# (held by an admin's account, alone on its token, minted by the operator's CLI only).
SCOPES = ("read", "write", "admin", "worker")
WORKER_SCOPE = "worker"
TOKEN_PREFIX = "szb_"  # noqa: S105 - a public marker, not a secret
# A token's last_used_at is written at most this often, so reads do not each cost a write.
LAST_USED_RESOLUTION = timedelta(seconds=60)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _now() -> datetime:
    return datetime.now(UTC)


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if len(email) > 320 or not _EMAIL.match(email):
        raise BadRequest(f"email: {email!r} is not an email address")
    return email


def create_user(
    session: Session,
    *,
    email: str,
    password: str | None,
    name: str = "",
    role: Role = Role.RESEARCHER,
    verified: bool = True,
) -> User:
    """Create a user; ``password=None`` makes an account that can only use API tokens.

    ``verified=False`` for self-service sign-ups: their address is unconfirmed until they
    follow an e-mailed link (:mod:`szbench.auth.accounts`); an admin's or the CLI's word
    counts as confirmation."""
    email = normalise_email(email)
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise Conflict(f"email: a user with email {email} already exists")
    if password is not None:
        check_new_password(password, min_length=get_settings().password_min_length, email=email)
    user = User(email=email, name=name, role=role, email_verified_at=_now() if verified else None)
    if password is not None:
        user.password_hash = hash_password(password, n=get_settings().password_scrypt_n)
        user.password_changed_at = _now()
    session.add(user)
    session.flush()
    return user


def get_user(session: Session, user_id: int) -> User:
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"user {user_id} does not exist")
    return user


def get_user_by_email(session: Session, email: str) -> User:
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None:
        raise NotFound(f"no user with email {email}")
    return user


def list_users(session: Session, *, limit: int, offset: int) -> tuple[list[User], int]:
    total = session.scalar(select(func.count(User.id))) or 0
    users = session.scalars(select(User).order_by(User.id).limit(limit).offset(offset)).all()
    return list(users), total


def update_user(
    session: Session,
    user: User,
    *,
    name: str | None = None,
    role: Role | None = None,
    is_active: bool | None = None,
    password: str | None = None,
) -> User:
    """Change ``user``; :class:`Conflict` when the change would leave no active admin."""
    if (role not in (None, Role.ADMIN) or is_active is False) and user.role == Role.ADMIN:
        _keep_an_active_admin(session, user)
    if name is not None:
        user.name = name
    if role is not None:
        user.role = role
    if is_active is not None:
        user.is_active = is_active
    if password is not None:
        set_password(session, user, password)
    session.flush()
    return user


def _keep_an_active_admin(session: Session, leaving: User) -> None:
    """Refuse to demote or deactivate ``leaving`` when no other active admin remains: nobody
    could then manage the server (nor undo this) without its database.

    Every active admin row is locked (``leaving`` included), so that two admins demoting
    each other at the same time cannot both pass: the second waits for the first to commit,
    then reads its change.
    """
    admins = session.scalars(
        select(User.id).where(User.role == Role.ADMIN, User.is_active.is_(True)).with_for_update()
    ).all()
    if not set(admins) - {leaving.id}:
        raise Conflict(
            f"user {leaving.id} is the last active admin: make another admin first, "
            "then demote or deactivate this one"
        )


def set_password(session: Session, user: User, password: str) -> None:
    """Give ``user`` a new password (checked by :func:`check_new_password`) and revoke
    every token they hold: a changed or reset password must end every session made with
    the old one (web sessions are tokens too). Tokens made before ``password_changed_at``
    are also refused when read (:func:`resolve_token`), should one be made concurrently."""
    check_new_password(password, min_length=get_settings().password_min_length, email=user.email)
    now = _now()
    user.password_hash = hash_password(password, n=get_settings().password_scrypt_n)
    user.password_changed_at = now
    session.execute(
        update(ApiToken)
        .where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session="fetch")
    )
    session.flush()


def authenticate(session: Session, *, email: str, password: str, client: str | None = None) -> User:
    """The active user with this email and password, else :class:`Unauthorized`.

    Throttled (:mod:`szbench.auth.throttle`): the attempt is counted and committed before
    the password is checked, and refused with :class:`TooManyAttempts` while a wait is on.
    Every path that gets to the check costs exactly one password hash: an unknown email, an
    inactive user and a token-only account are checked against :func:`dummy_hash`.
    """
    attempt = throttle.begin(session, email=email, client=client)
    # Not the caller's commit: the count must hold even when this request fails or dies.
    session.commit()
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    n = get_settings().password_scrypt_n
    stored = user.password_hash if user is not None and user.is_active else None
    matches = verify_password(password, stored or dummy_hash(n))
    if user is None or stored is None or not matches:
        raise Unauthorized("wrong email or password")
    throttle.succeeded(session, attempt)
    if user.password_hash and needs_rehash(user.password_hash, n=n):
        user.password_hash = hash_password(password, n=n)
    session.flush()
    return user


def change_password(
    session: Session, user: User, *, current_password: str, new_password: str, client: str | None
) -> None:
    """The user's own change: the current password is checked (and throttled) as a sign-in."""
    if user.password_hash is None:
        raise BadRequest("current_password: this account has none (it uses API tokens only)")
    try:
        authenticate(session, email=user.email, password=current_password, client=client)
    except Unauthorized:
        # 401 would read as "signed out" to a client; the caller is signed in.
        raise BadRequest("current_password: wrong password") from None
    set_password(session, user, new_password)


def allowed_scopes(user: User) -> list[str]:
    return list(SCOPES) if user.role == Role.ADMIN else ["read", "write"]


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_token(
    session: Session,
    user: User,
    *,
    name: str = "",
    scopes: list[str] | None = None,
    expires_at: datetime | None = None,
    within: frozenset[str] | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the secret (shown once, never stored).

    ``within``: the scopes of the token that asks for this one. A token cannot mint one with
    more power than its own (an admin's token without the admin scope cannot make one with
    it); by default the new token gets what the role allows within those."""
    permitted = allowed_scopes(user)
    if scopes is None:
        # Never by default: a worker token is asked for by name.
        scopes = [s for s in permitted if (within is None or s in within) and s != WORKER_SCOPE]
    scopes = list(dict.fromkeys(scopes))
    if WORKER_SCOPE in scopes and len(scopes) > 1:
        # A worker host's token must be good for its fetches only: combined with read it
        # would carry an admin's whole view off the main host.
        raise BadRequest("scopes: 'worker' stands alone on a token (--scopes worker)")
    if within is not None:
        beyond = [s for s in scopes if s in permitted and s not in within]
        if beyond:
            raise Forbidden(
                f"scopes: the token this request came with lacks {', '.join(map(repr, beyond))}"
            )
    if not scopes:
        raise BadRequest("scopes: give at least one of " + ", ".join(SCOPES))
    for scope in scopes:
        if scope not in SCOPES:
            raise BadRequest(f"scopes: unknown scope {scope!r} (known: {', '.join(SCOPES)})")
        if scope not in permitted:
            raise Forbidden(f"scopes: a {user.role.value} cannot hold the {scope!r} scope")
    if expires_at is not None and as_utc(expires_at) <= _now():
        raise BadRequest("expires_at: must be in the future")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user_id=user.id,
        name=name,
        prefix=secret[:12],
        token_hash=hash_token(secret),
        scopes=scopes,
        expires_at=expires_at,
    )
    session.add(token)
    session.flush()
    return token, secret


def login(
    session: Session, *, email: str, password: str, client: str | None, name: str = "login"
) -> tuple[ApiToken, str]:
    """Password login: a bearer token with the role's scopes and the login lifetime."""
    user = authenticate(session, email=email, password=password, client=client)
    return issue_login_token(session, user, name=name)


def issue_login_token(session: Session, user: User, *, name: str) -> tuple[ApiToken, str]:
    """A token with the role's scopes and the login lifetime, for a user just signed in."""
    ttl = timedelta(seconds=get_settings().login_token_ttl_s)
    return create_token(session, user, name=name, expires_at=_now() + ttl)


def is_expired(token: ApiToken, now: datetime) -> bool:
    """Whether ``token`` has passed its expiry at ``now`` (tokens without one never do)."""
    return token.expires_at is not None and as_utc(token.expires_at) <= now


def resolve_token(session: Session, secret: str) -> ApiToken | None:
    """The live token for ``secret`` (not revoked, not expired, active user), or None."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    changed = token.user.password_changed_at
    if changed is not None and as_utc(token.created_at) < as_utc(changed):
        return None
    now = _now()
    if is_expired(token, now):
        return None
    if token.last_used_at is None or now - as_utc(token.last_used_at) > LAST_USED_RESOLUTION:
        token.last_used_at = now
        session.flush()
    return token


def list_tokens(
    session: Session, user: User, *, limit: int, offset: int
) -> tuple[list[ApiToken], int]:
    where = ApiToken.user_id == user.id
    total = session.scalar(select(func.count(ApiToken.id)).where(where)) or 0
    rows = session.scalars(
        select(ApiToken).where(where).order_by(ApiToken.id.desc()).limit(limit).offset(offset)
    ).all()
    return list(rows), total


def get_token(session: Session, token_id: int, *, viewer: User) -> ApiToken:
    token = session.get(ApiToken, token_id)
    # Someone else's token is reported as missing, so ids leak nothing.
    if token is None or (token.user_id != viewer.id and not policy.is_admin(viewer)):
        raise NotFound(f"token {token_id} does not exist")
    return token


def revoke_token(session: Session, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = _now()
        session.flush()
    return token
