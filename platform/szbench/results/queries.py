"""Results of an evaluation: dataset level, per subject, per recording; and side by side."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from szbench.auth import policy
from szbench.disclosure import decision, ladder, release
from szbench.errors import Forbidden, NotFound, Unauthorized
from szbench.evaluations.queries import provenances
from szbench.evaluations.schemas import DatasetResultOut, RunOut, RunProvenance, SubjectResultOut
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Recording,
    RecordingRun,
    RunOutcome,
    SubjectResult,
    User,
)
from szbench.results import run_log

# The tail of its container's log that the owner of a public-sample run reads (never on
# held-out data: docs/security.md, "Dataset pages, the public sample, run logs"): 20,000
# characters hold a traceback and the lines before it, and bound what one page carries.
OWNER_LOG_TAIL_CHARS = 20_000

METRICS = (
    "event_sensitivity",
    "event_precision",
    "event_f1",
    "event_fp_rate",
    "sample_sensitivity",
    "sample_precision",
    "sample_f1",
    "sample_fp_rate",
)


def metrics_of(row: DatasetResult | SubjectResult) -> dict[str, float | None]:
    return {m: getattr(row, m) for m in METRICS}


def dataset_result(
    session: Session, evaluation: Evaluation, *, viewer: User | None
) -> DatasetResultOut:
    result = session.scalar(
        select(DatasetResult).where(DatasetResult.evaluation_id == evaluation.id)
    )
    view = decision.view_of(viewer, evaluation)
    if result is None:
        # The stored status would tell a coarse viewer when the evaluation started.
        status = (
            ""
            if view.progress == decision.ProgressDetail.COARSE
            else (f" (status {evaluation.status.value})")
        )
        raise NotFound(f"evaluation {evaluation.id} has no result yet{status}")
    return DatasetResultOut(
        evaluation_id=evaluation.id,
        subjects=result.subjects,
        recordings=result.recordings,
        missing_hypotheses=result.missing_hypotheses,
        release=view.release,
        report=release.released_report(view, result.report or {}),
        provenance=provenances(session, [evaluation], viewer=viewer)[evaluation.id],
        **released_metrics(session, [(evaluation, view)])[evaluation.id],
    )


def released_metrics(
    session: Session, shown: list[tuple[Evaluation, decision.View]]
) -> dict[int, dict[str, float | None]]:
    """Each evaluation's dataset-level figures as its view releases them (the Ladder's
    scores read in one query per submitter)."""
    scores = ladder.ladder_scores(session, [(e.id, view) for e, view in shown])
    return {
        e.id: release.released_metrics(
            view,
            metrics_of(e.result) if e.result is not None else dict.fromkeys(METRICS),
            ladder_score=scores.get(e.id),
        )
        for e, view in shown
    }


def subject_results(
    session: Session,
    evaluation: Evaluation,
    *,
    viewer: User | None,
    limit: int | None,
    offset: int = 0,
) -> tuple[list[SubjectResultOut], int]:
    """Per-subject results; Forbidden where the evaluation's disclosure keeps them hidden."""
    decision.view_of(viewer, evaluation).require_subjects(evaluation.id)
    where = SubjectResult.evaluation_id == evaluation.id
    total = session.scalar(select(func.count(SubjectResult.id)).where(where)) or 0
    query = select(SubjectResult).where(where).order_by(SubjectResult.subject).offset(offset)
    if limit is not None:
        query = query.limit(limit)
    rows = [
        SubjectResultOut(
            subject=r.subject, recordings=r.recordings, counts=r.counts or {}, **metrics_of(r)
        )
        for r in session.scalars(query)
    ]
    return rows, total


