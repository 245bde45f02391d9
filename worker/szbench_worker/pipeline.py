"""The evaluation pipeline's logic, free of Celery so that it is tested without a broker.

Each public function is one task's body (``szbench_worker.tasks`` wraps them thinly). Every
one is idempotent: it may run twice, concurrently, or after a crash half-way, and the
database ends the same. The rules that make it so (docs/pipeline.md):

- a row is changed only under its lock (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
  serialises writers), after re-checking the state that decides the change;
- one :class:`RecordingRun` per (evaluation, recording), by a unique constraint, created with
  ``INSERT ... ON CONFLICT DO NOTHING``;
- a run counts towards progress in the same transaction that sets its ``finished_at``, so a
  retried task can never count it twice, and a result computed by a second, redundant
  delivery is dropped when the run is already finished;
- the dataset-level aggregation happens in one transaction that moves the evaluation from
  RUNNING to DONE, so it happens exactly once;
- follow-up tasks are sent after the commit they depend on (``enqueue_after_commit``).

The container never sees the reference annotations: scoring happens here, in the worker,
after the run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench.config import Settings, get_settings
from szbench.db import session_scope
from szbench.errors import SzbenchError
from szbench.models import (
    AlgorithmVersion,
    Dataset,
    DatasetKind,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Recording,
    RecordingRun,
    RunOutcome,
    SubjectResult,
    VersionStatus,
)
from szbench.queue import (
    TASK_FINALIZE,
    TASK_RESCORE,
    TASK_RUN_RECORDING,
    enqueue_after_commit,
)
from szbench_scoring import (
    SCORER_VERSION,
    AnnotationError,
    Annotations,
    RecordingScore,
    ScoringParams,
    aggregate,
    parse_annotations,
    read_annotations,
    score_recording,
)
from szbench_scoring.report import DatasetReport, RecordingResult
from szbench_worker import gpu as gpu_assignment
from szbench_worker import reconcile
from szbench_worker.runner import (
    CONTAINER_OUTPUT_DIR,
    ImageError,
    ImageRefused,
    Limits,
    Runner,
    RunnerError,
    RunResult,
    output_name_for,
    worker_host,
)

log = logging.getLogger(__name__)

#: Shown to a submitter when the platform, not the algorithm, failed on a recording.
INFRA_MESSAGE = (
    "The platform could not run or score this recording (an infrastructure fault, not your "
    "algorithm's); an administrator has the details."
)


class InfrastructureError(RunnerError):
    """A fault of the platform (retried by the task, never charged to the submitter)."""


# --- dependencies (injectable for tests) -------------------------------------------------


@dataclass
class Dependencies:
    """What the pipeline needs from the worker host: a runner and a way to get images.

    ``resolve_image(version)`` makes the version's image available to ``runner`` and
    returns the reference to run it by (the digest); it raises :class:`ImageError` when the
    image cannot be had (an unusable upload, a missing tarball).
    """

    runner: Runner
    resolve_image: Callable[[AlgorithmVersion], str]


_deps: Dependencies | None = None


def set_dependencies(deps: Dependencies | None) -> None:
    """Use ``deps`` in this process (tests, the CLI's trusted local runner); None resets."""
    global _deps
    _deps = deps


def get_dependencies() -> Dependencies:
    """The runner of this worker (``SZBENCH_RUNNER_BACKEND``) and its image resolver."""
    global _deps
    if _deps is None:
        from szbench_worker import images
        from szbench_worker.runner import make_runner

        settings = get_settings()
        runner = make_runner(settings)
        _deps = Dependencies(runner=runner, resolve_image=images.resolver_for(runner, settings))
    return _deps


def remove_run_leftovers() -> int:
    """Remove what this process's interrupted runs left (containers, staging directories).

    For a task that a cold shutdown interrupted, once the interruption has unwound it (see
    ``PipelineTask.on_failure``). Returns the number of containers removed; 0 when this
    process never made a runner, so none ran here.
    """
    if _deps is None:
        return 0
    return _deps.runner.remove_leftovers()


# --- small helpers -----------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


_Row = TypeVar("_Row", Evaluation, RecordingRun, AlgorithmVersion)


def _lock(session: Session, model: type[_Row], row_id: int) -> _Row | None:
    """The row, locked for this transaction (FOR UPDATE on PostgreSQL; SQLite serialises
    writers) and re-read, so a concurrent task's change is never overwritten."""
    return session.execute(
        select(model)
        .where(model.id == row_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def _lock_evaluation(session: Session, evaluation_id: int) -> Evaluation | None:
    return _lock(session, Evaluation, evaluation_id)


def _lock_run(session: Session, run_id: int) -> RecordingRun | None:
    return _lock(session, RecordingRun, run_id)


def _insert(session: Session, table: Any) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for the session's database."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise RuntimeError(f"unsupported database {dialect!r}")


def work_dir(settings: Settings | None = None) -> Path:
    """Where per-run outputs are written before they are stored (then removed)."""
    settings = settings or get_settings()
    return Path(settings.pipeline_work_dir or settings.data_dir / "work")


def scoring_params(evaluation: Evaluation) -> ScoringParams:
    """The evaluation's scoring parameters (SzCORE's defaults when none are stored)."""
    known = {f.name for f in dataclasses.fields(ScoringParams)}
    return ScoringParams(
        **{k: v for k, v in (evaluation.scoring_params or {}).items() if k in known}
    )


def run_limits(settings: Settings, dataset: Dataset) -> Limits:
    """The worker's limits, overridden by the dataset's ``run_limits``."""
    base = Limits.from_settings(settings)
    fields = {f.name for f in dataclasses.fields(Limits)}
    overrides = {k: v for k, v in (dataset.run_limits or {}).items() if k in fields}
    integers = ("memory_bytes", "pids", "tmpfs_bytes", "output_bytes", "output_files", "log_bytes")
    for key in integers:
        if key in overrides:
            overrides[key] = int(overrides[key])
    return dataclasses.replace(base, **overrides)


def _reference(dataset_version: DatasetVersion, recording: Recording) -> Annotations:
    return read_annotations(Path(dataset_version.path) / recording.annotations_path)


def _store_counts(run: RecordingRun, score: RecordingScore) -> None:
    run.event_tp, run.event_fp = score.event.tp, score.event.fp
    run.event_fn, run.event_ref_true = score.event.fn, score.event.ref_true
    run.sample_tp, run.sample_fp = score.sample.tp, score.sample.fp
    run.sample_fn, run.sample_ref_true = score.sample.fn, score.sample.ref_true
    run.num_samples = score.sample.num_samples


def _clear_counts(run: RecordingRun) -> None:
    for name in ("event", "sample"):
        for count in ("tp", "fp", "fn", "ref_true"):
            setattr(run, f"{name}_{count}", None)
    run.num_samples = None


def _hypothesis(run: RecordingRun, recording: Recording) -> Annotations | None:
    """The stored detections parsed again (None when the run produced none)."""
    if run.outcome != RunOutcome.OK or run.detections_tsv is None:
        return None
    name = output_name_for(Path(recording.eeg_path))
    return parse_annotations(run.detections_tsv, source=f"{CONTAINER_OUTPUT_DIR}/{name}")


def _score_run(
    run: RecordingRun, recording: Recording, dataset_version: DatasetVersion, params: ScoringParams
) -> None:
    """Score the run's stored detections (no detections when it failed) and store counts.

    A hypothesis that the scorer refuses (its duration gives another mask length than the
    reference's) turns the run into INVALID_OUTPUT, with the scorer's reason.
    """
    reference = _reference(dataset_version, recording)
    hypothesis = _hypothesis(run, recording)
    try:
        score = score_recording(reference, hypothesis, params)
    except AnnotationError as exc:
        if hypothesis is None:
            raise
        run.outcome = RunOutcome.INVALID_OUTPUT
        run.submitter_message = f"{exc.path}: {exc.reason}"
        score = score_recording(reference, None, params)
    _store_counts(run, score)


def _bump_progress(session: Session, evaluation_id: int, n: int = 1) -> tuple[int, int]:
    done, total = session.execute(
        update(Evaluation)
        .where(Evaluation.id == evaluation_id)
        .values(recordings_done=Evaluation.recordings_done + n)
        .returning(Evaluation.recordings_done, Evaluation.recordings_total)
    ).one()
    return int(done), int(total)


def _mark_infrastructure_failure(run: RecordingRun, detail: str) -> None:
    run.outcome = RunOutcome.INFRASTRUCTURE_ERROR
    run.submitter_message = INFRA_MESSAGE
    run.admin_log = (run.admin_log + "\n" if run.admin_log else "") + detail
    _clear_counts(run)


# --- start -------------------------------------------------------------------------------


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
        evaluation = _lock_evaluation(session, evaluation_id)
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
            evaluation.started_at = evaluation.started_at or _now()
        if not evaluation.scorer_version:
            evaluation.scorer_version = SCORER_VERSION
        _create_runs(session, evaluation)
        outcome = StartOutcome()
        if evaluation.reuse_runs:
            outcome.reused = _reuse_finished_runs(session, evaluation)
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
    stmt = _insert(session, RecordingRun.__table__).on_conflict_do_nothing(
        index_elements=["evaluation_id", "recording_id"]
    )
    session.execute(stmt, rows)


_COPIED = (
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


def _reuse_finished_runs(session: Session, evaluation: Evaluation) -> int:
    """Copy finished runs of the same (image digest, recording checksum, scorer version)."""
    pending = session.scalars(
        select(RecordingRun)
        .where(RecordingRun.evaluation_id == evaluation.id, RecordingRun.finished_at.is_(None))
        .order_by(RecordingRun.id)
    ).all()
    if not pending:
        return 0
    checksums = {run.recording_checksum for run in pending}
    donors: dict[str, RecordingRun] = {}
    candidates = session.scalars(
        select(RecordingRun)
        .join(Evaluation, Evaluation.id == RecordingRun.evaluation_id)
        .where(
            RecordingRun.image_digest == evaluation.image_digest,
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
        _copy_run(run, donor)
        _score_run(run, run.recording, dataset_version, params)
        reused += 1
    session.flush()
    return reused


def _copy_run(run: RecordingRun, donor: RecordingRun) -> None:
    for name in _COPIED:
        setattr(run, name, getattr(donor, name))
    run.reused_from_id = donor.reused_from_id or donor.id
    run.admin_log = (
        f"Reused the result of run {run.reused_from_id} (same image, recording, scorer)."
    )
    if run.finished_at is None:
        run.finished_at = _now()


# --- one recording -----------------------------------------------------------------------


@dataclass
class _Claim:
    run_id: int
    evaluation_id: int
    image: AlgorithmVersion
    recording_path: Path
    limits: Limits
    queue: str
    expected_digest: str


@dataclass
class RunStep:
    """What :func:`run_recording` did (for logs and tests)."""

    ran_container: bool = False
    stored: bool = False
    skipped: str = ""
    progress: tuple[int, int] | None = None


def run_recording(run_id: int) -> RunStep:
    """Run the algorithm on one recording, validate, score and store; bump progress.

    Infrastructure faults raise (:class:`RunnerError`, database errors) so that the task
    retries with backoff; everything the algorithm does ends in a stored outcome.
    """
    settings = get_settings()
    claim = _claim_run(run_id, settings)
    if isinstance(claim, RunStep):
        return claim
    deps = get_dependencies()
    gpus = gpu_assignment.gpus_for_queue(claim.queue, settings)
    base = work_dir(settings) / f"eval-{claim.evaluation_id}"
    base.mkdir(parents=True, exist_ok=True)
    # Unique per attempt: two deliveries of one run on one host must not share a folder.
    output_dir = Path(tempfile.mkdtemp(prefix=f"run-{run_id}-", dir=base))
    try:
        if not settings.image_is_allowed(
            digest=claim.expected_digest, reference=claim.image.image_reference
        ):
            # The operator narrowed SZBENCH_ALLOWED_IMAGES after this run was queued: the
            # run is refused for good (not retried, not the submitter's fault).
            return _store_refused(run_id, NOT_ALLOWED_MESSAGE)
        try:
            image = deps.resolve_image(claim.image)
        except ImageRefused as exc:
            # Over the archive limits (lowered since the upload): the submitter's fault, kept
            # off the engine, not retried.
            return _store_result(run_id, _refused_image_result(exc, claim.expected_digest))
        except ImageError as exc:
            # The image was accepted once (it has a digest) and is gone or unloadable now:
            # the platform's problem, recorded for an admin, not retried forever.
            return _store_infrastructure_failure(run_id, f"image unavailable: {exc}")
        local_digest = getattr(deps.runner, "digest", None)
        if isinstance(local_digest, str) and local_digest != claim.expected_digest:
            # A trusted local-process runner runs its own command, whatever the image: never
            # let it stand in for an uploaded algorithm.
            raise InfrastructureError(
                "this worker has no Docker engine (local-process runner) and cannot run images"
            )
        result = deps.runner.run(
            image=image,
            recording=claim.recording_path,
            output_dir=output_dir,
            limits=claim.limits,
            gpus=gpus,
        )
        return _store_result(run_id, result)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)


def _claim_run(run_id: int, settings: Settings) -> _Claim | RunStep:
    with session_scope() as session:
        run = _lock_run(session, run_id)
        if run is None:
            return RunStep(skipped="no such run")
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        if run.finished_at is not None:
            # Already done (a redelivery): make sure the follow-up was not lost.
            _maybe_finalize(session, evaluation)
            return RunStep(skipped="already finished")
        if evaluation.status.finished:
            return RunStep(skipped=f"evaluation is {evaluation.status.value}")
        run.attempts += 1
        run.started_at = _now()
        # Which worker holds it now: the reconciler sends it again if that one dies.
        run.claimed_by = reconcile.worker_id()
        recording = run.recording
        dataset_version = recording.dataset_version
        return _Claim(
            run_id=run.id,
            evaluation_id=evaluation.id,
            image=evaluation.algorithm_version,
            recording_path=Path(dataset_version.path) / recording.eeg_path,
            limits=run_limits(settings, dataset_version.dataset),
            queue=evaluation.queue,
            expected_digest=evaluation.image_digest,
        )


def _maybe_finalize(session: Session, evaluation: Evaluation) -> None:
    if (
        not evaluation.status.finished
        and evaluation.recordings_total > 0
        and evaluation.recordings_done >= evaluation.recordings_total
    ):
        enqueue_after_commit(
            session, TASK_FINALIZE, queue=evaluation.queue, evaluation_id=evaluation.id
        )


def _finish_run(session: Session, run: RecordingRun) -> tuple[int, int]:
    run.finished_at = _now()
    session.flush()
    done, total = _bump_progress(session, run.evaluation_id)
    if done >= total:
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        enqueue_after_commit(
            session, TASK_FINALIZE, queue=evaluation.queue, evaluation_id=run.evaluation_id
        )
    return done, total


def _store_result(run_id: int, result: RunResult) -> RunStep:
    with session_scope() as session:
        run = _lock_run(session, run_id)
        if run is None:
            return RunStep(ran_container=True, skipped="run deleted meanwhile")
        if run.finished_at is not None:
            # Another delivery finished it first; its result stands, this one is dropped.
            return RunStep(ran_container=True, skipped="already finished by another attempt")
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        recording = run.recording
        run.outcome = result.outcome
        run.exit_code = result.exit_code
        run.submitter_message = result.submitter_message
        run.admin_log = result.admin_log
        run.worker_host = result.worker_host
        run.wall_time_s = result.duration_s
        run.peak_memory_bytes = result.peak_memory_bytes
        if result.gpu is not None:
            run.gpu_model = result.gpu.model or ",".join(result.gpu.device_ids)
            run.gpu_driver = result.gpu.driver
        if result.image_digest and result.image_digest != run.image_digest:
            run.admin_log += (
                f"\n[worker] ran image {result.image_digest}, expected {run.image_digest}"
            )
        run.detections_tsv = None
        if result.outcome is RunOutcome.OK and result.output_tsv is not None:
            run.detections_tsv = Path(result.output_tsv).read_text(encoding="utf-8")
        try:
            _score_run(run, recording, recording.dataset_version, scoring_params(evaluation))
        except (AnnotationError, OSError) as exc:
            # The reference itself is unreadable: the dataset's fault, for an admin.
            _mark_infrastructure_failure(run, f"scoring failed: {exc}")
        progress = _finish_run(session, run)
        return RunStep(ran_container=True, stored=True, progress=progress)


NOT_ALLOWED_MESSAGE = (
    "This host runs only the algorithm images on its allow-list (SZBENCH_ALLOWED_IMAGES); "
    "this image is not on it. Ask the platform's operators."
)


IMAGE_REFUSED_MESSAGE = (
    "The algorithm's image archive is over this host's image limits and was not loaded."
)


def _refused_image_result(exc: ImageRefused, digest: str) -> RunResult:
    return RunResult(
        outcome=RunOutcome.CRASHED,
        exit_code=None,
        duration_s=0.0,
        peak_memory_bytes=None,
        submitter_message=IMAGE_REFUSED_MESSAGE,
        admin_log=f"[worker] image refused before loading: {exc}",
        output_tsv=None,
        annotations=None,
        image_digest=digest,
        worker_host=worker_host(),
    )


def _store_refused(run_id: int, message: str) -> RunStep:
    """End a run that policy forbids: the submitter sees why; it counts as a platform fault
    (never against a quota) and is not retried."""
    with session_scope() as session:
        run = _lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(skipped="already finished")
        _mark_infrastructure_failure(run, f"refused: {message}")
        run.submitter_message = message
        progress = _finish_run(session, run)
        return RunStep(stored=True, progress=progress)


def _store_infrastructure_failure(run_id: int, detail: str) -> RunStep:
    with session_scope() as session:
        run = _lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(skipped="already finished")
        _mark_infrastructure_failure(run, detail)
        progress = _finish_run(session, run)
        return RunStep(stored=True, progress=progress)


# --- finalize ----------------------------------------------------------------------------


def finalize_evaluation(evaluation_id: int) -> bool:
    """Aggregate the runs into subject and dataset results and mark the evaluation DONE.

    Returns True when this call did it. Runs exactly once per evaluation: the status moves
    from RUNNING to DONE (or FAILED) in the same transaction, under the evaluation's lock.
    """
    with session_scope() as session:
        evaluation = _lock_evaluation(session, evaluation_id)
        if evaluation is None or evaluation.status.finished:
            return False
        return _finalize_locked(session, evaluation)


def _finalize_locked(session: Session, evaluation: Evaluation) -> bool:
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
        evaluation.finished_at = _now()
        evaluation.message = (
            f"{len(broken)} of {len(runs)} recordings could not be run because of a platform "
            "fault; no score was computed. An administrator can re-run the evaluation."
        )
        return True
    report = _aggregate(session, evaluation, runs)
    _store_report(session, evaluation, report)
    failed = sum(run.outcome != RunOutcome.OK for run in runs)
    evaluation.status = EvaluationStatus.DONE
    evaluation.finished_at = _now()
    # Scored as no detections so that the figures exist; whether they rank is the
    # benchmark's failed-recordings rule (szbench.leaderboards.service), not implied here.
    evaluation.message = (
        f"{failed} of {len(runs)} recordings produced no usable output: an incomplete result. "
        "Its figures count them as no detections; the benchmark's rule for failed recordings "
        "decides whether it is ranked."
        if failed
        else ""
    )
    return True


def _aggregate(session: Session, evaluation: Evaluation, runs: Any) -> DatasetReport:
    """The scorer's report from the stored detections of every run."""
    params = scoring_params(evaluation)
    dataset_version = session.get_one(DatasetVersion, evaluation.dataset_version_id)
    results = []
    for run in runs:
        recording = run.recording
        reference = _reference(dataset_version, recording)
        hypothesis = _hypothesis(run, recording)
        results.append(
            RecordingResult(
                subject=recording.subject,
                recording=recording.key,
                score=score_recording(reference, hypothesis, params),
                hypothesis_missing=hypothesis is None,
            )
        )
    subjects = session.scalars(
        select(Recording.subject).where(
            Recording.dataset_version_id == evaluation.dataset_version_id
        )
    ).all()
    return aggregate(results, subjects=set(subjects), params=params)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _metric_columns(event: Any, sample: Any) -> dict[str, float | None]:
    return {
        "event_sensitivity": _num(event.sensitivity),
        "event_precision": _num(event.precision),
        "event_f1": _num(event.f1),
        "event_fp_rate": _num(event.fp_rate),
        "sample_sensitivity": _num(sample.sensitivity),
        "sample_precision": _num(sample.precision),
        "sample_f1": _num(sample.f1),
        "sample_fp_rate": _num(sample.fp_rate),
    }


def _counts_dict(score: RecordingScore) -> dict[str, dict[str, int]]:
    return {
        kind: {
            "tp": c.tp,
            "fp": c.fp,
            "fn": c.fn,
            "ref_true": c.ref_true,
            "num_samples": c.num_samples,
            "fs_hz": c.fs_hz,
        }
        for kind, c in (("event", score.event), ("sample", score.sample))
    }


def report_dict(report: DatasetReport, *, scorer_version: str) -> dict[str, Any]:
    """The whole report as stored in ``DatasetResult.report``.

    Top level: szcore-evaluation's ``sample_results``/``event_results`` (per-subject mean
    and ``*_std``), then ``pooled`` (the ratios of the summed counts), the summed counts,
    the parameters and the scorer version.
    """
    return {
        **report.to_szcore_json(),
        "pooled": report.to_szcore_json(pooled=True),
        "pooled_counts": _counts_dict(report.pooled),
        "params": dataclasses.asdict(report.params),
        "scorer_version": scorer_version,
        "subjects": len(report.subjects),
        "recordings": len(report.recordings),
        "missing_hypotheses": report.n_missing,
    }


def _store_report(session: Session, evaluation: Evaluation, report: DatasetReport) -> None:
    for subject in report.subjects:
        session.execute(
            _insert(session, SubjectResult.__table__)
            .values(
                evaluation_id=evaluation.id,
                subject=subject.subject,
                recordings=subject.n_recordings,
                counts={
                    **_counts_dict(subject.counts),
                    "missing_hypotheses": subject.n_missing,
                },
                **_metric_columns(subject.event, subject.sample),
            )
            .on_conflict_do_nothing(index_elements=["evaluation_id", "subject"])
        )
    session.execute(
        _insert(session, DatasetResult.__table__)
        .values(
            evaluation_id=evaluation.id,
            subjects=len(report.subjects),
            recordings=len(report.recordings),
            missing_hypotheses=report.n_missing,
            report=report_dict(report, scorer_version=evaluation.scorer_version),
            created_at=_now(),
            **_metric_columns(report.event_mean, report.sample_mean),
        )
        .on_conflict_do_nothing(index_elements=["evaluation_id"])
    )


# --- re-score ----------------------------------------------------------------------------


def rescore_evaluation(evaluation_id: int) -> bool:
    """Score the source evaluation's stored detections with this evaluation's parameters.

    No container runs. Copies each source run (outcome, detections, provenance) with its new
    counts, then aggregates, all in one transaction.
    """
    with session_scope() as session:
        evaluation = _lock_evaluation(session, evaluation_id)
        if evaluation is None or evaluation.status.finished:
            return False
        if evaluation.source_evaluation_id is None:
            evaluation.status = EvaluationStatus.FAILED
            evaluation.message = "A re-score needs a source evaluation."
            evaluation.finished_at = _now()
            return False
        evaluation.status = EvaluationStatus.RUNNING
        evaluation.started_at = evaluation.started_at or _now()
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
            _copy_run(run, source)
            session.add(run)
            if run.outcome != RunOutcome.INFRASTRUCTURE_ERROR:
                _score_run(run, source.recording, dataset_version, params)
        session.flush()
        evaluation.recordings_total = len(sources)
        evaluation.recordings_done = len(sources)
        return _finalize_locked(session, evaluation)


# --- smoke test --------------------------------------------------------------------------


@dataclass
class SmokeOutcome:
    status: VersionStatus | None
    message: str = ""
    evaluations_queued: int = 0


def smoke_test(algorithm_version_id: int) -> SmokeOutcome:
    """Run a new algorithm version on one public-sample recording; accept or reject it.

    On success the version becomes ACTIVE and a full evaluation is queued on every active
    held-out dataset version. A run that the algorithm botches rejects it with the
    submitter-safe reason. Infrastructure faults raise (the task retries) and leave the
    version waiting: they never count against the submitter.
    """
    settings = get_settings()
    with session_scope() as session:
        version = _lock(session, AlgorithmVersion, algorithm_version_id)
        if version is None:
            return SmokeOutcome(None, "no such algorithm version")
        if version.status not in (
            VersionStatus.PENDING,
            VersionStatus.SMOKE_TESTING,
            VersionStatus.REJECTED,
        ):
            return SmokeOutcome(version.status, "already decided")
        version.status = VersionStatus.SMOKE_TESTING
        version.status_message = "Smoke test running."
    if not settings.image_is_allowed(
        digest=version.image_digest, reference=version.image_reference
    ):
        return _decide_smoke(algorithm_version_id, None, rejected_because=NOT_ALLOWED_MESSAGE)
    deps = get_dependencies()
    try:
        image = deps.resolve_image(version)
    except ImageError as exc:
        return _decide_smoke(algorithm_version_id, None, rejected_because=str(exc))
    digest = image if image.startswith("sha256:") else (version.image_digest or image)
    with session_scope() as session:
        version = session.get_one(AlgorithmVersion, algorithm_version_id)
        if not version.image_digest:
            version.image_digest = digest
        recording = _smoke_recording(session, settings)
        if recording is None:
            log.warning(
                "no public-sample dataset %r: activating version %s without a smoke test",
                settings.smoke_test_dataset,
                algorithm_version_id,
            )
            run_id = None
        else:
            run_id = _smoke_run(session, version, recording)
    if run_id is not None:
        run_recording(run_id)
    return _decide_smoke(algorithm_version_id, run_id)


def _smoke_recording(session: Session, settings: Settings) -> Recording | None:
    if not settings.smoke_test_dataset:
        return None
    return session.scalars(
        select(Recording)
        .join(DatasetVersion, DatasetVersion.id == Recording.dataset_version_id)
        .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        .where(Dataset.slug == settings.smoke_test_dataset, DatasetVersion.is_active.is_(True))
        .order_by(DatasetVersion.id.desc(), Recording.id)
    ).first()


def _smoke_run(session: Session, version: AlgorithmVersion, recording: Recording) -> int:
    evaluation = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == version.id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
            Evaluation.dataset_version_id == recording.dataset_version_id,
            Evaluation.image_digest == version.image_digest,
        )
        .order_by(Evaluation.id.desc())
    ).first()
    if evaluation is None or evaluation.status.finished:
        evaluation = Evaluation(
            algorithm_version_id=version.id,
            dataset_version_id=recording.dataset_version_id,
            kind=EvaluationKind.SMOKE_TEST,
            status=EvaluationStatus.RUNNING,
            image_digest=version.image_digest or "",
            scorer_version=SCORER_VERSION,
            scoring_params=dataclasses.asdict(ScoringParams()),
            official=False,
            published=False,
            queue="gpu" if version.wants_gpu else "cpu",
            reuse_runs=False,
            recordings_total=1,
            recordings_done=0,
            started_at=_now(),
        )
        session.add(evaluation)
        session.flush()
    run = session.scalars(
        select(RecordingRun).where(RecordingRun.evaluation_id == evaluation.id)
    ).first()
    if run is None:
        run = RecordingRun(
            evaluation_id=evaluation.id,
            recording_id=recording.id,
            image_digest=evaluation.image_digest,
            recording_checksum=recording.checksum,
            scorer_version=evaluation.scorer_version,
            attempts=0,
        )
        session.add(run)
        session.flush()
    return run.id


def _decide_smoke(
    algorithm_version_id: int, run_id: int | None, *, rejected_because: str | None = None
) -> SmokeOutcome:
    from szbench.evaluations.service import create_evaluation

    with session_scope() as session:
        version = _lock(session, AlgorithmVersion, algorithm_version_id)
        if version is None:
            return SmokeOutcome(None, "no such algorithm version")
        if version.status != VersionStatus.SMOKE_TESTING:
            return SmokeOutcome(version.status, "already decided")
        if rejected_because is not None:
            version.status = VersionStatus.REJECTED
            version.status_message = f"Smoke test failed: {rejected_because}"
            return SmokeOutcome(version.status, version.status_message)
        run = session.get(RecordingRun, run_id) if run_id is not None else None
        if run is not None and run.outcome == RunOutcome.INFRASTRUCTURE_ERROR:
            # Not the submitter's fault: back to waiting, an admin re-queues it.
            version.status = VersionStatus.PENDING
            version.status_message = (
                "The smoke test could not run because of a platform fault; it will be retried."
            )
            return SmokeOutcome(version.status, version.status_message)
        if run is not None and run.outcome != RunOutcome.OK:
            version.status = VersionStatus.REJECTED
            version.status_message = (
                f"Smoke test failed ({run.outcome.value if run.outcome else 'no result'}): "
                f"{run.submitter_message}"
            )
            return SmokeOutcome(version.status, version.status_message)
        version.status = VersionStatus.ACTIVE
        version.status_message = (
            "Smoke test passed."
            if run is not None
            else "Activated without a smoke test (none configured)."
        )
        targets = session.scalars(
            select(DatasetVersion)
            .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
            .where(Dataset.kind == DatasetKind.HELD_OUT, DatasetVersion.is_active.is_(True))
            .order_by(DatasetVersion.id)
        ).all()
        queued = 0
        for dataset_version in targets:
            try:
                with session.begin_nested():
                    create_evaluation(
                        session, algorithm_version=version, dataset_version=dataset_version
                    )
            except SzbenchError as exc:
                # One unusable dataset version (no recordings, ...) must not block the rest.
                log.warning(
                    "not queueing version %s on %s: %s", version.id, dataset_version.id, exc
                )
                continue
            queued += 1
        return SmokeOutcome(version.status, version.status_message, queued)


# --- failures the task gives up on -------------------------------------------------------


def record_task_failure(task_name: str, kwargs: dict[str, Any], exc: BaseException) -> None:
    """Record, for admins, a task that failed for good (retries exhausted or a bug).

    A run gets INFRASTRUCTURE_ERROR (so the evaluation can still finish, as FAILED); an
    evaluation that cannot start or finalize is FAILED; a smoke test goes back to PENDING.
    """
    from szbench.queue import TASK_SMOKE_TEST, TASK_START_EVALUATION

    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:]
    log.error("task %s %s failed for good: %s", task_name, kwargs, exc)
    if task_name == TASK_RUN_RECORDING and "run_id" in kwargs:
        _store_infrastructure_failure(int(kwargs["run_id"]), f"task failed for good:\n{detail}")
        return
    if (
        task_name in (TASK_START_EVALUATION, TASK_FINALIZE, TASK_RESCORE)
        and "evaluation_id" in kwargs
    ):
        with session_scope() as session:
            evaluation = _lock_evaluation(session, int(kwargs["evaluation_id"]))
            if evaluation is not None and not evaluation.status.finished:
                evaluation.status = EvaluationStatus.FAILED
                evaluation.finished_at = _now()
                evaluation.message = (
                    "The evaluation failed because of a platform fault; an administrator has "
                    "the details and can re-run it."
                )
                log.error("evaluation %s failed:\n%s", evaluation.id, detail)
        return
    if task_name == TASK_SMOKE_TEST and "algorithm_version_id" in kwargs:
        with session_scope() as session:
            version = session.get(AlgorithmVersion, int(kwargs["algorithm_version_id"]))
            if version is not None and version.status == VersionStatus.SMOKE_TESTING:
                version.status = VersionStatus.PENDING
                version.status_message = (
                    "The smoke test could not run because of a platform fault; it will be retried."
                )
