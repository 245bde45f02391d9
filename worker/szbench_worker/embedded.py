"""The embedded worker: the pipeline's Celery tasks in a thread of the current process.

Used where there is no Redis: ``szbench serve`` in embedded mode and ``szbench evaluate``.
The broker is kombu's SQLAlchemy transport on ``data_dir/broker.sqlite3``
(:func:`szbench.queue.celery_config`), so the same task messages as in production are
sent, persisted and consumed, by the same task code; only the transport and the pool (a
``solo`` pool, or threads for ``SZBENCH_EMBEDDED_CONCURRENCY`` > 1) differ. Messages left
by an interrupted process are picked up by the next one: the tasks are idempotent.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Sequence
from typing import Any

from celery.worker import WorkController
from celery.worker import state as worker_state

from szbench import migrate
from szbench.config import get_settings
from szbench.queue import QUEUES, reset_celery

log = logging.getLogger(__name__)


class _Controller(WorkController):  # type: ignore[misc]
    """A WorkController that says when its consumer is ready (no signal handlers: a thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class EmbeddedWorker:
    """A running embedded worker; :meth:`stop` finishes the current task, then returns."""

    def __init__(self, controller: _Controller, thread: threading.Thread) -> None:
        self.controller = controller
        self.thread = thread

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Warm shutdown: the task in progress completes (or is re-delivered later)."""
        if not self.thread.is_alive():
            return
        worker_state.should_stop = 0
        self.thread.join(timeout_s)
        worker_state.should_stop = None
        if self.thread.is_alive():
            log.warning("the embedded worker did not stop within %.0f s", timeout_s)


def start_embedded_worker(
    *,
    queues: Sequence[str] = QUEUES,
    concurrency: int | None = None,
    upgrade_database: bool = True,
    ready_timeout_s: float = 60.0,
) -> EmbeddedWorker:
    """Start consuming the pipeline's tasks in a background thread of this process.

    Parameters
    ----------
    queues
        Queues to consume (both by default: a single machine does all the work).
    concurrency
        Tasks at a time (default ``SZBENCH_EMBEDDED_CONCURRENCY``); 1 uses a solo pool.
    upgrade_database
        Migrate the database to the latest schema first (the embedded SQLite file is
        created on first use).
    """
    settings = get_settings()
    if upgrade_database:
        migrate.upgrade(settings.effective_database_url)
    # The worker's app (the platform's one app) was configured at import; settings may have
    # changed since (tests, the CLI forcing the embedded broker): apply them again.
    from szbench_worker.celery_app import app

    reset_celery()
    n = concurrency or settings.embedded_concurrency
    controller = _Controller(
        app=app,
        hostname=f"embedded@{socket.gethostname()}",
        pool="solo" if n == 1 else "threads",
        concurrency=n,
        queues=list(queues),
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        ready_callback=None,
    )
    worker_state.should_stop = None
    worker_state.should_terminate = None
    # Celery runs a task from the registry of the thread's current app, and a thread without
    # one (this worker's, a threads pool's) falls back to the process default: whatever
    # touched Celery first may have made that a broker-less "default" app.
    app.set_default()

    def consume() -> None:
        app.set_current()
        controller.start()

    thread = threading.Thread(target=consume, name="szbench-embedded-worker", daemon=True)
    thread.start()
    if not controller.ready.wait(ready_timeout_s):
        raise RuntimeError("the embedded worker did not start (see the log)")
    log.info("embedded worker consuming %s with %d slot(s)", ", ".join(queues), n)
    return EmbeddedWorker(controller, thread)
