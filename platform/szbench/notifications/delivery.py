"""Delivery: one attempt at a time, on its channel, outside any transaction.

:func:`claim` takes a due delivery for one attempt (a conditional update: two workers never
make the same attempt), :func:`send` makes it with no database work (a webhook call or an
e-mail, each bounded as a whole by its deadline: :mod:`szbench.outbound`), and
:func:`finish` records the outcome and when to retry (exponential backoff, at most
:data:`MAX_ATTEMPTS` attempts). :mod:`szbench.notifications.outbox` drives these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from szbench import clock
from szbench.auth import mail
from szbench.config import get_settings
from szbench.models import (
    DeliveryStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationKind,
    NotificationPreferences,
    User,
)
from szbench.notifications import kinds, webhook
from szbench.notifications.kinds.base import link
from szbench.notifications.preferences import mail_address, preferences_of

# A receiver that is down for an hour or so still gets its message; one gone for good stops
# costing attempts after about two hours (60 s, 2, 4, 8, 16 min between the six).
MAX_ATTEMPTS = 6
BACKOFF_BASE_S = 60.0
BACKOFF_MAX_S = 3600.0


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt.

    >>> [backoff_s(n) for n in (1, 2, 3)]
    [60.0, 120.0, 240.0]
    """
    return float(min(BACKOFF_BASE_S * 2 ** max(attempts - 1, 0), BACKOFF_MAX_S))


def call_limit_s() -> float:
    """The longest one attempt takes (its channel's whole-call deadline)."""
    settings = get_settings()
    return max(settings.webhook_timeout_s, settings.smtp_timeout_s)


def due(
    session: Session, *, event_id: int | None = None, limit: int = 200
) -> list[tuple[int, str]]:
    """Deliveries whose next attempt is due, oldest due first, each with its lane: the
    receiver it goes to (a webhook's host, or the mail server), so that the outbox can keep
    one slow receiver from holding up the others."""
    query = (
        select(
            NotificationDelivery.id,
            NotificationDelivery.channel,
            NotificationDelivery.user_id,
        )
        .where(
            NotificationDelivery.status == DeliveryStatus.PENDING,
            NotificationDelivery.next_attempt_at <= clock.now(session),
        )
        .order_by(NotificationDelivery.next_attempt_at)
        .limit(limit)
    )
    if event_id is not None:
        query = query.where(NotificationDelivery.event_id == event_id)
    rows = session.execute(query).all()
    hooks = _webhook_hosts(session, {user_id for _, ch, user_id in rows if ch != "mail"})
    return [
        (delivery_id, "mail" if channel == NotificationChannel.MAIL else hooks.get(user_id, ""))
        for delivery_id, channel, user_id in rows
    ]


def _webhook_hosts(session: Session, user_ids: set[int]) -> dict[int, str]:
    if not user_ids:
        return {}
    rows = session.execute(
        select(NotificationPreferences.user_id, NotificationPreferences.webhook_url).where(
            NotificationPreferences.user_id.in_(user_ids)
        )
    )
    return {user_id: "webhook:" + webhook.host_of(url) for user_id, url in rows}


@dataclass(frozen=True)
class Job:
    """One claimed attempt: everything :func:`send` needs, read before the transaction ends."""

    delivery_id: int
    channel: NotificationChannel
    payload: dict[str, Any]
    target: str
    secret: str
    refusal: str = ""


