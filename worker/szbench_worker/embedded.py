"""The embedded worker: the pipeline's Celery tasks in a thread of the current process.

Used where there is no Redis: ``szbench serve`` in embedded mode and ``szbench evaluate``.
The broker is kombu's SQLAlchemy transport on ``data_dir/broker.sqlite3``
(:func:`szbench.queue.celery_config`), so the same task messages as in production are
sent, persisted and consumed, by the same task code; only the transport and the pool (a
``solo`` pool, or threads for ``SZBENCH_EMBEDDED_CONCURRENCY`` > 1) differ. Messages left
by an interrupted process are picked up by the next one: the tasks are idempotent.

A process killed mid-run (kill -9, a closed terminal) leaves its container running and the
message it was working on consumed but never acknowledged: kombu's SQLAlchemy transport has
no visibility timeout, so that message never comes back. Each embedded worker therefore
starts with :func:`recover_interrupted`: it removes the containers and staging folders of
dead processes, and, when it is the only embedded worker on this data directory (an
exclusive lock on ``data_dir/embedded-worker.lock``, which every live embedded worker
holds shared), sends again the task of every
unfinished evaluation or run that has no message waiting in the queue. The transport also
never deletes a message once consumed, it only hides it; the sole worker deletes the hidden
ones, so the queue file stays the size of what is waiting.
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import socket
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery.worker import WorkController
from celery.worker import state as worker_state
from sqlalchemy import select

from szbench import migrate
from szbench import queue as task_queue
from szbench.config import Settings, get_settings
from szbench.db import session_scope
from szbench.federation import centre
from szbench.models import Evaluation, EvaluationKind, EvaluationStatus, RecordingRun
from szbench.notifications import outbox
from szbench.phases import lifecycle
from szbench.queue import (
    QUEUE_CPU,
    QUEUE_SCORE,
    QUEUES,
    TASK_FINALIZE,
    TASK_RESCORE,
    TASK_RUN_RECORDING,
    TASK_START_EVALUATION,
    reset_celery,
    send_task,
)
from szbench_worker.celery_app import app
from szbench_worker.runner import work_dir_from_settings

log = logging.getLogger(__name__)


class _Controller(WorkController):  # type: ignore[misc]
    """A WorkController that says when its consumer is ready (no signal handlers: a thread)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class _Notifier(threading.Thread):
    """The periodic work of the embedded mode, which has no celery beat: at start, then
    every :data:`szbench.queue.NOTIFY_TICK_S`, the phase lifecycle (phases opening or
    closing, closing boards frozen), then the notifications tick (news, new events, due retries)."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(name="szbench-notifier", daemon=True)
        self.interval_s = interval_s
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            # A database that is busy or away now may be back at the next round.
            try:
                with session_scope() as session:
                    lifecycle.check(session)
            except Exception:
                log.exception("phase lifecycle tick failed")
            try:
                outbox.tick()
            except Exception:
                log.exception("notifications tick failed")
            try:
                # A centre's federation round: cheap without a subscription, and it reads
                # the hub's catalogue only when due.
                centre.tick()
            except Exception:
                log.exception("federation tick failed")
            self.stopped.wait(self.interval_s)


class EmbeddedWorker:
    """A running embedded worker; :meth:`stop` finishes the current task, then returns."""

    def __init__(
        self,
        controller: _Controller,
        thread: threading.Thread,
        lock_fd: int | None = None,
        recovery: Recovery | None = None,
        notifier: _Notifier | None = None,
    ) -> None:
        self.controller = controller
        self.thread = thread
        self.lock_fd = lock_fd
        self.recovery = recovery or Recovery()
        self.notifier = notifier

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Warm shutdown: the task in progress completes (or is re-delivered later)."""
        if self.notifier is not None:
            self.notifier.stopped.set()
            self.notifier.join(timeout_s)
        if self.thread.is_alive():
            worker_state.should_stop = 0
            self.thread.join(timeout_s)
            worker_state.should_stop = None
            if self.thread.is_alive():
                log.warning("the embedded worker did not stop within %.0f s", timeout_s)
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # releases the data directory's lock
            self.lock_fd = None


# --- recovery after an interrupted process -----------------------------------------------


@dataclass
class Recovery:
    """What :func:`recover_interrupted` did (for logs and tests)."""

    containers_removed: int = 0
    sole_worker: bool = False
    resent: list[tuple[str, int]] = field(default_factory=list)
    consumed_deleted: int = 0


