"""Driving the outbox: the deliver task's body, the periodic tick, a send made at once.

Each step owns its transactions, because an attempt must be claimed (committed) before the
call and recorded after it, with no transaction open while a receiver answers:

- :func:`deliver_event` (the ``szbench.notifications.deliver`` task, sent after the commit
  that recorded the event): the event's deliveries, then their first attempts;
- :func:`tick` (celery beat every ``notify_interval_s``, on the maintenance queue; the
  embedded worker's notifier thread in the embedded mode): phases that opened or closed,
  events whose task was lost, and every delivery due (retries), for at most one interval;
- :func:`send_due` in a request: the "send a test" button answers with the outcome.

Every step is idempotent: a second delivery of the task, or two ticks at once, find the
deliveries made and the attempts claimed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.notifications import service

log = logging.getLogger(__name__)


def send_due(
    session: Session, *, event_id: int | None = None, budget_s: float | None = None
) -> list[int]:
    """Make every due attempt (of one event, or all), each claimed and recorded in its own
    transaction of ``session``; the deliveries attempted. Stops starting new attempts once
    ``budget_s`` has passed (the rest wait for the next round)."""
    start = time.monotonic()
    ids = service.due(session, event_id=event_id)
    session.commit()
    attempted = []
    for delivery_id in ids:
        if budget_s is not None and time.monotonic() - start > budget_s:
            break
        job = service.claim(session, delivery_id)
        session.commit()
        if job is None:
            continue
        outcome = service.send(job)
        service.finish(session, delivery_id, outcome)
        session.commit()
        attempted.append(delivery_id)
        log.info(
            "notification delivery %s (%s): %s",
            delivery_id,
            job.channel.value,
            "delivered" if outcome.delivered else outcome.error,
        )
    return attempted


def deliver_event(event_id: int) -> list[int]:
    """Make an event's deliveries and their first attempts."""
    with session_scope() as session:
        service.fan_out(session, event_id)
    with session_scope() as session:
        return send_due(session, event_id=event_id)


@dataclass
class TickReport:
    """What one tick did (for the log and the tests)."""

    phase_events: list[int] = field(default_factory=list)
    fanned_out: list[int] = field(default_factory=list)
    attempted: list[int] = field(default_factory=list)


def tick() -> TickReport:
    """Phases opening or closing, events not yet fanned out, due attempts."""
    report = TickReport()
    with session_scope() as session:
        report.phase_events = service.check_phases(session)
    with session_scope() as session:
        pending = service.unfanned(session)
    for event_id in pending:
        try:
            with session_scope() as session:
                service.fan_out(session, event_id)
            report.fanned_out.append(event_id)
        except Exception:
            # One event that cannot be composed must not hold up the others; it is tried
            # again next round, and logged each time.
            log.exception("could not make the deliveries of notification event %s", event_id)
    with session_scope() as session:
        report.attempted = send_due(session, budget_s=get_settings().notify_interval_s)
    return report
