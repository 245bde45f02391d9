"""Starting an evaluation: one run per recording, finished ones reused, the others enqueued."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.db import session_scope
from szbench.models import (
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Recording,
    RecordingRun,
)
from szbench.queue import TASK_FINALIZE, TASK_RESCORE, TASK_RUN_RECORDING, enqueue_after_commit
from szbench_scoring import SCORER_VERSION
from szbench_worker.pipeline.reuse import reuse_finished_runs
from szbench_worker.pipeline.rows import insert_ignoring_conflicts, lock_evaluation, now


@dataclass
class StartOutcome:
    """What :func:`start_evaluation` did (for logs and tests)."""

    runs: int = 0
    reused: int = 0
    enqueued: list[int] = dataclasses.field(default_factory=list)
    skipped: str = ""


def start_evaluation(evaluation_id: int) -> StartOutcome:
    """Create the evaluation's runs, reuse finished ones, and enqueue the others.

    Idempotent: the runs exist at most once each; a second delivery re-enqueues only the
    runs that are still unfinished (whose tasks are no-ops if they already ran).
    """
    with session_scope() as session:
        evaluation = lock_evaluation(session, evaluation_id)
        if evaluation is None:
            return StartOutcome(skipped="no such evaluation")
        if evaluation.status.finished:
            return StartOutcome(skipped=f"evaluation is {evaluation.status.value}")
        if evaluation.kind == EvaluationKind.RESCORE:
            enqueue_after_commit(
                session, TASK_RESCORE, queue=evaluation.queue, evaluation_id=evaluation_id
            )
            return StartOutcome(skipped="re-score")
        if evaluation.status == EvaluationStatus.QUEUED:
            evaluation.status = EvaluationStatus.RUNNING
            evaluation.started_at = evaluation.started_at or now(session)
        if not evaluation.scorer_version:
            evaluation.scorer_version = SCORER_VERSION
        _create_runs(session, evaluation)
        outcome = StartOutcome()
        if evaluation.reuse_runs:
            outcome.reused = reuse_finished_runs(session, evaluation)
        finished = session.scalar(
            select(func.count(RecordingRun.id)).where(
                RecordingRun.evaluation_id == evaluation.id, RecordingRun.finished_at.is_not(None)
            )
        )
        total = session.scalar(
            select(func.count(RecordingRun.id)).where(RecordingRun.evaluation_id == evaluation.id)
        )
        # Absolute, not incremented: a second delivery of this task recounts the same.
        evaluation.recordings_total = int(total or 0)
        evaluation.recordings_done = int(finished or 0)
        outcome.runs = evaluation.recordings_total
        pending = session.scalars(
            select(RecordingRun.id)
            .where(RecordingRun.evaluation_id == evaluation.id, RecordingRun.finished_at.is_(None))
            .order_by(RecordingRun.id)
        ).all()
        for run_id in pending:
            enqueue_after_commit(session, TASK_RUN_RECORDING, queue=evaluation.queue, run_id=run_id)
        outcome.enqueued = list(pending)
        if not pending:
            enqueue_after_commit(
                session, TASK_FINALIZE, queue=evaluation.queue, evaluation_id=evaluation_id
            )
        return outcome


def _create_runs(session: Session, evaluation: Evaluation) -> None:
    """One run per recording, by ``INSERT ... ON CONFLICT DO NOTHING`` on the unique
    (evaluation, recording): a second start creates nothing."""
    recordings = session.execute(
        select(Recording.id, Recording.checksum)
        .where(Recording.dataset_version_id == evaluation.dataset_version_id)
        .order_by(Recording.id)
    ).all()
    if not recordings:
        return
    rows = [
        {
            "evaluation_id": evaluation.id,
            "recording_id": rec_id,
            "image_digest": evaluation.image_digest,
            "recording_checksum": checksum,
            "scorer_version": evaluation.scorer_version,
            "submitter_message": "",
            "admin_log": "",
            "attempts": 0,
            "worker_host": "",
        }
        for rec_id, checksum in recordings
    ]
    stmt = insert_ignoring_conflicts(session, RecordingRun.__table__).on_conflict_do_nothing(
        index_elements=["evaluation_id", "recording_id"]
    )
    session.execute(stmt, rows)
