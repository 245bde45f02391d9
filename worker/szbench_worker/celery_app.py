"""The worker's entry point: the Celery app with every task registered, and the worker's
signals.

Start a worker (docs/pipeline.md, docs/operations.md)::

    celery -A szbench_worker.celery_app worker -Q cpu,score --concurrency 2
    SZBENCH_RUNNER_GPUS=0,1 celery -A szbench_worker.celery_app worker -Q gpu,score --concurrency 2

Every worker consumes the ``score`` queue (finishing evaluations) whether ``-Q`` names it
or not (:func:`_finish_evaluations_too`).

The configuration is :func:`szbench.queue.celery_config`, the same the API sends with.

The tasks are defined in :mod:`szbench_worker.tasks` with the decorator of
:mod:`szbench_worker.task_base`; this module, the entry point, imports them (to register
them) and connects the worker's signals: logging, the ``score`` queue, fresh database
connections after a fork, the start-up sweep, the refusal to start on a host that could
never run a container, the worker's id and its heartbeat thread
(:mod:`szbench_worker.heartbeat`).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import signals

from szbench import db
from szbench.config import get_settings
from szbench.logging import configure_logging, install_celery_log_context
from szbench.queue import QUEUE_SCORE, QUEUES, is_embedded
from szbench_worker import heartbeat, tasks
from szbench_worker.health import startup_fault
from szbench_worker.runner import (
    make_worker_id,
    owner_token,
    set_worker_id,
    work_dir_from_settings,
    worker_host,
)
from szbench_worker.task_base import app

log = logging.getLogger(__name__)

# What ``celery -A szbench_worker.celery_app`` finds: the app, with every task of
# ``tasks`` registered on it by that import.
__all__ = ["app", "tasks"]


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
        # Deferred: a worker of the local runner never loads the docker SDK.
        from szbench_worker import docker_runner

        if docker_runner.engine_available():
            work = work_dir_from_settings(settings)
            docker_runner.cleanup_orphans(work_dir=work)
    except Exception:
        log.exception("orphan cleanup failed")


@signals.task_received.connect  # type: ignore[untyped-decorator]
def _note_received(request: Any = None, **_: Any) -> None:
    heartbeat.note_received(request)


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def refuse_to_start(sender: Any = None, **_: Any) -> None:
    """A worker that cannot run refuses to start, before it reports ready (issue 29 item
    10): settings that contradict each other, or no way to give runs their ``/output`` on
    the engine it talks to (not root in that engine's mount namespace, and no
    ``SZBENCH_RUNNER_HELPER_IMAGE``). It would otherwise take every run task and fail it.
    A host that is only sick for now (its engine not up yet) starts, and takes runs once it
    recovers. The scheduler (``maintenance`` only) runs no container and is not judged."""
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
    if not is_embedded():
        set_worker_id(make_worker_id(worker_host(), owner_token()))


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _start_heartbeat(sender: Any = None, **_: Any) -> None:
    heartbeat.start(sender)


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _stop_heartbeat(**_: Any) -> None:
    heartbeat.stop()
