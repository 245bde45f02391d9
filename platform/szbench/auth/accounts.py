"""Password reset links and e-mail verification (docs/security.md, "Accounts").

A reset link carries a token signed with the server's secret key (as the session cookie
is) holding the user's id and the moment their password was last set. Setting a password
moves that moment, so a link works once; it also expires after
``SZBENCH_PASSWORD_RESET_TTL_S``. Nothing is stored: an admin issues a link (shown once,
to hand over), or, with SMTP configured, anyone asks for one by e-mail. Using a link sets
the password through :func:`szbench.auth.service.set_password`: the same password rules,
and every session and API token of the account is revoked.

A verification link signs the user's id and address; following it records
``email_verified_at``. A reset link that came by e-mail verifies the address too.
"""

from __future__ import annotations

import hashlib
import unicodedata
from datetime import UTC, datetime, timedelta

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import cookies, mail, service, throttle

# In the policy (no HTTP import), so notifications can ask it too; callers use it from here.
from szbench.auth.policy import needs_verification as needs_verification
from szbench.config import get_settings
from szbench.errors import BadRequest
from szbench.models import ApiToken, SigninThrottle, User

_RESET_SALT = "szbench-password-reset"
_VERIFY_SALT = "szbench-email-verification"
INVALID_RESET = (
    "token: this reset link is not valid: it was used already, has expired, or a newer "
    "password was set; ask for a new one"
)
INVALID_VERIFICATION = "token: this verification link is not valid or has expired"