def recording_runs(
    session: Session,
    evaluation: Evaluation,
    *,
    viewer: User | None,
    outcome: RunOutcome | None = None,
    subject: str | None = None,
    limit: int | None,
    offset: int = 0,
) -> tuple[list[RunOut], int]:
    """Per-recording runs; Forbidden where the evaluation's disclosure keeps them hidden.

    Messages, exit codes and resources of held-out runs are reduced to what
    :mod:`szbench.disclosure` lets this viewer see.
    """
    view = decision.view_of(viewer, evaluation)
    view.require_run_list(evaluation.id, finished=evaluation.status.finished)
    clauses = [RecordingRun.evaluation_id == evaluation.id]
    if outcome is not None:
        clauses.append(RecordingRun.outcome == outcome)
    if subject is not None:
        clauses.append(Recording.subject == subject)
    base = select(RecordingRun).join(Recording, RecordingRun.recording_id == Recording.id)
    total = session.scalar(select(func.count()).select_from(base.where(*clauses).subquery())) or 0
    query = (
        base.where(*clauses)
        .options(joinedload(RecordingRun.recording))
        .order_by(Recording.key)
        .offset(offset)
    )
    if limit is not None:
        query = query.limit(limit)
    admin, details, resources = view.admin, view.run_details, view.run_resources
    runs = list(session.scalars(query))
    logs = _logs(session, runs) if details else {}
    items = []
    for run in runs:
        items.append(
            RunOut(
                id=run.id,
                recording_id=run.recording_id,
                recording=run.recording.key,
                subject=run.recording.subject,
                outcome=run.outcome,
                exit_code=run.exit_code if details else None,
                submitter_message=decision.run_message(view, run.outcome, run.submitter_message),
                admin_log=run.admin_log if admin else None,
                log=logs.get(run.id),
                attempts=run.attempts,
                event_tp=run.event_tp,
                event_fp=run.event_fp,
                event_fn=run.event_fn,
                event_ref_true=run.event_ref_true,
                sample_tp=run.sample_tp,
                sample_fp=run.sample_fp,
                sample_fn=run.sample_fn,
                sample_ref_true=run.sample_ref_true,
                num_samples=run.num_samples,
                has_detections=run.detections_tsv is not None,
                provenance=RunProvenance(
                    image_digest=run.image_digest,
                    recording_checksum=run.recording_checksum if view.recording_checksums else None,
                    scorer_version=run.scorer_version,
                    worker_host=run.worker_host if view.worker_hosts else None,
                    gpu_model=run.gpu_model,
                    gpu_driver=run.gpu_driver,
                    wall_time_s=run.wall_time_s if resources else None,
                    peak_memory_bytes=run.peak_memory_bytes if resources else None,
                    started_at=run.started_at if resources else None,
                    finished_at=run.finished_at if resources else None,
                    reused_from_id=run.reused_from_id,
                ),
            )
        )
    return items, total


def _logs(session: Session, runs: list[RecordingRun]) -> dict[int, str]:
    """Each run's container log tail (a reused run's is its donor's: the same image on the
    same recording), for a viewer entitled to run details."""
    limit = OWNER_LOG_TAIL_CHARS
    donors = {r.reused_from_id for r in runs if r.reused_from_id is not None}
    donor_logs: dict[int, str] = {}
    if donors:
        query = select(RecordingRun.id, RecordingRun.admin_log).where(RecordingRun.id.in_(donors))
        for donor_id, admin_log in session.execute(query):
            donor_logs[donor_id] = admin_log
    out = {}
    for run in runs:
        text = donor_logs.get(run.reused_from_id, "") if run.reused_from_id else run.admin_log
        log = run_log.container_log(text or "", run.outcome, limit=limit)
        if log is not None:
            out[run.id] = log
    return out


def detections(
    session: Session, evaluation: Evaluation, run_id: int, *, viewer: User | None
) -> str:
    run = session.get(RecordingRun, run_id)
    if run is None or run.evaluation_id != evaluation.id:
        raise NotFound(f"evaluation {evaluation.id} has no run {run_id}")
    if not decision.view_of(viewer, evaluation).detections:
        if viewer is None:
            raise Unauthorized("sign in to read detections")
        raise Forbidden(
            "detections on held-out data are kept for admins (they could carry the data out)"
        )
    if run.detections_tsv is None:
        raise NotFound(f"run {run_id} stored no detections (outcome {run.outcome})")
    return run.detections_tsv


def algorithm_results(
    session: Session,
    algorithm: Algorithm,
    *,
    viewer: User | None,
    official_only: bool,
    limit: int | None = None,
    offset: int = 0,
) -> tuple[list[Evaluation], int]:
    """The newest finished evaluation of each version on each dataset version (a page of
    them, and how many there are)."""
    clauses = [
        AlgorithmVersion.algorithm_id == algorithm.id,
        Evaluation.status == EvaluationStatus.DONE,
        Evaluation.kind != EvaluationKind.SMOKE_TEST,
        policy.visible_evaluations(viewer),
    ]
    if official_only:
        clauses.append(Evaluation.official.is_(True))
    newest = (
        select(func.max(Evaluation.id))
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .where(*clauses)
        .group_by(
            Evaluation.algorithm_version_id, Evaluation.dataset_version_id, Evaluation.official
        )
    )
    # Ids first (cheap), then whole objects for the page only.
    ids = list(
        session.scalars(
            select(Evaluation.id)
            .where(Evaluation.id.in_(newest))
            .order_by(Evaluation.dataset_version_id, Evaluation.algorithm_version_id)
        )
    )
    window = ids[offset:] if limit is None else ids[offset : offset + limit]
    if not window:
        return [], len(ids)
    rows = session.scalars(
        select(Evaluation)
        .where(Evaluation.id.in_(window))
        .options(
            joinedload(Evaluation.algorithm_version).joinedload(AlgorithmVersion.algorithm),
            joinedload(Evaluation.dataset_version)
            .joinedload(DatasetVersion.dataset)
            .defer(Dataset.run_limits),
            # The side-by-side table needs the metrics, not each whole report.
            joinedload(Evaluation.result).defer(DatasetResult.report),
        )
        .order_by(Evaluation.dataset_version_id, Evaluation.algorithm_version_id)
    ).unique()
    return list(rows), len(ids)
