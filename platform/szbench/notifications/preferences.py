"""What each user wants to be told, and how: per kind and channel switches, every phase's
news or only their own, the webhook (its URL, checked when saved, and its signing secret),
and where their e-mail goes."""

from __future__ import annotations

import secrets

from sqlalchemy.orm import Session

from szbench.auth import mail, policy
from szbench.config import get_settings
from szbench.errors import BadRequest
from szbench.models import NotificationChannel, NotificationKind, NotificationPreferences, User
from szbench.notifications import kinds, webhook

#: The kinds a user can turn off (every kind but the test they ask for).
SWITCHABLE = tuple(kinds.KIND_LABELS)
SECRET_MIN, SECRET_MAX = 16, 200


def preferences_of(session: Session, user: User) -> NotificationPreferences:
    """The user's preferences; the defaults (every switch on, no webhook) when never saved."""
    row = session.get(NotificationPreferences, user.id)
    if row is not None:
        return row
    return NotificationPreferences(
        user_id=user.id, webhook_url="", webhook_secret="", muted=[], all_phases=False
    )


def _stored(session: Session, user: User) -> NotificationPreferences:
    row = session.get(NotificationPreferences, user.id)
    if row is None:
        row = preferences_of(session, user)
        session.add(row)
    return row


def _switch(kind: NotificationKind, channel: NotificationChannel) -> str:
    return f"{channel.value}:{kind.value}"


def is_on(
    prefs: NotificationPreferences, kind: NotificationKind, channel: NotificationChannel
) -> bool:
    return _switch(kind, channel) not in (prefs.muted or [])


def switches(
    prefs: NotificationPreferences,
) -> dict[NotificationKind, dict[NotificationChannel, bool]]:
    return {kind: {ch: is_on(prefs, kind, ch) for ch in NotificationChannel} for kind in SWITCHABLE}


def mail_enabled() -> bool:
    """Notification e-mail: where SMTP is configured, never in centre mode (nothing is
    pushed off the host there)."""
    return mail.enabled() and not get_settings().centre_mode


def mail_address(user: User) -> str | None:
    """Where notification e-mail to ``user`` goes; None when none is sent to them.

    Not to an address its account has not confirmed: that could be anyone's.
    """
    if not mail_enabled() or not user.is_active or policy.needs_verification(user):
        return None
    return user.email


def channels(
    user: User, prefs: NotificationPreferences, kind: NotificationKind
) -> list[NotificationChannel]:
    """The channels ``user`` hears of ``kind`` on (a test: every channel they have)."""
    wanted = [
        channel
        for channel in NotificationChannel
        if kind == NotificationKind.TEST or is_on(prefs, kind, channel)
    ]
    out = []
    if NotificationChannel.MAIL in wanted and mail_address(user):
        out.append(NotificationChannel.MAIL)
    if NotificationChannel.WEBHOOK in wanted and prefs.webhook_url:
        out.append(NotificationChannel.WEBHOOK)
    return out


def update_preferences(
    session: Session,
    user: User,
    *,
    events: dict[NotificationKind, dict[NotificationChannel, bool | None]] | None = None,
    all_phases: bool | None = None,
    webhook_url: str | None = None,
) -> str | None:
    """Change what is given (None: unchanged). Returns the webhook's signing secret when
    this change made one (a first URL), to be shown this once.

    Everything is checked before anything changes: a refused URL loses no other setting.
    """
    url = None
    if webhook_url is not None:
        url = webhook_url.strip()
        if url:
            target = webhook.check_url(url)
            webhook.check_addresses(target)
            url = target.url
    if events is not None and NotificationKind.TEST in events:
        raise BadRequest("events.test: the test notification has no switch")
    row = _stored(session, user)
    if events is not None:
        muted = set(row.muted or [])
        for kind, chosen in events.items():
            for channel, on in chosen.items():
                if on is True:
                    muted.discard(_switch(kind, channel))
                elif on is False:
                    muted.add(_switch(kind, channel))
        row.muted = sorted(muted)
    if all_phases is not None:
        row.all_phases = all_phases
    secret = None
    if url is not None:
        row.webhook_url = url
        if url and not row.webhook_secret:
            secret = row.webhook_secret = secrets.token_urlsafe(32)
    session.flush()
    return secret


def set_secret(session: Session, user: User, secret: str | None = None) -> str:
    """Replace the webhook's signing secret with ``secret``, or a random one; returns it."""
    if secret is not None:
        if not SECRET_MIN <= len(secret) <= SECRET_MAX:
            raise BadRequest(f"secret: between {SECRET_MIN} and {SECRET_MAX} characters")
        if not secret.isprintable() or secret.strip() != secret:
            raise BadRequest("secret: printable characters only, no space at either end")
    row = _stored(session, user)
    row.webhook_secret = secret if secret is not None else secrets.token_urlsafe(32)
    session.flush()
    return row.webhook_secret
