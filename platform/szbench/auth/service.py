"""Users, password login and API tokens. Services only flush; the caller commits."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.auth.passwords import hash_password, needs_rehash, verify_password
from szbench.config import get_settings
from szbench.errors import BadRequest, Conflict, Forbidden, NotFound, Unauthorized
from szbench.models import ApiToken, Role, User

# read: every GET; write: submissions, uploads, cancel/re-run, own tokens;
# admin: admin-only routes (and only for users whose role is admin).
SCOPES = ("read", "write", "admin")
TOKEN_PREFIX = "szb_"  # noqa: S105 - a public marker, not a secret
# A token's last_used_at is written at most this often, so reads do not each cost a write.
LAST_USED_RESOLUTION = timedelta(seconds=60)
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MIN_PASSWORD_LENGTH = 8


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; every stored moment is UTC.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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
) -> User:
    """Create a user; ``password=None`` makes an account that can only use API tokens."""
    email = normalise_email(email)
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise Conflict(f"email: a user with email {email} already exists")
    if password is not None and len(password) < MIN_PASSWORD_LENGTH:
        raise BadRequest(f"password: must be at least {MIN_PASSWORD_LENGTH} characters")
    user = User(
        email=email,
        name=name,
        role=role,
        password_hash=(
            hash_password(password, n=get_settings().password_scrypt_n) if password else None
        ),
    )
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
    if name is not None:
        user.name = name
    if role is not None:
        user.role = role
    if is_active is not None:
        user.is_active = is_active
    if password is not None:
        if len(password) < MIN_PASSWORD_LENGTH:
            raise BadRequest(f"password: must be at least {MIN_PASSWORD_LENGTH} characters")
        user.password_hash = hash_password(password, n=get_settings().password_scrypt_n)
    session.flush()
    return user


def authenticate(session: Session, *, email: str, password: str) -> User:
    """The active user with this email and password, else :class:`Unauthorized`."""
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None or not user.is_active or not verify_password(password, user.password_hash):
        raise Unauthorized("wrong email or password")
    n = get_settings().password_scrypt_n
    if user.password_hash and needs_rehash(user.password_hash, n=n):
        user.password_hash = hash_password(password, n=n)
        session.flush()
    return user


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
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the secret (shown once, never stored)."""
    permitted = allowed_scopes(user)
    scopes = list(dict.fromkeys(scopes)) if scopes is not None else permitted
    if not scopes:
        raise BadRequest("scopes: give at least one of " + ", ".join(SCOPES))
    for scope in scopes:
        if scope not in SCOPES:
            raise BadRequest(f"scopes: unknown scope {scope!r} (known: {', '.join(SCOPES)})")
        if scope not in permitted:
            raise Forbidden(f"scopes: a {user.role.value} cannot hold the {scope!r} scope")
    if expires_at is not None and _aware(expires_at) <= _now():
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
    session: Session, *, email: str, password: str, name: str = "login"
) -> tuple[ApiToken, str]:
    """Password login: a bearer token with the role's scopes and the login lifetime."""
    user = authenticate(session, email=email, password=password)
    ttl = timedelta(seconds=get_settings().login_token_ttl_s)
    return create_token(session, user, name=name, expires_at=_now() + ttl)


def is_expired(token: ApiToken, now: datetime) -> bool:
    """Whether ``token`` has passed its expiry at ``now`` (tokens without one never do)."""
    return token.expires_at is not None and _aware(token.expires_at) <= now


def resolve_token(session: Session, secret: str) -> ApiToken | None:
    """The live token for ``secret`` (not revoked, not expired, active user), or None."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    now = _now()
    if is_expired(token, now):
        return None
    if token.last_used_at is None or now - _aware(token.last_used_at) > LAST_USED_RESOLUTION:
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
    if token is None or (token.user_id != viewer.id and viewer.role != Role.ADMIN):
        raise NotFound(f"token {token_id} does not exist")
    return token


def revoke_token(session: Session, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = _now()
        session.flush()
    return token
