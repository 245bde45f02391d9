"""The worker's Celery app and the one decorator that defines every task.

Start a worker (docs/pipeline.md, docs/operations.md)::

    celery -A szbench_worker.celery_app worker -Q cpu,score --concurrency 2
    SZBENCH_RUNNER_GPUS=0,1 celery -A szbench_worker.celery_app worker -Q gpu,score --concurrency 2

Every worker consumes the ``score`` queue (finishing evaluations) whether ``-Q`` names it
or not (:func:`_finish_evaluations_too`).

The configuration is :func:`szbench.queue.celery_config`, the same the API sends with.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import kombu.exceptions
import sqlalchemy.exc
from celery import Task, signals

from szbench import db
from szbench.config import get_settings
from szbench.logging import configure_logging, install_celery_log_context
from szbench.queue import MAINTENANCE_TASKS, QUEUE_CPU, QUEUE_SCORE, get_celery
from szbench_worker.runner import RunnerError, work_dir_from_settings

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


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _structured_logs(**_: Any) -> None:
    # Connecting this signal tells Celery to leave the root logger to us: one format (JSON or
    # text, SZBENCH_LOG_FORMAT) for the API and the workers, with task ids on every record.
    configure_logging()


install_celery_log_context()


@signals.celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _finish_evaluations_too(sender: Any = None, instance: Any = None, **_: Any) -> None:
    # The score queue (an evaluation's finalize, re-scores) on every worker, whatever -Q
    # says: a worker started as before this queue existed (`-Q cpu`) still finishes what it
    # ran, a host that serves only `gpu` finishes its evaluations alone, and the scheduler
    # takes a finalize at once while every run slot is busy (issue 29.9).
    if instance is not None:
        instance.app.amqp.queues.select_add(QUEUE_SCORE)


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
            work = work_dir_from_settings(settings)
            docker_runner.cleanup_orphans(work_dir=work)
    except Exception:
        log.exception("orphan cleanup failed")


# --- heartbeats, the start-up reclaim and the pool-child sweep (szbench_worker.reconcile) ---

#: When a pipeline message last arrived, on this process's monotonic clock: intervals are
#: measured here, and stored as times on the database's clock (szbench.clock).
_last_received: float | None = None


@signals.task_received.connect  # type: ignore[untyped-decorator]
def _note_received(request: Any = None, **_: Any) -> None:
    # In the worker's main process: a message arrived, so its queue was not empty just now.
    # (The maintenance queue's own messages say nothing about the pipeline's queues.)
    global _last_received
    if getattr(request, "name", None) not in MAINTENANCE_TASKS:
        _last_received = time.monotonic()


def _child_pids() -> set[int] | None:
    """This process's children (the prefork pool's), or None where /proc cannot tell."""
    pids: set[int] = set()
    try:
        for task in os.scandir("/proc/self/task"):
            with open(f"{task.path}/children", encoding="ascii") as f:
                pids.update(int(p) for p in f.read().split())
    except (OSError, ValueError):
        return None
    return pids


def _sweep_dead_owners() -> None:
    """Remove the containers, tmpfs mounts and staging folders of dead processes here."""
    settings = get_settings()
    if settings.runner_backend == "local":
        return
    from szbench_worker import docker_runner

    work = work_dir_from_settings(settings)
    removed = docker_runner.cleanup_orphans(work_dir=work)
    if removed:
        log.warning("removed %d container(s) of a pool process that died", removed)


def _remove_ended_containers() -> None:
    """Remove this host's run containers that ended long ago and were never removed."""
    settings = get_settings()
    if settings.runner_backend == "local":
        return
    from szbench_worker import docker_runner
    from szbench_worker.runner import worker_host

    try:
        client = docker_runner.connect(timeout_s=10)
    except RunnerError:
        return  # the engine is away: the health check says so
    try:
        docker_runner.remove_ended(
            client, host=worker_host(), older_than_s=settings.worker_heartbeat_timeout_s
        )
    finally:
        client.close()


