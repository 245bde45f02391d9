"""The platform's faults, as a run records them: never charged to the submitter."""

from __future__ import annotations

from szbench.models import RecordingRun, RunOutcome
from szbench_worker.faults import PERMANENT_MESSAGE
from szbench_worker.pipeline.score import clear_counts
from szbench_worker.runner import RunnerError

#: Shown to a submitter when the platform, not the algorithm, failed on a recording.
INFRA_MESSAGE = PERMANENT_MESSAGE


class InfrastructureError(RunnerError):
    """A fault of the platform (retried by the task, never charged to the submitter)."""


def mark_infrastructure_failure(run: RecordingRun, detail: str) -> None:
    """The run failed by the platform's doing: the submitter reads :data:`INFRA_MESSAGE`,
    an admin ``detail``; no counts."""
    run.outcome = RunOutcome.INFRASTRUCTURE_ERROR
    run.submitter_message = INFRA_MESSAGE
    run.admin_log = (run.admin_log + "\n" if run.admin_log else "") + detail
    clear_counts(run)
