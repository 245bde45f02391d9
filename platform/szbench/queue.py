"""The task queue as the web part sees it: task names, Celery configuration, enqueueing.

The API enqueues tasks *by name* (``send_task``) and never imports the worker, so the API
image carries neither the docker SDK nor MNE. The worker's Celery app
(``szbench_worker.celery_app``) is built from the same :func:`celery_config`.

Two brokers, the same tasks:

- production: Redis (``SZBENCH_BROKER_URL=redis://...``);
- embedded mode (``SZBENCH_BROKER_URL`` empty): kombu's SQLAlchemy transport on a SQLite
  file under ``data_dir`` (``broker.sqlite3``), consumed by the embedded worker thread that
  ``szbench serve`` and ``szbench evaluate`` start. Messages survive a restart of the
  process, so an interrupted local evaluation resumes where it stopped.

A task is sent only after the transaction it depends on has committed
(:func:`enqueue_after_commit`): a worker can never pick up an id that does not exist yet,
and a rolled-back request sends nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue
from sqlalchemy import event
from sqlalchemy.orm import Session

from szbench.config import Settings, get_settings

log = logging.getLogger(__name__)

#: ``broker_transport`` for a ``redis://`` broker: :class:`szbench.broker.Transport`, named
#: here so that an embedded process never imports kombu's Redis transport.
REDIS_TRANSPORT = "szbench.broker:Transport"
#: ``broker_transport`` of the embedded mode: :class:`szbench.embedded_transport.Transport`.
EMBEDDED_TRANSPORT = "szbench.embedded_transport:Transport"

TASK_START_EVALUATION = "szbench.evaluation.start"  # kwargs: evaluation_id
TASK_RUN_RECORDING = "szbench.recording.run"  # kwargs: run_id
TASK_FINALIZE = "szbench.evaluation.finalize"  # kwargs: evaluation_id
TASK_SMOKE_TEST = "szbench.algorithm.smoke_test"  # kwargs: algorithm_version_id
TASK_RESCORE = "szbench.evaluation.rescore"  # kwargs: evaluation_id
TASK_RECONCILE = "szbench.maintenance.reconcile"  # no kwargs
TASK_NOTIFY = "szbench.notifications.deliver"  # kwargs: event_id
TASK_NOTIFY_TICK = "szbench.notifications.tick"  # no kwargs
TASK_PHASES_TICK = "szbench.phases.tick"  # no kwargs
#: Seconds between two looks of the phase lifecycle (szbench.phases.lifecycle): a phase's
#: opening or closing by its dates is noticed, and its boards frozen, at most this late.
PHASES_TICK_S = 30.0
#: Seconds between two notification ticks (celery beat, and the embedded worker's own timer):
#: a phase that opened or a delivery that is due goes out at most this late, and a tick may
#: spend this long sending, so ticks never pile up (a message older than one tick is
#: dropped, docs/operations.md). Half a minute is prompt for mail and chat; a tuning knob.
NOTIFY_TICK_S = 30.0

TASK_FEDERATION_TICK = "szbench.federation.tick"  # no kwargs

#: How often a centre drafts the bundles of finished evaluations and sends auto-published ones.
FEDERATION_TICK_S = 60.0

QUEUE_CPU = "cpu"
QUEUE_GPU = "gpu"
#: The run queues: a container per task (a sick host stops consuming these).
QUEUES = (QUEUE_CPU, QUEUE_GPU)
# The reconciler's and the notifications' queue, consumed by the scheduler service
# (``worker --beat -Q maintenance``): a backlog of hour-long runs on cpu or gpu must not
# hold them up.
QUEUE_MAINTENANCE = "maintenance"
#: Finishing evaluations: the aggregation of a finished evaluation's runs and re-scores.
#: Every worker consumes it beside its own queues (``szbench_worker.celery_app``), the
#: scheduler too, so a finished evaluation never waits behind the runs queued on cpu or gpu.
QUEUE_SCORE = "score"
_ALL_QUEUES = (*QUEUES, QUEUE_MAINTENANCE, QUEUE_SCORE)
#: The maintenance queue's tasks: a worker receiving them says nothing about the pipeline's
#: queues (the reconciler's proof that a queue is empty ignores them).
MAINTENANCE_TASKS = frozenset({TASK_RECONCILE, TASK_NOTIFY, TASK_NOTIFY_TICK})
#: The tasks that finish an evaluation without a container: sent to :data:`QUEUE_SCORE`
#: whatever queue the caller names (the evaluation's). On ``cpu`` a finalize waited behind
#: every run queued there before it: hours at the challenge's size (issue 29.9).
SCORE_TASKS = frozenset({TASK_FINALIZE, TASK_RESCORE})


def queue_for(task_name: str, queue: str) -> str:
    """The queue ``task_name`` goes to when a caller names ``queue`` (the evaluation's)."""
    return QUEUE_SCORE if task_name in SCORE_TASKS else queue


_PENDING_KEY = "szbench_pending_tasks"
_SEND_ERROR_KEY = "szbench_send_error"


def embedded_broker_url(settings: Settings) -> str:
    """The SQLite-backed broker of the embedded mode (a file next to the database)."""
    return f"sqlite:///{settings.data_dir / 'broker.sqlite3'}"


def is_embedded(settings: Settings | None = None) -> bool:
    """True when no broker is configured: the embedded, single-machine mode."""
    return not (settings or get_settings()).broker_url


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings shared by the API (sending) and the worker (consuming).

    Reliability comes from four of them together: a message is acknowledged only after its
    task returned (``task_acks_late``), it goes back to the queue when the process running
    it dies (``task_reject_on_worker_lost``), a worker reserves one message at a time
    (``worker_prefetch_multiplier=1``, so a long container run never holds others hostage),
    and every task is idempotent, so a second delivery changes nothing.
    """
    embedded = is_embedded(settings)
    transport: str | None = None
    if embedded:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        broker = embedded_broker_url(settings)
        # kombu's SQLAlchemy transport, polled often (szbench.embedded_transport).
        transport = EMBEDDED_TRANSPORT
        # The SQLAlchemy transport hands its options to create_engine(): SQLite waits for
        # the lock instead of failing.
        transport_options: dict[str, Any] = {
            "connect_args": {"timeout": 30, "check_same_thread": False},
        }
    else:
        broker = settings.broker_url
        if broker.startswith("redis://"):
            # kombu's Redis transport, screening out malformed messages (szbench.broker).
            transport = REDIS_TRANSPORT
        transport_options = {
            # Unacknowledged messages of a vanished worker come back after this long.
            "visibility_timeout": settings.queue_visibility_timeout_s,
        }
    exchange = Exchange("szbench", type="direct")  # type: ignore[no-untyped-call]
    # Beat sends the reconciler (szbench_worker.reconcile), the phase lifecycle
    # (szbench.phases.lifecycle) and the notifications tick (szbench.notifications.outbox)
    # to their queue; a message older than one interval is
    # dropped, so a scheduler that was away does not send a burst.
    beat_schedule = (
        {}
        if embedded
        else {
            name: {
                "task": task,
                "schedule": interval,
                "options": {
                    "queue": QUEUE_MAINTENANCE,
                    "routing_key": QUEUE_MAINTENANCE,
                    "expires": interval,
                },
            }
            for name, task, interval in (
                ("reconcile", TASK_RECONCILE, settings.reconcile_interval_s),
                ("phases", TASK_PHASES_TICK, PHASES_TICK_S),
                ("notifications", TASK_NOTIFY_TICK, NOTIFY_TICK_S),
                # A centre's federation round (szbench.federation.centre.tick): it reads the
                # hub's catalogue only every SYNC_INTERVAL_S, so a short tick costs a query.
                ("federation", TASK_FEDERATION_TICK, FEDERATION_TICK_S),
            )
        }
    )
    return {
        "broker_url": broker,
        "broker_transport": transport,
        "broker_transport_options": transport_options,
        "broker_connection_retry_on_startup": True,
        # Results live in the database; Celery's result backend would be a second truth.
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # A task that raises is still acknowledged: its failure is recorded in the
        # database by the task's on_failure handler, re-delivering it would loop.
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_queues": tuple(
            Queue(q, exchange, routing_key=q)  # type: ignore[no-untyped-call]
            for q in _ALL_QUEUES
        ),
        "task_default_queue": QUEUE_CPU,
        "task_default_exchange": "szbench",
        "task_default_routing_key": QUEUE_CPU,
        "task_create_missing_queues": False,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
        "enable_utc": True,
        "beat_schedule": beat_schedule,
        # In memory: the schedule is one fixed interval, nothing worth a state file.
        "beat_scheduler": "celery.beat:Scheduler",
    }


_client: Celery | None = None
_client_lock = threading.Lock()
_sender: Callable[[str, str, dict[str, Any]], None] | None = None


def get_celery() -> Celery:
    """The process's one Celery app (built once from the current settings).

    Every send, retry and re-delivery goes through it, in every mode: the worker registers
    its tasks on this same app (``szbench_worker.celery_app``), so a task's ``retry()`` and
    a hand-back after a shutdown use the broker the settings name. A second app (Celery's
    ``default`` one, which any thread without a current app falls back to) would send to
    ``amqp://localhost``, where nothing consumes.
    """
    global _client
    with _client_lock:
        if _client is None:
            app = Celery("szbench", set_as_current=False)
            app.conf.update(celery_config(get_settings()))
            _client = app
        return _client


def reset_celery() -> None:
    """Apply the current settings to the app again (tests, embedded start-up).

    The app object stays the same, because the worker's tasks are bound to it; only its
    configuration and its broker connections are renewed.
    """
    with _client_lock:
        if _client is None:
            return
        _client.conf.update(celery_config(get_settings()))
        # Celery's close() forgets the connection pool but keeps the producer pool, which
        # would go on publishing to the previous broker; drop both (as Celery does after a
        # fork) so that the next send connects to the broker just configured. (Closing the
        # old pool is left to kombu's registry, which may hand it out again.)
        _client._pool = None
        amqp = _client.__dict__.get("amqp")
        if amqp is not None:
            amqp._producer_pool = None


def set_sender(sender: Callable[[str, str, dict[str, Any]], None] | None) -> None:
    """Replace how tasks are sent: ``sender(task_name, queue, kwargs)``; ``None`` restores.

    For unit tests of the services, which check *what* is enqueued without a broker.
    """
    global _sender
    _sender = sender


def send_task(task_name: str, *, queue: str = QUEUE_CPU, **kwargs: Any) -> None:
    """Send a task now. Prefer :func:`enqueue_after_commit` inside a unit of work."""
    if queue not in _ALL_QUEUES:
        raise ValueError(f"unknown queue {queue!r}; expected one of {', '.join(_ALL_QUEUES)}")
    queue = queue_for(task_name, queue)
    if _sender is not None:
        _sender(task_name, queue, kwargs)
        return
    get_celery().send_task(task_name, kwargs=kwargs, queue=queue, routing_key=queue)


def _flush_pending(session: Session) -> None:
    pending = session.info.pop(_PENDING_KEY, [])
    for task_name, queue, kwargs in pending:
        try:
            send_task(task_name, queue=queue, **kwargs)
        except Exception as exc:
            # The commit is done and cannot be undone here; the row stays QUEUED (or the
            # run unfinished) and the reconciler sends the same task again once the broker
            # is back (every task is idempotent). The caller learns of it when the
            # transaction has ended (_raise_send_error): raised from here, it would leave
            # the session half-committed, and the rollback that follows would fail instead.
            log.warning("could not send %s %s after commit: %s", task_name, kwargs, exc)
            session.info.setdefault(_SEND_ERROR_KEY, exc)


def _raise_send_error(session: Session, transaction: Any) -> None:
    if transaction.parent is None:
        exc = session.info.pop(_SEND_ERROR_KEY, None)
        if exc is not None:
            raise exc


def _drop_pending(session: Session) -> None:
    session.info.pop(_PENDING_KEY, None)


def enqueue_after_commit(
    session: Session, task_name: str, *, queue: str = QUEUE_CPU, **kwargs: Any
) -> None:
    """Register a task to be sent once ``session`` commits; a rollback discards it.

    Sending before the commit would let a fast worker look for rows that are not visible
    yet; sending from inside the transaction and then rolling back would run a task for
    nothing. Identical registrations in one unit of work are sent once.
    """
    if queue not in _ALL_QUEUES:
        raise ValueError(f"unknown queue {queue!r}; expected one of {', '.join(_ALL_QUEUES)}")
    pending: list[tuple[str, str, dict[str, Any]]] = session.info.setdefault(_PENDING_KEY, [])
    entry = (task_name, queue, kwargs)
    if entry not in pending:
        pending.append(entry)
    if not event.contains(session, "after_commit", _flush_pending):
        event.listen(session, "after_commit", _flush_pending)
        event.listen(session, "after_soft_rollback", _on_soft_rollback)
        event.listen(session, "after_transaction_end", _raise_send_error)


def _on_soft_rollback(session: Session, previous_transaction: Any) -> None:
    # Only the outermost transaction's rollback discards: a savepoint rolled back inside a
    # unit of work that later commits still owes its tasks.
    if previous_transaction.parent is None:
        _drop_pending(session)