class _Heartbeat(threading.Thread):
    """Writes this worker's heartbeat; sweeps at once after a pool child dies; stops taking
    runs while the host is sick.

    Runs in the worker's main process, which knows every task it holds (Celery's reserved
    requests) and every child of its pool. A child killed mid-run (kill -9, the kernel's OOM
    killer) leaves its container running and its staging folder and tmpfs in place: the
    main process, still alive, removes them as soon as the child is gone, while Celery
    hands the task back to the queue (``reject_on_worker_lost``).

    Every interval it also checks the host (:func:`szbench_worker.health.host_fault`): while
    the host lacks something every run needs (the container engine, room in a work
    directory, a service or setting a run found missing), the worker stops consuming its run
    queues (so that no run spends an algorithm's retries here) and says why in its
    heartbeat; when the host recovers it consumes them again. And it removes run
    containers of this host that ended and were never removed (an engine restart ends them
    while their runner cannot remove them).
    """

    def __init__(self, consumer: Any, beat: Any) -> None:
        super().__init__(name="szbench-heartbeat", daemon=True)
        self.consumer = consumer
        self.beat = beat
        self.stopped = threading.Event()
        #: Since when (monotonic) a slot has been free without receiving anything.
        self._free_since: float | None = None
        #: The run queues this worker stopped consuming while its host is sick.
        self._paused: list[str] = []
        #: The run queues it consumes again after a pause (checked while the host is fit).
        self._consumed: list[str] = []
        self._said: str | None = None

    def check_host(self) -> None:
        """Stop or resume taking runs as the host's health says (see the class)."""
        from szbench.queue import QUEUES
        from szbench_worker.health import host_fault

        if not any(q in QUEUES for q in self.beat.queues):
            return  # the scheduler: it runs no container, its host needs no engine
        fault = host_fault()
        self.beat.fault = fault.public if fault else None
        self.beat.fault_kind = fault.kind if fault else None
        if fault and not self._paused:
            self._paused = [q for q in self.beat.queues if q in QUEUES]
            self._consumed = []
            log.error(
                "this host cannot run containers (%s: %s): taking no runs",
                fault.kind,
                fault.detail,
            )
            for queue in self._paused:
                # Thread-safe: the consumer's own loop runs it.
                self.consumer.call_soon(self.consumer.cancel_task_queue, queue)
        elif fault and fault.public != self._said:
            log.error("this host still cannot run containers (%s: %s)", fault.kind, fault.detail)
        self._said = fault.public if fault else None
        if not fault and self._paused:
            log.warning("this host can run containers again: taking runs from %s", self._paused)
            for queue in self._paused:
                self.consumer.call_soon(self.consumer.add_task_queue, queue)
            self._consumed = self._paused
            self._paused = []
        elif not fault:
            self._resume_lost()

    def _resume_lost(self) -> None:
        """Consume again a run queue that a healthy worker does not consume: Celery does not
        keep the order of the calls scheduled on its consumer (a pause and a resume a moment
        apart, around a task that held the consumer, once left the queue cancelled)."""
        consumer = self.consumer.task_consumer
        if consumer is None:
            return
        for queue in self._consumed:
            if not consumer.consuming_from(queue):
                log.warning("consuming run queue %s again (its resume was lost)", queue)
                self.consumer.call_soon(self.consumer.add_task_queue, queue)

    def sample(self) -> Any:
        from celery.worker import state as worker_state

        from szbench.queue import TASK_RUN_RECORDING

        held = [r for r in worker_state.reserved_requests if r.name not in MAINTENANCE_TASKS]
        # Runs waiting here for their next retry (a countdown) are held too, without a slot.
        waiting = list(worker_state.scheduled_requests)
        run_ids = [
            int(r.kwargs["run_id"])
            for r in held + waiting
            if r.name == TASK_RUN_RECORDING and isinstance(r.kwargs, dict) and "run_id" in r.kwargs
        ]
        now = time.monotonic()
        if len(held) >= self.beat.concurrency or self.beat.fault:
            # (A sick host's free slot receives nothing by its own choice: it proves nothing.)
            self._free_since = None
        else:
            if self._free_since is None:
                self._free_since = now
            if _last_received is not None and _last_received > self._free_since:
                self._free_since = _last_received
        self.beat.run_ids = run_ids
        self.beat.free_for_s = None if self._free_since is None else now - self._free_since
        return self.beat

    def run(self) -> None:
        from szbench_worker import reconcile

        settings = get_settings()
        interval = settings.worker_heartbeat_interval_s
        tick = min(1.0, interval)
        prefork = (
            self.consumer.pool is not None and "prefork" in type(self.consumer.pool).__module__
        )
        children = _child_pids() if prefork else None
        last = time.monotonic()
        while not self.stopped.wait(tick):
            if prefork:
                now_children = _child_pids()
                if now_children is None or children is None or children - now_children:
                    try:
                        _sweep_dead_owners()
                    except Exception:
                        log.exception("sweep after a pool process exit failed")
                children = now_children
            if time.monotonic() - last >= interval:
                last = time.monotonic()
                try:
                    self.check_host()
                    _remove_ended_containers()
                except Exception:
                    log.exception("the host check failed")
                try:
                    reconcile.write_heartbeat(self.sample())
                except Exception:
                    # The database is away: the reconciler will see this worker as dead if it
                    # stays away past the timeout, which is then true enough.
                    log.warning("could not write the heartbeat", exc_info=True)