def _serializer(salt: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(cookies.secret_key(), salt=salt)


def _stamp(user: User) -> str:
    # The moment the password was last set (and whether there is one): moves on every set.
    changed = user.password_changed_at
    if changed is None:
        return "never"
    # The same text whether the moment comes back naive (SQLite) or in the session's zone.
    return (changed.astimezone(UTC) if changed.tzinfo else changed).replace(tzinfo=None).isoformat()


def _now() -> datetime:
    return datetime.now(UTC)


def reset_token(user: User, *, by_mail: bool = False) -> tuple[str, datetime]:
    """A one-time reset token for ``user`` and when it expires."""
    token = _serializer(_RESET_SALT).dumps({"u": user.id, "p": _stamp(user), "m": bool(by_mail)})
    return token, _now() + timedelta(seconds=get_settings().password_reset_ttl_s)


def _read_reset(session: Session, token: str) -> tuple[User, bool]:
    try:
        data = _serializer(_RESET_SALT).loads(token, max_age=get_settings().password_reset_ttl_s)
    except (BadSignature, SignatureExpired):
        raise BadRequest(INVALID_RESET) from None
    user = session.get(User, data.get("u")) if isinstance(data, dict) else None
    if user is None or not user.is_active or data.get("p") != _stamp(user):
        raise BadRequest(INVALID_RESET)
    return user, bool(data.get("m"))


def check_reset_token(session: Session, token: str) -> User:
    """The user a reset token is for, or :class:`BadRequest` (used, expired, forged)."""
    return _read_reset(session, token)[0]


def reset_password(session: Session, token: str, new_password: str) -> User:
    """Set the password from a reset link: the link is spent, every session and token of
    the account is revoked (:func:`service.set_password`)."""
    if len(token) > 2000:
        raise BadRequest(INVALID_RESET)
    user, by_mail = _read_reset(session, token)
    service.set_password(session, user, new_password)
    if by_mail and user.email_verified_at is None:
        user.email_verified_at = _now()
    throttle_key = throttle.account_key(user.email)
    # A forgotten password is often guessed at first: its sign-in failures are forgiven.
    row = session.get(SigninThrottle, throttle_key)
    if row is not None:
        session.delete(row)
    session.flush()
    return user


def verification_token(user: User) -> str:
    return _serializer(_VERIFY_SALT).dumps({"u": user.id, "e": user.email})


def verify_email(session: Session, token: str) -> User:
    """Record that the user read mail at their address; :class:`BadRequest` otherwise."""
    if len(token) > 2000:
        raise BadRequest(INVALID_VERIFICATION)
    try:
        data = _serializer(_VERIFY_SALT).loads(
            token, max_age=get_settings().email_verification_ttl_s
        )
    except (BadSignature, SignatureExpired):
        raise BadRequest(INVALID_VERIFICATION) from None
    user = session.get(User, data.get("u")) if isinstance(data, dict) else None
    if user is None or data.get("e") != user.email:
        raise BadRequest(INVALID_VERIFICATION)
    if user.email_verified_at is None:
        user.email_verified_at = _now()
        session.flush()
    return user


def link(base_url: str, path: str, token: str) -> str:
    root = (get_settings().public_url or base_url).rstrip("/")
    return f"{root}{path}?token={token}"


def send_verification(user: User, base_url: str) -> bool:
    body = (
        f"Hello {user.name or user.email},\n\n"
        "please confirm that this is your address by opening this link:\n\n"
        f"{link(base_url, '/verify', verification_token(user))}\n\n"
        "If you did not create an account on this server, ignore this message.\n"
    )
    return mail.send(user.email, "Confirm your e-mail address", body)


def _mail_allowed(session: Session, email: str) -> bool:
    """At most one reset e-mail per account per SZBENCH_PASSWORD_RESET_MAIL_INTERVAL_S, so the
    form cannot be used to flood someone's inbox. Its own key space in the throttle table:
    asking for resets never slows the account's sign-ins."""
    key = hashlib.sha256(f"reset-mail:{email}".encode()).hexdigest()
    now = throttle.clock.now()
    row = session.get(SigninThrottle, key, with_for_update=True)
    if row is not None and row.blocked_until is not None:
        until = row.blocked_until
        if (until if until.tzinfo else until.replace(tzinfo=UTC)) > now:
            return False
    if row is None:
        row = SigninThrottle(key=key, failures=0, last_attempt_at=now)
        session.add(row)
    row.failures += 1
    row.last_attempt_at = now
    row.blocked_until = now + timedelta(seconds=get_settings().password_reset_mail_interval_s)
    session.flush()
    return True


def request_reset_mail(session: Session, email: str, base_url: str) -> None:
    """E-mail a reset link to ``email`` if it is an active account's, within the rate limit.
    Answers the same in every case (no hint which addresses have accounts)."""
    try:
        email = service.normalise_email(email)
    except BadRequest:
        return
    user = session.scalar(select(User).where(User.email == email))
    if user is None or not user.is_active or not _mail_allowed(session, email):
        return
    token, expires = reset_token(user, by_mail=True)
    send_reset_link(user, link(base_url, "/password/reset", token), expires)


def send_reset_link(user: User, url: str, expires: datetime) -> bool:
    """E-mail a reset link to ``user``; whether it was sent."""
    body = (
        f"Hello {user.name or user.email},\n\n"
        "someone (hopefully you) asked to reset the password of your szbench account. "
        "Open this link to choose a new one; it works once, until "
        f"{expires:%Y-%m-%d %H:%M} UTC:\n\n"
        f"{url}\n\n"
        "Setting a new password signs the account out everywhere and revokes its API tokens. "
        "If you did not ask for this, ignore this message.\n"
    )
    return mail.send(user.email, "Reset your szbench password", body)


def is_web_session(token: ApiToken) -> bool:
    """Whether ``token`` is a browser's sign-in (the session cookie's token)."""
    return token.name == cookies.WEB_SESSION_NAME


# ASCII characters read as another in a name ("web sess1on", "vveb session"); both sides of
# the comparison are mapped, so the map only has to send each look-alike to one letter.
_LOOKALIKES = str.maketrans({"0": "o", "1": "i", "l": "i", "|": "i", "3": "e", "5": "s", "8": "b"})


def _skeleton(name: str) -> str:
    """``name`` as it reads: compatibility forms folded (full-width letters, ligatures), case
    folded, only letters and digits kept (no blanks, punctuation, soft hyphens, zero-width
    or combining characters), ASCII look-alikes made one."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    kept = "".join(c for c in folded if unicodedata.category(c)[0] in "LN")
    return kept.translate(_LOOKALIKES).replace("vv", "w")


_RESERVED = _skeleton(cookies.WEB_SESSION_NAME)


def check_token_name(name: str) -> None:
    """API tokens may not take the web sign-ins' name, which would list them as sign-ins,
    nor any spelling that reads as it: the names are compared by :func:`_skeleton`, and a
    letter outside ASCII counts as whichever letter stands at its place (a Cyrillic small ie,
    U+0435, for the "e" of "web"), so no table of confusable letters is needed."""
    skeleton = _skeleton(name)
    if len(skeleton) == len(_RESERVED) and all(
        mine == reserved or not mine.isascii()
        for mine, reserved in zip(skeleton, _RESERVED, strict=True)
    ):
        raise BadRequest(
            f"name: {name!r} is reserved for web sign-ins (or reads as that name); "
            "choose another name"
        )


def web_sessions(session: Session, user: User) -> list[ApiToken]:
    """The user's live web sign-ins, newest first."""
    now = _now()
    rows = session.scalars(
        select(ApiToken)
        .where(
            ApiToken.user_id == user.id,
            ApiToken.name == cookies.WEB_SESSION_NAME,
            ApiToken.revoked_at.is_(None),
        )
        .order_by(ApiToken.id.desc())
    )
    return [t for t in rows if not service.is_expired(t, now)]


def api_tokens(session: Session, user: User) -> list[ApiToken]:
    """The user's API tokens (every one but the web sign-ins), newest first."""
    return list(
        session.scalars(
            select(ApiToken)
            .where(ApiToken.user_id == user.id, ApiToken.name != cookies.WEB_SESSION_NAME)
            .order_by(ApiToken.id.desc())
        )
    )


def sign_out_elsewhere(session: Session, user: User, *, keep: ApiToken | None) -> int:
    """Revoke every web sign-in of ``user`` but ``keep``; how many."""
    count = 0
    for token in web_sessions(session, user):
        if keep is None or token.id != keep.id:
            service.revoke_token(session, token)
            count += 1
    return count
