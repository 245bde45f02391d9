"""Claiming a run before its container starts: attempts, start time, the claiming worker,
and everything the run needs read while the lock is held (none is held during the run)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from szbench.config import Settings
from szbench.db import session_scope
from szbench.models import AlgorithmVersion, Dataset, Evaluation
from szbench_worker.pipeline.progress import maybe_finalize
from szbench_worker.pipeline.rows import lock_run, now
from szbench_worker.pipeline.store import RunStep
from szbench_worker.runner import Limits, worker_id


@dataclass
class Claim:
    """A claimed run: what :func:`~szbench_worker.pipeline.run.run_recording` runs."""

    run_id: int
    evaluation_id: int
    image: AlgorithmVersion
    # Where the dataset version's file is registered (on the main host); another host
    # fetches it by ``recording_checksum`` (:mod:`szbench_worker.recordings`).
    recording_path: Path
    recording_checksum: str
    limits: Limits
    queue: str
    expected_digest: str


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


def claim_run(run_id: int, settings: Settings) -> Claim | RunStep:
    """The claimed run, or why it is not run (gone, finished, its evaluation finished)."""
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None:
            return RunStep(skipped="no such run")
        evaluation = session.get_one(Evaluation, run.evaluation_id)
        if run.finished_at is not None:
            # Already done (a redelivery): make sure the follow-up was not lost.
            maybe_finalize(session, evaluation)
            return RunStep(skipped="already finished")
        if evaluation.status.finished:
            return RunStep(skipped=f"evaluation is {evaluation.status.value}")
        run.attempts += 1
        run.started_at = now(session)
        # Which worker holds it now: the reconciler sends it again if that one dies.
        run.claimed_by = worker_id()
        run.released_at = None
        recording = run.recording
        dataset_version = recording.dataset_version
        return Claim(
            run_id=run.id,
            evaluation_id=evaluation.id,
            image=evaluation.algorithm_version,
            recording_path=Path(dataset_version.path) / recording.eeg_path,
            recording_checksum=run.recording_checksum or recording.checksum,
            limits=run_limits(settings, dataset_version.dataset),
            queue=evaluation.queue,
            expected_digest=evaluation.image_digest,
        )


def unclaim_run(run_id: int) -> None:
    """Take back the claim of a run whose container never started (a platform fault before
    it: the registry or the platform's API away): the attempt is not counted, and the run
    is waiting again, not held by this worker."""
    with session_scope() as session:
        run = lock_run(session, run_id)
        if run is None or run.finished_at is not None or run.claimed_by != worker_id():
            return
        run.attempts = max(0, run.attempts - 1)
        run.started_at = None
        run.claimed_by = ""
