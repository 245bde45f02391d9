"""The one decorator that defines every task, the base class that records a task failed for
good, and the app they register on (the platform's: :func:`szbench.queue.get_celery`).

Below the tasks (:mod:`szbench_worker.tasks`) and the worker's entry point
(:mod:`szbench_worker.celery_app`, which imports the tasks to register them): the tasks take
their decorator from here, so nothing imports the entry point back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import kombu.exceptions
import sqlalchemy.exc
from celery import Task
from celery.exceptions import WorkerLostError
from celery.worker import state as worker_state

from szbench.config import get_settings
from szbench.queue import QUEUE_CPU, QUEUES, get_celery, send_task
from szbench_worker.pipeline import record_task_failure, remove_run_leftovers
from szbench_worker.runner import RunnerError

log = logging.getLogger(__name__)

#: Faults of the platform, not of the submitter: retried with exponential backoff.
#: (ImageError, a subclass of RunnerError, never escapes the pipeline: it is handled there.)
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (
    RunnerError,
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    kombu.exceptions.OperationalError,
    ConnectionError,
)

# The platform's app, not a second one: tasks retry and hand back through the broker the
# API sends to. It is the default for every thread of this process, because Celery runs a
# task from the registry of the thread's current app (the embedded worker's thread and a
# threads pool's threads have none of their own).
app = get_celery()
app.set_default()
app.set_current()


class PipelineTask(Task):  # type: ignore[misc]
    """Records a task that failed for good, so that no evaluation waits forever.

    A task interrupted by its worker's shutdown has not failed: it is handed back to its
    queue (a cold shutdown interrupts the run in progress; its container and staging are
    removed before the hand-back, so before the worker exits), and a task whose worker
    process died is re-queued by Celery itself (``reject_on_worker_lost``). Neither is
    recorded as a failure.
    """

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        kwargs = dict(kwargs or {})
        if isinstance(exc, WorkerLostError):
            return
        if worker_state.should_terminate is not None or worker_state.should_stop is not None:
            routing_key = (self.request.delivery_info or {}).get("routing_key")
            queue = routing_key if routing_key in QUEUES else QUEUE_CPU
            if (
                worker_state.should_terminate is not None
                and threading.current_thread() is threading.main_thread()
            ):
                # A cold shutdown raises into the task from a signal handler, on whatever line
                # it is: possibly between the engine creating a container and the runner
                # holding it, or inside the runner's cleanup. Now that the exception has
                # unwound the run, remove what it left. (Only the main thread is interrupted
                # so; a task on another thread may share this process with runs in progress.)
                try:
                    removed = remove_run_leftovers()
                except Exception:
                    log.exception("could not remove what the interrupted %s left", self.name)
                else:
                    if removed:
                        log.warning("removed %d container(s) the interrupted run left", removed)
            log.warning("%s %s interrupted by shutdown (%s): handed back", self.name, kwargs, exc)
            try:
                send_task(self.name, queue=queue, **kwargs)
                return
            except Exception:
                log.exception("could not hand %s %s back; recording it", self.name, kwargs)
        try:
            record_task_failure(
                self.name, kwargs, exc, platform=isinstance(exc, INFRASTRUCTURE_ERRORS)
            )
        except Exception:
            log.exception("could not record the failure of %s %s", self.name, kwargs)


F = TypeVar("F", bound=Callable[..., Any])


def project_task(name: str, *, queue: str = QUEUE_CPU) -> Callable[[F], Any]:
    """Define a pipeline task: late acks, rejected when its worker is lost, its queue,
    retries with backoff for infrastructure faults only, keyword-only arguments."""
    settings = get_settings()

    def decorator(fn: F) -> Any:
        return app.task(
            name=name,
            base=PipelineTask,
            queue=queue,
            acks_late=True,
            reject_on_worker_lost=True,
            autoretry_for=INFRASTRUCTURE_ERRORS,
            retry_backoff=True,
            retry_backoff_max=settings.task_retry_backoff_max_s,
            retry_jitter=True,
            max_retries=settings.task_max_retries,
            typing=True,
            # Only this app holds the task: a shared task would be copied into any other app
            # (Celery's default one), whose retries go to a broker nobody consumes.
            shared=False,
        )(fn)

    return decorator
