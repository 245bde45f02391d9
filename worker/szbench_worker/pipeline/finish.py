"""Finishing an evaluation: aggregate every run into subject and dataset results, once.

The aggregation happens in the one transaction that moves the evaluation from RUNNING to
DONE (or FAILED), under the evaluation's lock, so it happens exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import changes
from szbench.db import session_scope
from szbench.models import (
    DatasetVersion,
    Evaluation,
    EvaluationStatus,
    Recording,
    RecordingRun,
    RunOutcome,
)
from szbench.notifications import events as notify
from szbench_scoring import aggregate, score_recording
from szbench_scoring.report import DatasetReport, RecordingResult
from szbench_worker.pipeline.report import store_report
from szbench_worker.pipeline.rows import lock_evaluation, now
from szbench_worker.pipeline.score import hypothesis, reference, scoring_params


def finalize_evaluation(evaluation_id: int) -> bool:
    """Aggregate the runs into subject and dataset results and mark the evaluation DONE.

    Returns True when this call did it. Runs exactly once per evaluation: the status moves
    from RUNNING to DONE (or FAILED) in the same transaction, under the evaluation's lock.
    """
    with session_scope() as session:
        evaluation = lock_evaluation(session, evaluation_id)
        if evaluation is None or evaluation.status.finished:
            return False
        return finalize_locked(session, evaluation)


def finalize_locked(session: Session, evaluation: Evaluation) -> bool:
    """:func:`finalize_evaluation` on an evaluation this transaction has locked."""
    runs = session.scalars(
        select(RecordingRun)
        .where(RecordingRun.evaluation_id == evaluation.id)
        .order_by(RecordingRun.id)
    ).all()
    if not runs or any(run.finished_at is None for run in runs):
        return False
    evaluation.recordings_done = len(runs)
    broken = [run for run in runs if run.outcome == RunOutcome.INFRASTRUCTURE_ERROR]
    if broken:
        evaluation.status = EvaluationStatus.FAILED
        evaluation.finished_at = now(session)
        evaluation.message = (
            f"{len(broken)} of {len(runs)} recordings could not be run because of a platform "
            "fault; no score was computed. An administrator can re-run the evaluation."
        )
        notify.record_evaluation_end(session, evaluation)
        return True
    report = _aggregate(session, evaluation, runs)
    store_report(session, evaluation, report)
    failed = sum(run.outcome != RunOutcome.OK for run in runs)
    evaluation.status = EvaluationStatus.DONE
    evaluation.finished_at = now(session)
    # Scored as no detections so that the figures exist; whether they rank is the
    # benchmark's failed-recordings rule (szbench.leaderboards.service), not implied here.
    evaluation.message = (
        f"{failed} of {len(runs)} recordings produced no usable output: an incomplete result. "
        "Its figures count them as no detections; the benchmark's rule for failed recordings "
        "decides whether it is ranked."
        if failed
        else ""
    )
    notify.record_evaluation_end(session, evaluation)
    # Its result shows on its pages and boards from this transaction on (the read caches).
    changes.evaluations_changed(session, [evaluation.id])
    return True


def _aggregate(
    session: Session, evaluation: Evaluation, runs: Sequence[RecordingRun]
) -> DatasetReport:
    """The scorer's report from the stored detections of every run."""
    params = scoring_params(evaluation)
    dataset_version = session.get_one(DatasetVersion, evaluation.dataset_version_id)
    results = []
    for run in runs:
        recording = run.recording
        ref = reference(dataset_version, recording)
        hyp = hypothesis(run, recording)
        results.append(
            RecordingResult(
                subject=recording.subject,
                recording=recording.key,
                score=score_recording(ref, hyp, params),
                hypothesis_missing=hyp is None,
            )
        )
    subjects = session.scalars(
        select(Recording.subject).where(
            Recording.dataset_version_id == evaluation.dataset_version_id
        )
    ).all()
    return aggregate(results, subjects=set(subjects), params=params)
