"""The pipeline's Celery tasks: thin wrappers over ``szbench_worker.pipeline``.

Names and keyword arguments are the contract with the API (``szbench.queue``). Each task
takes keyword-only ids, is idempotent and locks the rows it changes (in the pipeline).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from szbench.db import session_scope
from szbench.federation import centre
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
from szbench_worker import faults, health, pipeline, reconcile
from szbench_worker.task_base import project_task

log = logging.getLogger(__name__)


@project_task(TASK_START_EVALUATION)
def start_evaluation(*, evaluation_id: int) -> None:
    """Create the runs of an evaluation, reuse finished ones, enqueue the rest."""
    outcome = pipeline.start_evaluation(evaluation_id)
    log.info("evaluation %s started: %s", evaluation_id, outcome)


#: How long a task that reached a sick host waits before it goes back to its queue: the
#: worker's heartbeat thread stops consuming within a second of seeing the fault, so the
#: task goes to a healthy worker, or waits in the queue, instead of coming straight back.
HAND_BACK_PAUSE_S = 2.0


def _on_a_fit_host(task: Any, body: Callable[[], Any], **kwargs: Any) -> Any:
    """Run ``body`` unless this host lacks something every run needs; a task that finds it
    sick (before or during the run) goes back to its queue: no retry spent, no attempt
    counted unless a container ran (:mod:`szbench_worker.health`).

    A transient platform fault the run itself found (:func:`szbench_worker.faults.classify`:
    the registry or the platform's API away, the cache's disk full, a setting this host
    lacks) is noted for the host first, so that the whole worker stops taking runs until
    it is back. Any other fault is raised: retried (an infrastructure fault) or recorded.
    """
    fault = health.host_fault()
    if fault is None:
        try:
            return body()
        except Exception as exc:
            verdict = faults.classify(exc)
            if verdict.blame is not faults.Blame.PLATFORM_TRANSIENT:
                raise
            health.note(verdict)
            fault = health.host_fault()
            if fault is None:
                raise  # the host is fine: a fault of this run, retried as before
    log.warning("%s %s handed back: this host lacks %s (%s)", task.name, kwargs, fault.kind,
                fault.detail)  # fmt: skip
    time.sleep(HAND_BACK_PAUSE_S)
    send_task(task.name, queue=_queue_of(task), **kwargs)
    return None


@project_task(TASK_RUN_RECORDING)
def run_recording(*, run_id: int) -> None:
    """Run the algorithm on one recording, score it, store the result."""
    step = _on_a_fit_host(run_recording, lambda: pipeline.run_recording(run_id), run_id=run_id)
    if step is not None:
        log.info("run %s: %s", run_id, step)


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
    outcome = _on_a_fit_host(
        smoke_test,
        lambda: pipeline.smoke_test(algorithm_version_id),
        algorithm_version_id=algorithm_version_id,
    )
    if outcome is not None:
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
    report = centre.tick()
    if report is not None:
        log.info("federation tick: %s", report)
