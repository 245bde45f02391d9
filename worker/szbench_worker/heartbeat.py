"""The worker's heartbeat thread: its heartbeat, the sweep after a pool child dies, and no
runs taken while the host is sick (:class:`Heartbeat`).

Started and stopped by the worker's signals (:mod:`szbench_worker.celery_app`) in the
worker's main process; what it writes is read by the reconciler
(:mod:`szbench_worker.reconcile`) and the pages.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery.worker import state as worker_state

from szbench.config import get_settings
from szbench.queue import MAINTENANCE_TASKS, QUEUES, TASK_RUN_RECORDING
from szbench_worker import reconcile
from szbench_worker.health import host_fault
from szbench_worker.runner import RunnerError, work_dir_from_settings, worker_host, worker_id

log = logging.getLogger(__name__)

#: When a pipeline message last arrived, on this process's monotonic clock: intervals are
#: measured here, and stored as times on the database's clock (szbench.clock).
_last_received: float | None = None


def note_received(request: Any = None) -> None:
    """A message arrived (Celery's ``task_received``, in the worker's main process), so its
    queue was not empty just now."""
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
    # Deferred here and below: a worker of the local runner never loads the docker SDK.
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


class Heartbeat(threading.Thread):
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

    def __init__(self, consumer: Any, beat: reconcile.Beat) -> None:
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

    def sample(self) -> reconcile.Beat:
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


_heartbeat: Heartbeat | None = None


def start(sender: Any) -> None:
    """Write this worker's first heartbeat, send again what dead predecessors on this host
    held, reconcile once, and start the thread (Celery's ``worker_ready``; ``sender`` is the
    worker's consumer). Nothing outside a named worker (the embedded mode)."""
    global _heartbeat
    me = worker_id()
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
    _heartbeat = Heartbeat(sender, beat)
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


def stop() -> None:
    """Stop the thread and remove this worker's heartbeat (Celery's ``worker_shutdown``): its
    claims are no longer held."""
    if _heartbeat is None:
        return
    _heartbeat.stopped.set()
    try:
        reconcile.forget_worker(_heartbeat.beat.id)
    except Exception:
        log.warning("could not remove this worker's heartbeat", exc_info=True)