_heartbeat: _Heartbeat | None = None


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def refuse_to_start(sender: Any = None, **_: Any) -> None:
    """A worker that cannot run refuses to start, before it reports ready (issue 29 item
    10): settings that contradict each other, or no way to give runs their ``/output`` on
    the engine it talks to (not root in that engine's mount namespace, and no
    ``SZBENCH_RUNNER_HELPER_IMAGE``). It would otherwise take every run task and fail it.
    A host that is only sick for now (its engine not up yet) starts, and takes runs once it
    recovers. The scheduler (``maintenance`` only) runs no container and is not judged."""
    from szbench.queue import QUEUES, is_embedded
    from szbench_worker.health import startup_fault

    if sender is None or is_embedded():
        return
    queues = set(sender.app.amqp.queues.consume_from or ())
    if not queues & set(QUEUES):
        return
    reason = startup_fault(get_settings())
    if reason is None:
        return
    # Logging is not set up yet at this signal: say it where the operator looks.
    message = f"this worker cannot run containers, so it does not start: {reason}"
    log.critical(message)
    sys.stderr.write(f"szbench worker: {message}\n")
    raise SystemExit(1)


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _name_worker(**_: Any) -> None:
    # Before the pool forks, so every child claims runs in this worker's name.
    from szbench.queue import is_embedded
    from szbench_worker import reconcile
    from szbench_worker.docker_runner import owner_token
    from szbench_worker.runner import worker_host

    if not is_embedded():
        reconcile.set_worker_id(reconcile.make_worker_id(worker_host(), owner_token()))


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _start_heartbeat(sender: Any = None, **_: Any) -> None:
    global _heartbeat
    from szbench_worker import reconcile
    from szbench_worker.runner import worker_host

    me = reconcile.worker_id()
    if not me or sender is None:
        return
    host = worker_host()
    queues = [q.name for q in sender.task_consumer.queues] if sender.task_consumer else []
    beat = reconcile.Beat(
        id=me,
        host=host,
        node=sender.hostname,
        queues=queues,
        concurrency=int(sender.controller.concurrency or 1),
        run_ids=[],
        free_for_s=None,
    )
    _heartbeat = _Heartbeat(sender, beat)
    try:
        _heartbeat.check_host()
        reconcile.write_heartbeat(_heartbeat.sample())
        # A predecessor on this host that was killed held runs: they come back now, not
        # after the broker's visibility timeout. Then one pass of the reconciler.
        reconcile.reclaim_dead_predecessors(host, me)
        reconcile.reconcile()
    except Exception:
        log.exception("start-up reconciliation failed (the periodic one will follow)")
    _heartbeat.start()


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _stop_heartbeat(**_: Any) -> None:
    from szbench_worker import reconcile

    if _heartbeat is None:
        return
    _heartbeat.stopped.set()
    try:
        reconcile.forget_worker(_heartbeat.beat.id)
    except Exception:
        log.warning("could not remove this worker's heartbeat", exc_info=True)


# Register the tasks (they import `app` from here).
from szbench_worker import tasks  # noqa: E402, F401
