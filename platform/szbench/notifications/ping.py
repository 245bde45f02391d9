"""A user's test notification ("send a test"): made at once, sent off the request thread,
rate-limited per user.

A test waits on a receiver the user chose, and a receiver can be slow on purpose: 45 tests
at once from one account once held every API thread (issue 28). So:

- :func:`start`, a short transaction, refuses a user who sends more than
  :data:`TESTS_PER_WINDOW` tests in :data:`WINDOW_S` seconds
  (:func:`szbench.auth.throttle.within_rate`, 429 with Retry-After) or whose last test is
  still being sent, then records the event and its deliveries and commits;
- :func:`send_soon` hands the attempts to a small pool of threads (:data:`SENDERS`), apart
  from the threads that serve requests; each attempt ends within its channel's deadline;
- the route awaits them (:func:`wait`) without holding a thread or a database connection,
  at most :func:`~szbench.notifications.delivery.call_limit_s` plus :data:`GRACE_S`, and
  answers with each delivery as it stands: an attempt still under way shows as pending and
  is recorded when it ends (or by the tick's due-sweep, if this process stops first).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import throttle
from szbench.db import session_scope
from szbench.errors import Conflict, TooManyAttempts
from szbench.models import (
    DeliveryStatus,
    NotificationDelivery,
    NotificationEvent,
    NotificationKind,
    User,
)
from szbench.notifications import delivery, events, outbox
from szbench.notifications.fanout import fan_out
from szbench.notifications.preferences import channels, mail_enabled, preferences_of
from szbench.notifications.webhook import Outcome

#: Test calls under way at once in one API process; more wait their turn (each ends within
#: its deadline), and their requests answer "pending" meanwhile.
SENDERS = 4
#: Tests one user may send per window: enough to fix a receiver by trial, too few to keep
#: the senders busy.
TESTS_PER_WINDOW = 5
WINDOW_S = 60.0
#: Beyond the longest call: the claim and the record around it.
GRACE_S = 2.0


def start(user_id: int) -> list[int]:
    """Record a test to ``user_id`` on each channel they have; its deliveries' ids
    (committed). :class:`Conflict` without a channel, :class:`TooManyAttempts` past the
    rate or while their last test is being sent."""
    with session_scope() as session:
        user = session.get_one(User, user_id)
        if not channels(user, preferences_of(session, user), NotificationKind.TEST):
            why = "" if mail_enabled() else " (this server sends no notification e-mail)"
            raise Conflict(f"webhook_url: nothing to send a test to: set a webhook URL first{why}")
        # Counted under a lock on the user's row: parallel requests take their turns here.
        throttle.within_rate(
            session,
            kind="notification-test",
            value=str(user_id),
            limit=TESTS_PER_WINDOW,
            window_s=WINDOW_S,
            what="test notifications",
        )
        if _under_way(session, user_id):
            wait_s = math.ceil(delivery.call_limit_s())
            raise TooManyAttempts(
                f"your last test notification is still being sent; try again in {wait_s} s",
                retry_after_s=wait_s,
            )
        return fan_out(session, events.record_test(session, user_id))


def _under_way(session: Session, user_id: int) -> bool:
    return (
        session.scalar(
            select(NotificationDelivery.id)
            .join(NotificationEvent, NotificationEvent.id == NotificationDelivery.event_id)
            .where(
                NotificationDelivery.user_id == user_id,
                NotificationDelivery.status == DeliveryStatus.PENDING,
                NotificationEvent.kind == NotificationKind.TEST,
            )
            .limit(1)
        )
        is not None
    )


def outcomes(session: Session, user_id: int, delivery_ids: list[int]) -> list[NotificationDelivery]:
    """The test's deliveries as they stand now."""
    return list(
        session.scalars(
            select(NotificationDelivery)
            .where(
                NotificationDelivery.user_id == user_id,
                NotificationDelivery.id.in_(delivery_ids),
            )
            .order_by(NotificationDelivery.id.desc())
        )
    )


def send_soon(delivery_ids: list[int]) -> list[Future[Outcome | None]]:
    """Attempt each delivery in the senders' pool; their futures."""
    return [_senders().submit(outbox.attempt, i) for i in delivery_ids]


async def wait(futures: list[Future[Outcome | None]]) -> None:
    """Until every attempt has ended, or the longest call's deadline and a grace have
    passed; holds no thread meanwhile (an attempt keeps going after a timeout here)."""
    if futures:
        await asyncio.wait(
            [asyncio.wrap_future(f) for f in futures], timeout=delivery.call_limit_s() + GRACE_S
        )


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _senders() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(SENDERS, thread_name_prefix="szbench-test"))
        return _pool[1]
