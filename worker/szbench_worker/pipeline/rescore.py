"""Re-scoring: a finished evaluation's stored detections scored with other parameters."""

from __future__ import annotations

from sqlalchemy import select

from szbench.db import session_scope
from szbench.models import DatasetVersion, EvaluationStatus, RecordingRun, RunOutcome
from szbench.notifications import events as notify
from szbench_worker.pipeline.finish import finalize_locked
from szbench_worker.pipeline.reuse import copy_run
from szbench_worker.pipeline.rows import lock_evaluation, now
from szbench_worker.pipeline.score import score_run, scoring_params


def rescore_evaluation(evaluation_id: int) -> bool:
    """Score the source evaluation's stored detections with this evaluation's parameters.

    No container runs. Copies each source run (outcome, detections, provenance) with its new
    counts, then aggregates, all in one transaction.
    """
    with session_scope() as session:
        evaluation = lock_evaluation(session, evaluation_id)
        if evaluation is None or evaluation.status.finished:
            return False
        if evaluation.source_evaluation_id is None:
            evaluation.status = EvaluationStatus.FAILED
            evaluation.message = "A re-score needs a source evaluation."
            evaluation.finished_at = now(session)
            notify.record_evaluation_end(session, evaluation)
            return False
        evaluation.status = EvaluationStatus.RUNNING
        evaluation.started_at = evaluation.started_at or now(session)
        sources = session.scalars(
            select(RecordingRun)
            .where(RecordingRun.evaluation_id == evaluation.source_evaluation_id)
            .order_by(RecordingRun.id)
        ).all()
        have = set(
            session.scalars(
                select(RecordingRun.recording_id).where(RecordingRun.evaluation_id == evaluation.id)
            )
        )
        params = scoring_params(evaluation)
        dataset_version = session.get_one(DatasetVersion, evaluation.dataset_version_id)
        for source in sources:
            if source.recording_id in have:
                continue
            run = RecordingRun(
                evaluation_id=evaluation.id,
                recording_id=source.recording_id,
                image_digest=source.image_digest,
                recording_checksum=source.recording_checksum,
                scorer_version=evaluation.scorer_version,
                attempts=0,
            )
            copy_run(session, run, source)
            session.add(run)
            if run.outcome != RunOutcome.INFRASTRUCTURE_ERROR:
                score_run(run, source.recording, dataset_version, params)
        session.flush()
        evaluation.recordings_total = len(sources)
        evaluation.recordings_done = len(sources)
        return finalize_locked(session, evaluation)
