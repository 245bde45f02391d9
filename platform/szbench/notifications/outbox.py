"""Driving the outbox: the deliver task's body, the periodic tick, the attempts in lanes.

Each step owns its transactions, because an attempt must be claimed (committed) before the
call and recorded after it, with no transaction open while a receiver answers:

- :func:`deliver_event` (the ``szbench.notifications.deliver`` task, sent after the commit
  that recorded the event): the event's deliveries, then their first attempts;
- :func:`tick` (celery beat every :data:`szbench.queue.NOTIFY_TICK_S`, on the maintenance queue; the
  embedded worker's ticker thread in the embedded mode): news of the phase transitions the
  phase lifecycle recorded, events whose task was lost, and every delivery due (retries).

Attempts go in lanes (:func:`send_due`): one lane per receiver (a webhook's host; the mail
server), at most :data:`LANES` lanes at once, one call at a time in each. A receiver that
lets its call run out (each call ends at its deadline, :mod:`szbench.outbound`) has the
rest of its lane wait for the next round, unclaimed, so one slow receiver costs one lane
for one deadline per round while every other user's notifications go out in the other
lanes. Every step is idempotent: a second delivery of the task, or two ticks at once, find
the deliveries made and the attempts claimed.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from szbench import queue
from szbench.db import session_scope
from szbench.notifications import delivery, events
from szbench.notifications.fanout import fan_out
from szbench.notifications.webhook import Outcome

log = logging.getLogger(__name__)

#: Receivers called at once by one round. Each call ends within its deadline (10 s by
#: default), so a round of LANES slow receivers costs LANES threads for that long.
LANES = 8


def send_due(*, event_id: int | None = None, budget_s: float | None = None) -> list[int]:
    """Make every due attempt (of one event, or all) in lanes, each claimed and recorded in
    a transaction of its own; the deliveries attempted. No lane starts a new attempt once
    ``budget_s`` has passed (the rest wait for the next round)."""
    start = time.monotonic()
    with session_scope() as session:
        due = delivery.due(session, event_id=event_id)
    lanes: dict[str, list[int]] = {}
    for delivery_id, lane in due:
        lanes.setdefault(lane, []).append(delivery_id)
    if not lanes:
        return []
    if len(lanes) == 1:
        return _run_lane(next(iter(lanes.values())), start, budget_s)
    attempted: list[int] = []
    with ThreadPoolExecutor(min(LANES, len(lanes)), thread_name_prefix="szbench-lane") as pool:
        for done in pool.map(lambda ids: _run_lane(ids, start, budget_s), lanes.values()):
            attempted += done
    return attempted


def attempt(delivery_id: int) -> Outcome | None:
    """One attempt at ``delivery_id``: claimed, made, recorded (None: not due any more)."""
    with session_scope() as session:
        job = delivery.claim(session, delivery_id)
    if job is None:
        return None
    outcome = delivery.send(job)
    with session_scope() as session:
        delivery.finish(session, delivery_id, outcome)
    log.info(
        "notification delivery %s (%s): %s",
        delivery_id,
        job.channel.value,
        "delivered" if outcome.delivered else outcome.error,
    )
    return outcome


def _run_lane(ids: list[int], start: float, budget_s: float | None) -> list[int]:
    attempted = []
    for delivery_id in ids:
        if budget_s is not None and time.monotonic() - start > budget_s:
            break
        outcome = attempt(delivery_id)
        if outcome is None:
            continue
        attempted.append(delivery_id)
        if outcome.ran_out:
            break  # a slow receiver: its other deliveries wait for the next round
    return attempted


def deliver_event(event_id: int) -> list[int]:
    """Make an event's deliveries and their first attempts."""
    with session_scope() as session:
        fan_out(session, event_id)
    return send_due(event_id=event_id)


@dataclass
class TickReport:
    """What one tick did (for the log and the tests)."""

    phase_events: list[int] = field(default_factory=list)
    fanned_out: list[int] = field(default_factory=list)
    attempted: list[int] = field(default_factory=list)


def tick() -> TickReport:
    """News of phase transitions, events not yet fanned out, due attempts."""
    report = TickReport()
    with session_scope() as session:
        report.phase_events = events.record_phase_news(session)
    with session_scope() as session:
        pending = events.unfanned(session)
    for event_id in pending:
        try:
            with session_scope() as session:
                fan_out(session, event_id)
            report.fanned_out.append(event_id)
        except Exception:
            # One event that cannot be composed must not hold up the others; it is tried
            # again next round, and logged each time.
            log.exception("could not make the deliveries of notification event %s", event_id)
    report.attempted = send_due(budget_s=queue.NOTIFY_TICK_S)
    return report
