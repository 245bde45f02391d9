"""A phase's lifecycle: noticing it open or close for submissions, and what closing does.

Whether a phase takes submissions is :func:`szbench.phases.service.refusal`'s answer (its
flag and its dates), so a date passing, which nothing writes, is noticed only by looking:
:func:`check` runs on its own tick (celery beat's ``szbench.phases.tick`` every
:data:`szbench.queue.PHASES_TICK_S`; the embedded worker's ticker thread), apart from
notifications. Each change it notices

- is recorded as a :class:`~szbench.models.PhaseTransition` (the event other domains
  consume: :mod:`szbench.notifications.events` tells of it; nothing here knows who listens);
- and, when the phase closed, freezes the boards of the dataset versions it names
  (:func:`szbench.leaderboards.snapshots.take_for_phase`), in the same transaction.

The phase's state row is locked while it changes and each change has its own sequence
number, so two ticks at once record one transition. A phase new since the last look counts
as closed before; phases older than the state rows are looked at once without a transition
(migration 0011 marks them).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench import clock
from szbench.leaderboards import snapshots
from szbench.models import Phase, PhaseState, PhaseTransition
from szbench.phases.service import refusal

log = logging.getLogger(__name__)


def check(session: Session, now: datetime | None = None) -> list[PhaseTransition]:
    """Record each phase that opened or closed since the last look; the new transitions."""
    # The database's clock: ticks on several hosts agree on when a phase opened or closed.
    now = now or clock.now(session)
    known = {s.phase_id: s.is_open for s in session.scalars(select(PhaseState))}
    made: list[PhaseTransition] = []
    for phase in session.scalars(select(Phase).order_by(Phase.id)).all():
        open_now = refusal(phase, now) is None
        if phase.id in known and known[phase.id] is open_now:
            continue
        state = _locked_state(session, phase.id, now)
        if state.is_open is None:
            state.is_open, state.changed_at = open_now, now
            continue
        if state.is_open is open_now:
            continue  # another tick recorded it meanwhile
        state.is_open, state.changed_at = open_now, now
        state.changes += 1
        transition = PhaseTransition(phase_id=phase.id, seq=state.changes, opened=open_now, at=now)
        session.add(transition)
        made.append(transition)
        if not open_now:
            _snapshot_boards(session, phase)
    session.flush()
    return made


def _snapshot_boards(session: Session, phase: Phase) -> None:
    """The boards as the closing phase left them, to be cited. A board that cannot be frozen
    must not hold up the transition: it is logged, and an admin can take the snapshot by
    hand."""
    try:
        with session.begin_nested():
            snapshots.take_for_phase(session, phase)
    except Exception:
        log.exception("could not snapshot the boards of phase %s as it closed", phase.slug)


def _locked_state(session: Session, phase_id: int, now: datetime) -> PhaseState:
    dialect = session.get_bind().dialect.name
    insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(
        insert(PhaseState.__table__)
        .values(phase_id=phase_id, is_open=False, changes=0, changed_at=now)
        .on_conflict_do_nothing(index_elements=["phase_id"])
    )
    return session.scalars(
        select(PhaseState)
        .where(PhaseState.phase_id == phase_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