def claim(session: Session, delivery_id: int) -> Job | None:
    """Take the delivery for one attempt, or None when it is not due (another worker took
    it). The claim pushes its next attempt out by a lease, so an attempt whose worker died
    is made again later; commit before sending."""
    now = clock.now(session)
    lease = timedelta(seconds=3 * call_limit_s() + 60)
    claimed = session.execute(
        update(NotificationDelivery)
        .where(
            NotificationDelivery.id == delivery_id,
            NotificationDelivery.status == DeliveryStatus.PENDING,
            NotificationDelivery.next_attempt_at <= now,
        )
        .values(
            attempts=NotificationDelivery.attempts + 1,
            last_attempt_at=now,
            next_attempt_at=now + lease,
        )
        .execution_options(synchronize_session=False)
    )
    if not claimed.rowcount:  # type: ignore[attr-defined]
        return None
    delivery = session.get_one(NotificationDelivery, delivery_id, populate_existing=True)
    user = session.get_one(User, delivery.user_id)
    prefs = preferences_of(session, user)
    refusal = ""
    if delivery.channel == NotificationChannel.MAIL:
        target = mail_address(user) or ""
        if not target:
            refusal = "no e-mail sent: e-mail is off on this server or the address is unconfirmed"
    else:
        target = prefs.webhook_url
        if not target:
            refusal = "no webhook URL any more"
    if not user.is_active:
        refusal = "the account is deactivated"
    delivery.target = target
    session.flush()
    return Job(
        delivery_id=delivery.id,
        channel=delivery.channel,
        payload=dict(delivery.payload or {}),
        target=target,
        secret=prefs.webhook_secret,
        refusal=refusal,
    )


def body_of(payload: dict[str, Any]) -> bytes:
    """The webhook's body: the payload as compact JSON (the bytes that are signed)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")


def summary(payload: dict[str, Any]) -> str:
    """The notification in one line (the e-mail's subject, the delivery log's text)."""
    return kinds.of_payload(payload).summary(payload)


def mail_text(payload: dict[str, Any]) -> tuple[str, str]:
    """The e-mail's subject and body for a delivery's payload."""
    composer = kinds.of_payload(payload)
    subject = composer.summary(payload)
    lines = [subject, "", *composer.mail_lines(payload)]
    settings_page = link("/account/notifications")
    if composer.labels:
        lines += [
            "",
            f"You get this e-mail because of your notification settings ({settings_page}); "
            "each kind of notice can be turned off there.",
        ]
    else:
        lines += ["", f"Your notification settings: {settings_page}"]
    return subject, "\n".join(lines) + "\n"


def send(job: Job) -> webhook.Outcome:
    """Make the attempt (no database work: call it outside any transaction)."""
    if job.refusal:
        return webhook.Outcome(False, error=job.refusal, retry=False)
    if job.channel == NotificationChannel.MAIL:
        subject, text = mail_text(job.payload)
        if mail.send(job.target, subject, text):
            return webhook.Outcome(True)
        return webhook.Outcome(
            False, error="the mail server did not take the message (the platform's log says why)"
        )
    headers = {
        "X-Szbench-Event": str(job.payload.get("event")),
        "X-Szbench-Delivery": str(job.delivery_id),
    }
    return webhook.post(job.target, job.secret, body_of(job.payload), headers)


def finish(session: Session, delivery_id: int, outcome: webhook.Outcome) -> NotificationDelivery:
    """Record an attempt's outcome; schedule the next one, or end the delivery."""
    now = clock.now(session)
    delivery = session.get_one(NotificationDelivery, delivery_id, populate_existing=True)
    delivery.last_status_code = outcome.status_code
    delivery.last_error = outcome.error[:500]
    delivery.response_snippet = outcome.snippet[:500]
    # A test is one attempt: its user is looking at the answer.
    once = (delivery.payload or {}).get("event") == kinds.EVENT_NAMES[NotificationKind.TEST]
    if outcome.delivered:
        delivery.status = DeliveryStatus.DELIVERED
        delivery.delivered_at = now
        delivery.next_attempt_at = None
    elif once or not outcome.retry or delivery.attempts >= MAX_ATTEMPTS:
        delivery.status = DeliveryStatus.FAILED
        delivery.next_attempt_at = None
    else:
        delivery.next_attempt_at = now + timedelta(seconds=backoff_s(delivery.attempts))
    session.flush()
    return delivery


def deliveries(
    session: Session, user: User, *, limit: int, offset: int = 0, event_id: int | None = None
) -> tuple[list[NotificationDelivery], int]:
    """The user's deliveries, newest first."""
    where = [NotificationDelivery.user_id == user.id]
    if event_id is not None:
        where.append(NotificationDelivery.event_id == event_id)
    total = session.scalar(select(func.count(NotificationDelivery.id)).where(*where)) or 0
    rows = session.scalars(
        select(NotificationDelivery)
        .where(*where)
        .order_by(NotificationDelivery.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total
