"""What platform fault holds an unfinished evaluation, in a sentence for everyone.

Without it a submitter sees plain "running" while nothing can move: the task queue is away,
no worker serves the evaluation's queue, or every worker that does cannot run containers
(its engine is away or its work directory is full: ``worker_heartbeats.fault``, written by
the worker's health check). It says nothing about the algorithm or the data. The database
being away needs no sentence: then the API answers 503 itself.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import clock
from szbench.config import get_settings
from szbench.models import Evaluation, WorkerHeartbeat
from szbench.queue import TASK_FINALIZE, is_embedded, queue_for


def platform_hold(session: Session, evaluation: Evaluation) -> str | None:
    """Why ``evaluation`` cannot progress now for the platform's reasons; ``None`` when
    nothing known holds it (or it is over, or this is the embedded mode)."""
    settings = get_settings()
    if evaluation.status.finished or is_embedded(settings):
        return None
    from szbench.ops.service import check_broker

    if check_broker() is not None:
        return "The task queue is unreachable; the evaluation goes on when it is back."
    # Heartbeats are written on the database's clock; this host's may differ (szbench.clock).
    since = clock.now(session) - timedelta(seconds=settings.worker_heartbeat_timeout_s)
    beats = session.scalars(select(WorkerHeartbeat).where(WorkerHeartbeat.last_seen_at >= since))
    queue = evaluation.queue
    if 0 < evaluation.recordings_total <= evaluation.recordings_done:
        queue = queue_for(TASK_FINALIZE, queue)  # every run stored: it waits to be finished
    serving = [b for b in beats if queue in (b.queues or ())]
    if not serving:
        return f"No worker serves the {queue} queue now; the evaluation waits for one."
    if queue == evaluation.queue and all(b.fault for b in serving):
        # (Finishing needs no container: a host that cannot run one still finishes.)
        faults = sorted({b.fault for b in serving if b.fault})
        return (
            f"The workers of the {queue} queue cannot run containers now "
            f"({'; '.join(faults)}); the evaluation goes on when they recover."
        )
    return None
