"""One recording: claim the run, get the image, run the container (no lock held), store."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from szbench.config import Settings, get_settings
from szbench_worker import gpu as gpu_assignment
from szbench_worker import recordings
from szbench_worker.faults import Blame, classify
from szbench_worker.pipeline.claim import claim_run, unclaim_run
from szbench_worker.pipeline.deps import get_dependencies
from szbench_worker.pipeline.faults import InfrastructureError
from szbench_worker.pipeline.store import (
    NOT_ALLOWED_MESSAGE,
    RunStep,
    refused_image_result,
    store_infrastructure_failure,
    store_refused,
    store_result,
)
from szbench_worker.runner import RunnerError


def work_dir(settings: Settings | None = None) -> Path:
    """Where per-run outputs are written before they are stored (then removed)."""
    settings = settings or get_settings()
    return Path(settings.pipeline_work_dir or settings.data_dir / "work")


def run_recording(run_id: int) -> RunStep:
    """Run the algorithm on one recording, validate, score and store; bump progress.

    Infrastructure faults raise (:class:`RunnerError`, database errors) so that the task
    retries with backoff; everything the algorithm does ends in a stored outcome.
    """
    settings = get_settings()
    claim = claim_run(run_id, settings)
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
            return store_refused(run_id, NOT_ALLOWED_MESSAGE)
        try:
            image = deps.resolve_image(claim.image)
        except Exception as exc:
            return _before_the_container(run_id, claim.expected_digest, exc)
        local_digest = getattr(deps.runner, "digest", None)
        if isinstance(local_digest, str) and local_digest != claim.expected_digest:
            # A trusted local-process runner runs its own command, whatever the image: never
            # let it stand in for another algorithm (an image, or another command).
            raise InfrastructureError(
                "this worker runs only its own trusted local command "
                f"({local_digest}), not {claim.expected_digest}"
            )
        with contextlib.ExitStack() as held:
            # In place on the main host; fetched by checksum into this host's cache
            # elsewhere, verified before every run and held (never evicted) until the run is
            # over. A fetch that fails is judged like the image's (the platform's API away,
            # the cache's disk full: the host's fault, no try spent).
            try:
                recording = held.enter_context(
                    recordings.located(claim.recording_path, claim.recording_checksum, settings)
                )
            except Exception as exc:
                return _before_the_container(run_id, claim.expected_digest, exc)
            result = deps.runner.run(
                image=image,
                recording=recording.path,
                output_dir=output_dir,
                limits=claim.limits,
                gpus=gpus,
            )
        return store_result(run_id, result, resolved_image=image)
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)


def _before_the_container(run_id: int, digest: str, exc: Exception) -> RunStep:
    """What a failure to get the image or the recording means for the run, as
    :func:`~szbench_worker.faults.classify` judges it: the image's fault ends the run
    ``crashed`` (not retried), a permanent platform fault ends it ``infrastructure_error``;
    a transient one (the registry, the platform's API, the cache's disk away) or a bug
    raises, and the run counts no attempt (no container ran), so that its task goes back to
    the queue or retries without the algorithm's tries spent."""
    verdict = classify(exc)
    if verdict.blame is Blame.IMAGE:
        return store_result(run_id, refused_image_result(verdict, digest), resolved_image=None)
    if verdict.blame is Blame.PLATFORM_PERMANENT and isinstance(exc, RunnerError):
        return store_infrastructure_failure(run_id, verdict.detail)
    unclaim_run(run_id)
    raise exc
