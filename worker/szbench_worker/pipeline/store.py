"""Storing what a run ended with: under the run's lock, once, whichever delivery comes first.

A result computed by a second, redundant delivery is dropped when the run is already
finished; the run counts towards progress in the transaction that finishes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy.exc

from szbench.db import session_scope
from szbench.models import Evaluation, RunOutcome
from szbench_scoring import AnnotationError
from szbench_worker.faults import UNSTORABLE_MESSAGE, Blame, Verdict, classify
from szbench_worker.pipeline.attribution import image_of_result
from szbench_worker.pipeline.faults import mark_infrastructure_failure
from szbench_worker.pipeline.progress import finish_run
from szbench_worker.pipeline.rows import lock_run, now
from szbench_worker.pipeline.score import score_run, scoring_params
from szbench_worker.runner import RunResult, worker_host

NOT_ALLOWED_MESSAGE = (
    "This host runs only the algorithm images on its allow-list (SZBENCH_ALLOWED_IMAGES); "
    "this image is not on it. Ask the platform's operators."
)


IMAGE_REFUSED_MESSAGE = (
    "The algorithm's image was refused before it ran: its archive is over this host's image "
    "limits or cannot be loaded."
)


@dataclass
class RunStep:
    """What :func:`~szbench_worker.pipeline.run.run_recording` did (for logs and tests)."""

    ran_container: bool = False
    stored: bool = False
    skipped: str = ""
    progress: tuple[int, int] | None = None


def store_result(run_id: int, result: RunResult, *, resolved_image: str | None) -> RunStep:
    """Store the runner's result, score it and count the run (unless it is finished).

    ``resolved_image``: the image the task resolved from the evaluation's version and asked
    the runner to start; None when no image was started (refused before loading). A result
    from any other image raises :class:`~.attribution.MisattributedResult` (nothing stored,
    the task retries).

    Every text is made storable on its way to the database (:mod:`szbench.db`); a result
    the database still refuses (a value its column cannot hold) is itself an outcome that
    ends the run: ``infrastructure_error`` with fixed texts (:func:`store_unstorable`),
    never a task retried for ever while the evaluation stays running.
    """
    try:
        return _store_result(run_id, result, resolved_image=resolved_image)
    except sqlalchemy.exc.StatementError as exc:
        verdict = classify(exc)
        if verdict.blame is not Blame.PLATFORM_PERMANENT:
            raise  # the database is away: retried
        return store_unstorable(run_id, verdict)


def store_unstorable(run_id: int, verdict: Verdict) -> RunStep:
    """End a run whose result the database refused: fixed texts only (the refused ones may
    be what it cannot hold), the database's reason for admins, bounded."""
    detail = verdict.detail.replace("\0", "\\0")[:4000]
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(ran_container=True, skipped="already finished")
        mark_infrastructure_failure(run, f"[worker] the result could not be stored: {detail}")
        run.submitter_message = UNSTORABLE_MESSAGE
        run.detections_tsv = None
        progress = finish_run(session, run)
        return RunStep(ran_container=True, stored=True, progress=progress)


def _store_result(run_id: int, result: RunResult, *, resolved_image: str | None) -> RunStep:
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None:
            return RunStep(ran_container=True, skipped="run deleted meanwhile")
        if run.finished_at is not None:
            # Another delivery finished it first; its result stands, this one is dropped.
            return RunStep(ran_container=True, skipped="already finished by another attempt")
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        run.image_id = (
            None
            if resolved_image is None
            else image_of_result(evaluation.algorithm_version, resolved_image, result.image_digest)
        )
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
        if run.image_id is not None and run.image_id != run.image_digest:
            # A registry reference: its record is the manifest digest, this the image id.
            run.admin_log += f"\n[worker] ran image {run.image_id} (recorded {run.image_digest})"
        run.detections_tsv = None
        if result.outcome is RunOutcome.OK and result.output_tsv is not None:
            run.detections_tsv = Path(result.output_tsv).read_text(encoding="utf-8")
        try:
            score_run(run, recording, recording.dataset_version, scoring_params(evaluation))
        except (AnnotationError, OSError) as exc:
            # The reference itself is unreadable: the dataset's fault, for an admin.
            mark_infrastructure_failure(run, f"scoring failed: {exc}")
        progress = finish_run(session, run)
        return RunStep(ran_container=True, stored=True, progress=progress)


def refused_image_result(verdict: Verdict, digest: str) -> RunResult:
    """The result of an image refused before it ran (over the limits, not loadable): the
    submitter's fault, no container."""
    return RunResult(
        outcome=RunOutcome.CRASHED,
        exit_code=None,
        duration_s=0.0,
        peak_memory_bytes=None,
        submitter_message=IMAGE_REFUSED_MESSAGE,
        admin_log=f"[worker] image refused before loading: {verdict.detail}",
        output_tsv=None,
        annotations=None,
        image_digest=digest,
        worker_host=worker_host(),
    )


def store_refused(run_id: int, message: str) -> RunStep:
    """End a run that policy forbids: the submitter sees why; it counts as a platform fault
    (never against a quota) and is not retried."""
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(skipped="already finished")
        mark_infrastructure_failure(run, f"refused: {message}")
        run.submitter_message = message
        progress = finish_run(session, run)
        return RunStep(stored=True, progress=progress)


def release_run(run_id: int, detail: str) -> RunStep:
    """Give a run up for a platform fault without ending it: its task is gone (acknowledged),
    so the reconciler sends it again (:attr:`RecordingRun.released_at`); ``detail`` for
    admins. The evaluation stays RUNNING instead of ending FAILED for the host's sickness."""
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(skipped="already finished")
        run.released_at = now(session)
        run.claimed_by = ""
        run.admin_log = (run.admin_log + "\n" if run.admin_log else "") + detail
        return RunStep(skipped="released for the reconciler")


def store_infrastructure_failure(run_id: int, detail: str) -> RunStep:
    """End a run that the platform failed (for good): no counts, the detail for admins."""
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None or run.finished_at is not None:
            return RunStep(skipped="already finished")
        mark_infrastructure_failure(run, detail)
        progress = finish_run(session, run)
        return RunStep(stored=True, progress=progress)
