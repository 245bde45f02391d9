"""The pipeline's Celery tasks: thin wrappers over ``szbench_worker.pipeline``.

Names and keyword arguments are the contract with the API (``szbench.queue``). Each task
takes keyword-only ids, is idempotent and locks the rows it changes (in the pipeline).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from szbench.db import session_scope
from szbench.notifications import outbox
from szbench.phases import lifecycle
from szbench.queue import (
    QUEUE_CPU,
    QUEUE_MAINTENANCE,
    QUEUE_SCORE,
    QUEUES,
    TASK_FEDERATION_TICK,
    TASK_FINALIZE,
    TASK_NOTIFY,
    TASK_NOTIFY_TICK,
    TASK_PHASES_TICK,
    TASK_RECONCILE,
    TASK_RESCORE,
    TASK_RUN_RECORDING,
    TASK_SMOKE_TEST,
    TASK_START_EVALUATION,
    send_task,
)
from szbench_worker import health, pipeline, reconcile
from szbench_worker.celery_app import project_task
from szbench_worker.runner import RunnerError

log = logging.getLogger(__name__)


@project_task(TASK_START_EVALUATION)
def start_evaluation(*, evaluation_id: int) -> None:
    """Create the runs of an evaluation, reuse finished ones, enqueue the rest."""
    outcome = pipeline.start_evaluation(evaluation_id)
    log.info("evaluation %s started: %s", evaluation_id, outcome)


#: How long a run task that reached a sick host waits before it goes back to its queue: the
#: worker's heartbeat thread stops consuming within a second of seeing the fault, so the
#: task goes to a healthy worker, or waits in the queue, instead of coming straight back.
HAND_BACK_PAUSE_S = 2.0


@project_task(TASK_RUN_RECORDING)
def run_recording(*, run_id: int) -> None:
    """Run the algorithm on one recording, score it, store the result."""
    fault = health.host_fault()
    if fault is None:
        try:
            step = pipeline.run_recording(run_id)
        except RunnerError:
            fault = health.host_fault()
            if fault is None:
                raise  # the host is fine: a fault of this run, retried as before
        else:
            log.info("run %s: %s", run_id, step)
            return
    # The host is sick (engine away, work directory full): going back to the queue costs
    # this run no retry, and it counts no attempt unless a container had started.
    log.warning("run %s handed back: %s", run_id, fault)
    time.sleep(HAND_BACK_PAUSE_S)
    send_task(TASK_RUN_RECORDING, queue=_queue_of(run_recording), run_id=run_id)


def _queue_of(task: Any) -> str:
    routing_key = (task.request.delivery_info or {}).get("routing_key")
    return routing_key if routing_key in QUEUES else QUEUE_CPU


@project_task(TASK_FINALIZE, queue=QUEUE_SCORE)
def finalize_evaluation(*, evaluation_id: int) -> None:
    """Aggregate subject and dataset results once every recording is done."""
    pipeline.finalize_evaluation(evaluation_id)


@project_task(TASK_RESCORE, queue=QUEUE_SCORE)
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
    """News of phase transitions, lost events, due retries (celery beat)."""
    report = outbox.tick()
    log.info("notifications tick: %s", report)


@project_task(TASK_PHASES_TICK, queue=QUEUE_MAINTENANCE)
def phases_tick() -> None:
    """Phases opening or closing by their flag or dates; closing boards frozen (celery beat)."""
    with session_scope() as session:
        made = lifecycle.check(session)
    log.info("phase lifecycle: %d transition(s)", len(made))


@project_task(TASK_FEDERATION_TICK, queue=QUEUE_MAINTENANCE)
def federation_tick() -> None:
    """A centre's round: the hub's catalogue when due, queueing, drafts, auto-publish."""
    from szbench.federation import centre

    report = centre.tick()
    if report is not None:
        log.info("federation tick: %s", report)