def _lock_data_dir(settings: Settings) -> tuple[int, bool]:
    """This process's lock on the data directory's embedded queue, and whether it is the
    only embedded worker there (an exclusive lock; then it recovers, and :func:`_share`
    makes the lock shared). Every live embedded worker holds the lock, shared, for its
    whole life, so that a later one never takes a live one's work for interrupted work;
    the kernel releases it when its holder dies, however it dies."""
    data_dir = Path(settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "embedded-worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        # Another live worker: wait for its recovery (if it is recovering) to finish.
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd, False
    return fd, True


def _share(fd: int) -> None:
    """Turn the sole worker's exclusive lock into a shared one, once it has recovered:
    other embedded workers may start beside it from then on."""
    fcntl.flock(fd, fcntl.LOCK_SH)


def _sweep_dead_owners(settings: Settings) -> int:
    """Remove the run containers, tmpfs mounts and staging folders of dead processes."""
    if settings.runner_backend == "local":
        return 0
    try:
        # Deferred: the embedded mode without a Docker engine never loads the docker SDK.
        from szbench_worker.docker_runner import cleanup_orphans, engine_available

        if not engine_available():
            return 0
        return cleanup_orphans(work_dir=work_dir_from_settings(settings))
    except Exception:
        log.exception("orphan cleanup failed")
        return 0


def _waiting_messages(settings: Settings) -> set[tuple[str, int]]:
    """(task name, id) of every message waiting in the embedded queue.

    Read from the transport's own tables: a consumed message stays there, invisible, so only
    the visible ones are waiting. A message this cannot read counts as nothing waiting,
    which at worst sends its task once more (every task is idempotent).
    """
    path = Path(settings.data_dir) / "broker.sqlite3"
    if not path.is_file():
        return set()
    waiting: set[tuple[str, int]] = set()
    conn = sqlite3.connect(path, timeout=30)
    try:
        rows = conn.execute("SELECT payload FROM kombu_message WHERE visible").fetchall()
    except sqlite3.OperationalError:  # no table yet: nothing was ever sent
        return set()
    finally:
        conn.close()
    for (payload,) in rows:
        try:
            message = json.loads(payload)
            body = message["body"]
            if message.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            _, kwargs, _ = json.loads(body)
            task = message["headers"]["task"]
        except (ValueError, KeyError, TypeError):
            continue
        for key in ("evaluation_id", "run_id"):
            if isinstance(kwargs.get(key), int):
                waiting.add((task, kwargs[key]))
    return waiting


def _delete_consumed(settings: Settings) -> int:
    """Delete the messages the transport hid once consumed; how many went.

    Only the sole worker calls this: each hidden message was acknowledged, or taken by a
    process that has died (whose work :func:`_resend_unfinished` sends again).
    """
    path = Path(settings.data_dir) / "broker.sqlite3"
    if not path.is_file():
        return 0
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            deleted = conn.execute("DELETE FROM kombu_message WHERE NOT visible").rowcount
    except sqlite3.OperationalError:  # no table yet: nothing was ever sent
        return 0
    finally:
        conn.close()
    return deleted


def _resend_unfinished(settings: Settings) -> list[tuple[str, int]]:
    """Send again the task of each unfinished evaluation and run that has none waiting."""
    waiting = _waiting_messages(settings)
    due: list[tuple[str, str, int]] = []
    with session_scope() as session:
        evaluations = session.scalars(
            select(Evaluation)
            .where(
                Evaluation.status.in_(
                    (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING, EvaluationStatus.SCORING)
                ),
                # A smoke test runs inside its algorithm version's task, sent with the upload.
                Evaluation.kind != EvaluationKind.SMOKE_TEST,
            )
            .order_by(Evaluation.id)
        ).all()
        for evaluation in evaluations:
            if evaluation.kind == EvaluationKind.RESCORE:
                due.append((TASK_RESCORE, QUEUE_CPU, evaluation.id))
                continue
            if evaluation.status == EvaluationStatus.QUEUED:
                due.append((TASK_START_EVALUATION, evaluation.queue, evaluation.id))
                continue
            unfinished = session.scalars(
                select(RecordingRun.id)
                .where(
                    RecordingRun.evaluation_id == evaluation.id,
                    RecordingRun.finished_at.is_(None),
                )
                .order_by(RecordingRun.id)
            ).all()
            due.extend((TASK_RUN_RECORDING, evaluation.queue, run_id) for run_id in unfinished)
            if not unfinished:
                due.append((TASK_FINALIZE, evaluation.queue, evaluation.id))
    sent: list[tuple[str, int]] = []
    for task, queue, ident in due:
        if (task, ident) in waiting:
            continue
        key = "run_id" if task == TASK_RUN_RECORDING else "evaluation_id"
        send_task(task, queue=queue, **{key: ident})
        sent.append((task, ident))
    return sent


def recover_interrupted(settings: Settings, *, sole_worker: bool) -> Recovery:
    """Clean up after processes that died on this host; continue their unfinished work.

    ``sole_worker``: this process holds the data directory's lock, so no other process is
    working on the embedded queue and every unfinished evaluation without a waiting message
    was interrupted. Without it only dead processes' containers are removed (what a live
    process runs is its own business).
    """
    recovery = Recovery(sole_worker=sole_worker)
    recovery.containers_removed = _sweep_dead_owners(settings)
    if recovery.containers_removed:
        log.warning(
            "removed %d container(s) an interrupted process left", recovery.containers_removed
        )
    if sole_worker:
        recovery.consumed_deleted = _delete_consumed(settings)
        log.info("deleted %d consumed message(s) from the queue", recovery.consumed_deleted)
        recovery.resent = _resend_unfinished(settings)
        if recovery.resent:
            log.warning("continuing interrupted work: sent again %s", recovery.resent)
    return recovery


def start_embedded_worker(
    *,
    queues: Sequence[str] = (*QUEUES, QUEUE_SCORE),
    concurrency: int | None = None,
    upgrade_database: bool = True,
    ready_timeout_s: float = 60.0,
) -> EmbeddedWorker:
    """Start consuming the pipeline's tasks in a background thread of this process.

    Parameters
    ----------
    queues
        Queues to consume (the run queues and ``score`` by default: a single machine does
        all the work; a finished evaluation's finalize waits behind no queued run).
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
    reset_celery()
    lock_fd, sole = _lock_data_dir(settings)
    try:
        recovery = recover_interrupted(settings, sole_worker=sole)
    except Exception:
        os.close(lock_fd)
        raise
    _share(lock_fd)
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
    notifier = _Notifier(task_queue.NOTIFY_TICK_S)
    notifier.start()
    return EmbeddedWorker(controller, thread, lock_fd, recovery, notifier)
