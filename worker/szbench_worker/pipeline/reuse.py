"""Reusing finished runs: results are idempotent per (image digest, recording checksum,
scorer version), so a finished run's outcome and detections serve again, scored anew."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from szbench.models import DatasetVersion, Evaluation, EvaluationKind, RecordingRun, RunOutcome
from szbench_worker.pipeline.attribution import reusable_for
from szbench_worker.pipeline.rows import now
from szbench_worker.pipeline.score import score_run, scoring_params

#: What a copy takes from the run that ran the container (counts are scored again).
_COPIED = (
    "image_id",
    "outcome",
    "exit_code",
    "submitter_message",
    "detections_tsv",
    "worker_host",
    "gpu_model",
    "gpu_driver",
    "wall_time_s",
    "peak_memory_bytes",
    "started_at",
    "finished_at",
)


def reuse_finished_runs(session: Session, evaluation: Evaluation) -> int:
    """Copy finished runs of the same (image digest, recording checksum, scorer version)."""
    pending = session.scalars(
        select(RecordingRun)
        .where(RecordingRun.evaluation_id == evaluation.id, RecordingRun.finished_at.is_(None))
        .order_by(RecordingRun.id)
        # Scoring reads each run's recording: one query for all of them, not one per run.
        .options(selectinload(RecordingRun.recording))
    ).all()
    if not pending:
        return 0
    checksums = {run.recording_checksum for run in pending}
    donors: dict[str, RecordingRun] = {}
    candidates = session.scalars(
        select(RecordingRun)
        .join(Evaluation, Evaluation.id == RecordingRun.evaluation_id)
        .where(
            # Only results of this version's own image (the one rule: .attribution).
            reusable_for(evaluation.algorithm_version, evaluation.image_digest),
            RecordingRun.scorer_version == evaluation.scorer_version,
            RecordingRun.recording_checksum.in_(checksums),
            RecordingRun.finished_at.is_not(None),
            RecordingRun.outcome.is_not(None),
            RecordingRun.outcome != RunOutcome.INFRASTRUCTURE_ERROR,
            RecordingRun.evaluation_id != evaluation.id,
            # A re-score's rows are copies already; go to the runs that ran containers.
            Evaluation.kind != EvaluationKind.RESCORE,
        )
        .order_by(RecordingRun.id)
    ).all()
    for candidate in candidates:
        donors.setdefault(candidate.recording_checksum, candidate)
    params = scoring_params(evaluation)
    dataset_version = session.get_one(DatasetVersion, evaluation.dataset_version_id)
    reused = 0
    for run in pending:
        donor = donors.get(run.recording_checksum)
        if donor is None:
            continue
        copy_run(session, run, donor)
        score_run(run, run.recording, dataset_version, params)
        reused += 1
    session.flush()
    return reused


def copy_run(session: Session, run: RecordingRun, donor: RecordingRun) -> None:
    """Give ``run`` the donor's outcome, detections and provenance, pointing at the run
    that ran the container."""
    for name in _COPIED:
        setattr(run, name, getattr(donor, name))
    run.reused_from_id = donor.reused_from_id or donor.id
    run.admin_log = (
        f"Reused the result of run {run.reused_from_id} (same image, recording, scorer)."
    )
    if run.finished_at is None:
        run.finished_at = now(session)
