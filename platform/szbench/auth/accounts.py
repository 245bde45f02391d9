"""Password reset links and e-mail verification (docs/security.md, "Accounts").

A reset link carries a token signed with the server's secret key (as the session cookie
is) holding the user's id and the moment their password was last set. Setting a password
moves that moment, so a link works once; it also expires after
:data:`RESET_TTL_S`. Nothing is stored: an admin issues a link (shown once,
to hand over), or, with SMTP configured, anyone asks for one by e-mail. Using a link sets
the password through :func:`szbench.auth.service.set_password`: the same password rules,
and every session and API token of the account is revoked.

A verification link signs the user's id and address; following it records
``email_verified_at``. A reset link that came by e-mail verifies the address too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import names
from szbench.auth import cookies, mail, service, throttle
from szbench.auth.passwords import check_new_password

# In the policy (no HTTP import), so notifications can ask it too; callers use it from here.
from szbench.auth.policy import needs_verification as needs_verification
from szbench.config import PUBLIC_URL_REQUIRED, ConfigError, get_settings
from szbench.errors import BadRequest, Forbidden
from szbench.models import ApiToken, Role, SigninThrottle, User

_RESET_SALT = "szbench-password-reset"
_VERIFY_SALT = "szbench-email-verification"
INVALID_RESET = (
    "token: this reset link is not valid: it was used already, has expired, or a newer "
    "password was set; ask for a new one"
)
INVALID_VERIFICATION = "token: this verification link is not valid or has expired"
# A reset link works for a day (and once): long enough to reach a mailbox read once a day,
# short enough that a link found later in an old mail or a forwarded message is dead. A
# verification link works for a week: it grants nothing but "this address reads its mail",
# and a sign-up's owner may not look at once. The lifetimes docs/security.md states ("Accounts,
# phases, comparisons and links"); constants, as those bounds are.
RESET_TTL_S = 86400
VERIFICATION_TTL_S = 7 * 86400
# At most one reset e-mail per address per 5 minutes (docs/security.md, "A reset request
# answers alike for every address"): the form is anonymous, so this is what keeps it from
# flooding someone's inbox, while a person who lost the first message can ask again soon.
RESET_MAIL_INTERVAL_S = 300


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
    return token, _now() + timedelta(seconds=RESET_TTL_S)


def _read_reset(session: Session, token: str) -> tuple[User, bool]:
    try:
        data = _serializer(_RESET_SALT).loads(token, max_age=RESET_TTL_S)
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


def verify_email(session: Session, token: str, *, client: str | None = None) -> User:
    """Record that the user read mail at their address; :class:`BadRequest` otherwise. The
    first confirmation gives ``client`` (the address it came from) one sign-up back
    (:func:`~szbench.auth.throttle.signup_confirmed`)."""
    if len(token) > 2000:
        raise BadRequest(INVALID_VERIFICATION)
    try:
        data = _serializer(_VERIFY_SALT).loads(token, max_age=VERIFICATION_TTL_S)
    except (BadSignature, SignatureExpired):
        raise BadRequest(INVALID_VERIFICATION) from None
    user = session.get(User, data.get("u")) if isinstance(data, dict) else None
    if user is None or data.get("e") != user.email:
        raise BadRequest(INVALID_VERIFICATION)
    if user.email_verified_at is None:
        user.email_verified_at = _now()
        session.flush()
        throttle.signup_confirmed(session, client=client)
    return user


def link(path: str, token: str) -> str:
    """A link into the site: ``SZBENCH_PUBLIC_URL`` + path, never the request's ``Host`` (the
    caller writes that header: a forged one would send a genuine link elsewhere). Without a
    public URL (no e-mail), the path alone, for an admin to put after the site's address."""
    return f"{get_settings().public_url}{path}?token={token}"


def _mailed_link(path: str, token: str) -> str:
    """:func:`link` for an e-mail, which needs the whole address (the server does not start
    with e-mail on and no public URL: :func:`szbench.config.check_serving`)."""
    if not get_settings().public_url:
        raise ConfigError(PUBLIC_URL_REQUIRED)
    return link(path, token)


def verification_message(user: User) -> mail.Message:
    """The message with ``user``'s address verification link."""
    body = (
        f"Hello {user.name or user.email},\n\n"
        "please confirm that this is your address by opening this link:\n\n"
        f"{_mailed_link('/verify', verification_token(user))}\n\n"
        "If you did not create an account on this server, ignore this message.\n"
    )
    return mail.Message(user.email, "Confirm your e-mail address", body)


