"""The pipeline's Celery tasks: thin wrappers over ``szbench_worker.pipeline``.

Names and keyword arguments are the contract with the API (``szbench.queue``). Each task
takes keyword-only ids, is idempotent and locks the rows it changes (in the pipeline).
"""

from __future__ import annotations

import logging

from szbench.notifications import outbox
from szbench.queue import (
    QUEUE_MAINTENANCE,
    TASK_FINALIZE,
    TASK_NOTIFY,
    TASK_NOTIFY_TICK,
    TASK_RECONCILE,
    TASK_RESCORE,
    TASK_RUN_RECORDING,
    TASK_SMOKE_TEST,
    TASK_START_EVALUATION,
)
from szbench_worker import pipeline, reconcile
from szbench_worker.celery_app import project_task

log = logging.getLogger(__name__)


@project_task(TASK_START_EVALUATION)
def start_evaluation(*, evaluation_id: int) -> None:
    """Create the runs of an evaluation, reuse finished ones, enqueue the rest."""
    outcome = pipeline.start_evaluation(evaluation_id)
    log.info("evaluation %s started: %s", evaluation_id, outcome)


@project_task(TASK_RUN_RECORDING)
def run_recording(*, run_id: int) -> None:
    """Run the algorithm on one recording, score it, store the result."""
    step = pipeline.run_recording(run_id)
    log.info("run %s: %s", run_id, step)


@project_task(TASK_FINALIZE)
def finalize_evaluation(*, evaluation_id: int) -> None:
    """Aggregate subject and dataset results once every recording is done."""
    pipeline.finalize_evaluation(evaluation_id)


@project_task(TASK_RESCORE)
def rescore_evaluation(*, evaluation_id: int) -> None:
    """Score stored detections again with other parameters (no container)."""
    pipeline.rescore_evaluation(evaluation_id)


@project_task(TASK_SMOKE_TEST)
def smoke_test(*, algorithm_version_id: int) -> None:
    """Accept or reject a new algorithm version on one public-sample recording."""
    outcome = pipeline.smoke_test(algorithm_version_id)
    log.info("smoke test of version %s: %s", algorithm_version_id, outcome)


@project_task(TASK_RECONCILE, queue=QUEUE_MAINTENANCE)
def reconcile_pipeline() -> None:
    """Send again the work that cannot be progressing (celery beat, every minute)."""
    report = reconcile.reconcile()
    log.info("reconciled: %s", report)


@project_task(TASK_NOTIFY, queue=QUEUE_MAINTENANCE)
def deliver_notification(*, event_id: int) -> None:
    """Make an event's notification deliveries and their first attempts."""
    attempted = outbox.deliver_event(event_id)
    log.info("notification event %s: %d attempt(s)", event_id, len(attempted))


@project_task(TASK_NOTIFY_TICK, queue=QUEUE_MAINTENANCE)
def notifications_tick() -> None:
    """Phases opening or closing, lost events, due retries (celery beat)."""
    report = outbox.tick()
    log.info("notifications tick: %s", report)
