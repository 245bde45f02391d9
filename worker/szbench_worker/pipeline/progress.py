"""An evaluation's progress: a run counts once, and the last one sends the finalize task.

A run counts towards progress in the same transaction that sets its ``finished_at``, so a
retried task can never count it twice.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from szbench.models import Evaluation, RecordingRun
from szbench.queue import TASK_FINALIZE, enqueue_after_commit
from szbench_worker.pipeline.rows import now


def bump_progress(session: Session, evaluation_id: int, n: int = 1) -> tuple[int, int]:
    """Count ``n`` more finished runs (in the database, not in Python: no lost update);
    returns ``(done, total)``."""
    done, total = session.execute(
        update(Evaluation)
        .where(Evaluation.id == evaluation_id)
        .values(recordings_done=Evaluation.recordings_done + n)
        .returning(Evaluation.recordings_done, Evaluation.recordings_total)
    ).one()
    return int(done), int(total)


def finish_run(session: Session, run: RecordingRun) -> tuple[int, int]:
    """Mark the (locked) run finished and count it; the last one enqueues the finalize."""
    run.finished_at = now(session)
    session.flush()
    done, total = bump_progress(session, run.evaluation_id)
    if done >= total:
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        enqueue_after_commit(
            session, TASK_FINALIZE, queue=evaluation.queue, evaluation_id=run.evaluation_id
        )
    return done, total


def maybe_finalize(session: Session, evaluation: Evaluation) -> None:
    """Enqueue the finalize again when every run is counted (a lost follow-up is resent)."""
    if (
        not evaluation.status.finished
        and evaluation.recordings_total > 0
        and evaluation.recordings_done >= evaluation.recordings_total
    ):
        enqueue_after_commit(
            session, TASK_FINALIZE, queue=evaluation.queue, evaluation_id=evaluation.id
        )
