"""Notification events: something worth telling, recorded once.

An evaluation's end and a smoke test's failure are recorded in the transaction that makes
them happen (the worker's pipeline calls :func:`record_evaluation_end` and
:func:`record_smoke_failure`); a phase opening or closing is the phase lifecycle's own
event (:class:`~szbench.models.PhaseTransition`, :mod:`szbench.phases.lifecycle`), which
:func:`record_phase_news` turns into notification events on the notifications tick. Each
happening has one key, so recording it twice is a no-op. The deliver task is sent after
the commit that recorded the event.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import String, cast, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench import clock
from szbench.models import (
    AlgorithmVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    NotificationEvent,
    NotificationKind,
    PhaseTransition,
)
from szbench.queue import QUEUE_MAINTENANCE, TASK_NOTIFY, enqueue_after_commit, is_embedded


def _record(
    session: Session, kind: NotificationKind, key: str, *, enqueue: bool = True, **refs: int
) -> int:
    dialect = session.get_bind().dialect.name
    insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(
        insert(NotificationEvent.__table__)
        .values(kind=kind, key=key, created_at=clock.now(session), **refs)
        .on_conflict_do_nothing(index_elements=["key"])
    )
    event_id = session.scalar(select(NotificationEvent.id).where(NotificationEvent.key == key))
    assert event_id is not None
    # In the embedded mode the embedded worker's notifier picks the event up (its queue
    # carries only the pipeline's work).
    if enqueue and not is_embedded():
        enqueue_after_commit(session, TASK_NOTIFY, queue=QUEUE_MAINTENANCE, event_id=event_id)
    return event_id


def record_evaluation_end(session: Session, evaluation: Evaluation) -> int | None:
    """Record that ``evaluation`` finished or failed, in the transaction that ended it.

    Smoke tests are told by their version's outcome (:func:`record_smoke_failure`), and a
    cancellation is its owner's or an admin's own act: neither is an evaluation event.
    """
    if evaluation.kind == EvaluationKind.SMOKE_TEST:
        return None
    if evaluation.status == EvaluationStatus.DONE:
        kind = NotificationKind.EVALUATION_FINISHED
    elif evaluation.status == EvaluationStatus.FAILED:
        kind = NotificationKind.EVALUATION_FAILED
    else:
        return None
    return _record(session, kind, f"evaluation:{evaluation.id}", evaluation_id=evaluation.id)


def record_smoke_failure(session: Session, version: AlgorithmVersion) -> int:
    """Record that ``version`` failed its smoke test, in the transaction that rejected it
    (under the version's lock: a version rejected again after a re-test is a new event)."""
    earlier = session.scalar(
        select(func.count(NotificationEvent.id)).where(
            NotificationEvent.algorithm_version_id == version.id,
            NotificationEvent.kind == NotificationKind.SMOKE_TEST_FAILED,
        )
    )
    return _record(
        session,
        NotificationKind.SMOKE_TEST_FAILED,
        f"smoke:{version.id}:{int(earlier or 0) + 1}",
        algorithm_version_id=version.id,
    )


def record_test(session: Session, user_id: int) -> int:
    """A test notification to one user (its deliveries are made by the caller at once)."""
    key = f"test:{user_id}:{secrets.token_hex(8)}"
    return _record(session, NotificationKind.TEST, key, enqueue=False, user_id=user_id)


def _phase_key(phase_id: int, seq: int) -> str:
    return f"phase:{phase_id}:{seq}"


def record_phase_news(session: Session, limit: int = 100) -> list[int]:
    """A notification event for each phase transition not told yet; the new events' ids.

    The key is the transition's (``phase:<id>:<seq>``), so a transition is told once
    however many ticks see it. The tick that records them fans them out itself: no task.
    """
    key = literal("phase:") + cast(PhaseTransition.phase_id, String) + ":"
    key = key + cast(PhaseTransition.seq, String)
    untold = session.execute(
        select(PhaseTransition.phase_id, PhaseTransition.seq, PhaseTransition.opened)
        .outerjoin(NotificationEvent, NotificationEvent.key == key)
        .where(NotificationEvent.id.is_(None))
        .order_by(PhaseTransition.id)
        .limit(limit)
    ).all()
    made = []
    for phase_id, seq, opened in untold:
        kind = NotificationKind.PHASE_OPENED if opened else NotificationKind.PHASE_CLOSED
        made.append(
            _record(session, kind, _phase_key(phase_id, seq), enqueue=False, phase_id=phase_id)
        )
    session.flush()
    return made


def unfanned(session: Session, limit: int = 100) -> list[int]:
    """Events whose deliveries are not made yet (their task was lost, or the tick's own)."""
    return list(
        session.scalars(
            select(NotificationEvent.id)
            .where(NotificationEvent.fanned_out_at.is_(None))
            .order_by(NotificationEvent.id)
            .limit(limit)
        )
    )
