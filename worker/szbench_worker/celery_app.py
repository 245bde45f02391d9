"""The worker's Celery app and the one decorator that defines every task.

Start a worker (docs/pipeline.md, docs/operations.md)::

    celery -A szbench_worker.celery_app worker -Q cpu --concurrency 2
    SZBENCH_RUNNER_GPUS=0,1 celery -A szbench_worker.celery_app worker -Q gpu --concurrency 2

The configuration is :func:`szbench.queue.celery_config`, the same the API sends with.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import kombu.exceptions
import sqlalchemy.exc
from celery import Celery, Task, signals

from szbench import db
from szbench.config import get_settings
from szbench.logging import configure_logging, install_celery_log_context
from szbench.queue import QUEUE_CPU, celery_config
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

app = Celery("szbench")
app.conf.update(celery_config(get_settings()))


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
        from celery.exceptions import WorkerLostError
        from celery.worker import state as worker_state

        from szbench.queue import QUEUES, send_task
        from szbench_worker.pipeline import record_task_failure, remove_run_leftovers

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
            record_task_failure(self.name, kwargs, exc)
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
        )(fn)

    return decorator


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _structured_logs(**_: Any) -> None:
    # Connecting this signal tells Celery to leave the root logger to us: one format (JSON or
    # text, SZBENCH_LOG_FORMAT) for the API and the workers, with task ids on every record.
    configure_logging()


install_celery_log_context()


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_connections_after_fork(**_: Any) -> None:
    # A forked pool process must not share the parent's database connections.
    db.reset_engine()


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _remove_orphans(**_: Any) -> None:
    # Containers of a worker that was killed (SIGKILL, OOM, power loss) are still there:
    # remove them before taking new work. Their unacknowledged tasks come back by themselves.
    settings = get_settings()
    if settings.runner_backend == "local":
        return
    try:
        from szbench_worker import docker_runner

        if docker_runner.engine_available():
            work = settings.runner_work_dir or settings.data_dir / "runs"
            docker_runner.cleanup_orphans(work_dir=work)
    except Exception:
        log.exception("orphan cleanup failed")


# Register the tasks (they import `app` from here).
from szbench_worker import tasks  # noqa: E402, F401
