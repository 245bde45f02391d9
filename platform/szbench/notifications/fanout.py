"""Fan-out: one delivery per (event, recipient, channel) the recipient has not turned off.

The event's composer (:mod:`szbench.notifications.kinds`) says who hears of it and what
each one is told, through the rules every page follows (:mod:`szbench.auth.policy`,
:mod:`szbench.disclosure`): an algorithm's owner learns what their evaluation page
shows them, never the message of a run on held-out data. Each payload is composed once and
stored with its delivery, so every attempt sends the same bytes. Inactive accounts get
nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench import clock
from szbench.models import DeliveryStatus, NotificationDelivery, NotificationEvent, User
from szbench.notifications import kinds
from szbench.notifications.preferences import channels, preferences_of


def fan_out(session: Session, event_id: int) -> list[int]:
    """Make ``event_id``'s deliveries (once: the event row is locked, and marked); the ids
    of those made now."""
    event = session.scalars(
        select(NotificationEvent)
        .where(NotificationEvent.id == event_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if event is None or event.fanned_out_at is not None:
        return []
    composer = kinds.of(event.kind)
    now = clock.now(session)
    dialect = session.get_bind().dialect.name
    insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
    made: list[int] = []
    for user in _active(session, composer.recipients(session, event)):
        chosen = channels(user, preferences_of(session, user), event.kind)
        payload = composer.compose(session, event, user) if chosen else None
        if payload is None:
            continue
        for channel in chosen:
            result = session.execute(
                insert(NotificationDelivery.__table__)
                .values(
                    event_id=event.id,
                    user_id=user.id,
                    channel=channel,
                    status=DeliveryStatus.PENDING,
                    payload=payload,
                    next_attempt_at=now,
                    created_at=now,
                )
                .on_conflict_do_nothing(index_elements=["event_id", "user_id", "channel"])
                .returning(NotificationDelivery.__table__.c.id)
            )
            made += [row[0] for row in result.all()]
    event.fanned_out_at = now
    session.flush()
    return made


def _active(session: Session, ids: list[int]) -> list[User]:
    wanted = [i for i in ids if i is not None]
    if not wanted:
        return []
    users = session.scalars(select(User).where(User.id.in_(wanted)).order_by(User.id))
    return [u for u in users if u.is_active]
