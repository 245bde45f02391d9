"""The smoke test: a new algorithm version runs on one public-sample recording first.

It becomes ACTIVE (and a full evaluation is queued on every active held-out dataset
version) or REJECTED with the submitter-safe reason; a platform fault leaves it waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.config import Settings, get_settings
from szbench.db import session_scope
from szbench.errors import SzbenchError
from szbench.evaluations import service as evaluations
from szbench.models import (
    AlgorithmVersion,
    Dataset,
    DatasetKind,
    DatasetVersion,
    Recording,
    RecordingRun,
    RunOutcome,
    VersionStatus,
)
from szbench.notifications import events as notify
from szbench_worker.faults import Blame, Verdict, classify
from szbench_worker.pipeline.deps import get_dependencies
from szbench_worker.pipeline.rows import lock
from szbench_worker.pipeline.run import run_recording
from szbench_worker.pipeline.store import NOT_ALLOWED_MESSAGE
from szbench_worker.runner import RunnerError

log = logging.getLogger(__name__)


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
        version = lock(session, AlgorithmVersion, algorithm_version_id)
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
    except Exception as exc:
        return _smoke_fault(algorithm_version_id, exc)
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
        try:
            run_recording(run_id)
        except Exception as exc:
            _hold(algorithm_version_id, classify(exc))
            raise
    return _decide_smoke(algorithm_version_id, run_id)


def _smoke_fault(algorithm_version_id: int, exc: Exception) -> SmokeOutcome:
    """The version's image could not be had: what that means, as
    :func:`~szbench_worker.faults.classify` judges it. Only the image's own fault rejects
    the version; a platform fault never does, and its message never names the platform's
    addresses (the registry's, a host's path)."""
    verdict = classify(exc)
    if verdict.blame is Blame.IMAGE:
        return _decide_smoke(algorithm_version_id, None, rejected_because=verdict.public)
    if verdict.blame is Blame.PLATFORM_PERMANENT and isinstance(exc, RunnerError):
        log.error("smoke test of version %s: %s", algorithm_version_id, verdict.detail)
        with session_scope() as session:
            version = lock(session, AlgorithmVersion, algorithm_version_id)
            if version is not None and version.status == VersionStatus.SMOKE_TESTING:
                version.status = VersionStatus.PENDING
                version.status_message = (
                    "The smoke test could not run because of a platform fault; an "
                    "administrator has the details."
                )
                return SmokeOutcome(version.status, version.status_message)
        return SmokeOutcome(None, "already decided")
    _hold(algorithm_version_id, verdict)
    raise exc


def _hold(algorithm_version_id: int, verdict: Verdict) -> None:
    """Say on the version why its smoke test waits (a transient platform fault: its task
    goes back to the queue or retries, and the test goes on by itself)."""
    if verdict.blame is not Blame.PLATFORM_TRANSIENT:
        return
    try:
        with session_scope() as session:
            version = lock(session, AlgorithmVersion, algorithm_version_id)
            if version is not None and version.status == VersionStatus.SMOKE_TESTING:
                version.status_message = (
                    f"Smoke test waiting: {verdict.public}; it goes on by itself once that is back."
                )
    except Exception:  # the database itself may be what is away: the fault goes on up
        log.warning("could not say why version %s's smoke test waits", algorithm_version_id)


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
    """The smoke test's one run (the evaluation is the evaluation service's, as every one)."""
    evaluation = evaluations.smoke_test_evaluation(
        session, algorithm_version=version, recording=recording
    )
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
    with session_scope() as session:
        version = lock(session, AlgorithmVersion, algorithm_version_id)
        if version is None:
            return SmokeOutcome(None, "no such algorithm version")
        if version.status != VersionStatus.SMOKE_TESTING:
            return SmokeOutcome(version.status, "already decided")
        if rejected_because is not None:
            version.status = VersionStatus.REJECTED
            version.status_message = f"Smoke test failed: {rejected_because}"
            notify.record_smoke_failure(session, version)
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
            notify.record_smoke_failure(session, version)
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
                    evaluations.create_evaluation(
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