def reset_message(user: User, url: str, expires: datetime) -> mail.Message:
    """The message with a reset link for ``user``."""
    body = (
        f"Hello {user.name or user.email},\n\n"
        "someone (hopefully you) asked to reset the password of your szbench account. "
        "Open this link to choose a new one; it works once, until "
        f"{expires:%Y-%m-%d %H:%M} UTC:\n\n"
        f"{url}\n\n"
        "Setting a new password signs the account out everywhere and revokes its API tokens. "
        "If you did not ask for this, ignore this message.\n"
    )
    return mail.Message(user.email, "Reset your szbench password", body)


def issue_reset_link(user: User, *, by_mail: bool) -> tuple[str, datetime, bool]:
    """An admin's reset link for ``user`` (:func:`link`), when it expires, and whether it was
    e-mailed (sent before answering: the admin is told)."""
    token, expires = reset_token(user, by_mail=by_mail)
    if by_mail:
        url = _mailed_link("/password/reset", token)
        return url, expires, mail.send_message(reset_message(user, url, expires))
    return link("/password/reset", token), expires, False


def signup_open() -> bool:
    """Public sign-up: allowed by the setting and never in clinical-centre mode."""
    settings = get_settings()
    return settings.allow_signup and not settings.centre_mode


def sign_up(
    session: Session, *, email: str, password: str, name: str, client: str | None
) -> tuple[User, mail.Message | None]:
    """A self-service researcher account (API and page alike), and its verification message
    to send after answering (with e-mail on).

    Refused: sign-up closed (:class:`Forbidden`); an invalid address or password
    (:class:`BadRequest`, before anything is counted, since it tells nothing); past the
    client's sign-up throttle (:class:`TooManyAttempts`). The attempt is counted and
    committed before the account is made, like a sign-in's: an address that has an account
    (:class:`Conflict`) counts too, since that answer tells whether an address is known."""
    if not signup_open():
        raise Forbidden("sign-up is closed on this server; ask an admin for an account")
    email = service.normalise_email(email)
    check_new_password(password, min_length=get_settings().password_min_length, email=email)
    throttle.begin_signup(session, client=client)
    # Not the caller's commit: the count must hold even when the sign-up fails.
    session.commit()
    user = service.create_user(
        session, email=email, password=password, name=name, role=Role.RESEARCHER, verified=False
    )
    return user, verification_message(user) if mail.enabled() else None


def request_reset_mail(session: Session, email: str) -> mail.Message | None:
    """The reset message to send (after answering) if ``email`` is an active account's,
    within the rate limit; None otherwise.

    Every well-formed address does the same work here (one lookup, one rate-limit row), and
    the message goes out after the answer (:func:`szbench.auth.mail.send_after`), so neither
    the answer nor its timing tells which addresses have accounts. At most one message per
    address per :data:`RESET_MAIL_INTERVAL_S`, so the form cannot flood an inbox;
    its own key space in the throttle table: asking for resets never slows sign-ins."""
    try:
        email = service.normalise_email(email)
    except BadRequest:
        return None
    user = session.scalar(select(User).where(User.email == email))
    allowed = throttle.spaced(
        session,
        kind="reset-mail",
        value=email,
        interval_s=RESET_MAIL_INTERVAL_S,
    )
    if user is None or not user.is_active or not allowed:
        return None
    token, expires = reset_token(user, by_mail=True)
    return reset_message(user, _mailed_link("/password/reset", token), expires)


def is_web_session(token: ApiToken) -> bool:
    """Whether ``token`` is a browser's sign-in (the session cookie's token)."""
    return token.name == cookies.WEB_SESSION_NAME


_RESERVED = names.skeleton(cookies.WEB_SESSION_NAME)


def check_token_name(name: str) -> None:
    """API tokens may not take the web sign-ins' name, which would list them as sign-ins,
    nor any spelling that reads as it: the names are compared by their skeletons
    (:func:`szbench.names.skeleton`, as team names are), and a
    letter outside ASCII counts as whichever letter stands at its place (a Cyrillic small ie,
    U+0435, for the "e" of "web"), so no table of confusable letters is needed."""
    skeleton = names.skeleton(name)
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


def live_api_token_count(session: Session, user: User) -> int:
    """How many of the user's API tokens still work (not revoked, not expired): after a
    password reset, none."""
    now = _now()
    return sum(
        1
        for t in api_tokens(session, user)
        if t.revoked_at is None and not service.is_expired(t, now)
    )


def sign_out_elsewhere(session: Session, user: User, *, keep: ApiToken | None) -> int:
    """Revoke every web sign-in of ``user`` but ``keep``; how many."""
    count = 0
    for token in web_sessions(session, user):
        if keep is None or token.id != keep.id:
            service.revoke_token(session, token)
            count += 1
    return count
