"""Nothing hangs: worker heartbeats and the reconciler that sends lost work again.

Celery brings a task back by itself when its worker process dies (late acknowledgement,
``reject_on_worker_lost``) or, for a whole worker that vanished, when Redis's visibility
timeout expires (hours). It cannot bring back a message the broker lost (Redis restarted
empty), one never sent (the broker was down when the API committed), or one acknowledged
after its retries gave up while the database was away. This module finds such work from the
database's side and sends its task again; every task is idempotent (``pipeline``), so a
second delivery of work that was not lost after all changes nothing.

How it tells lost from waiting, without reading the broker:

- each worker writes a :class:`~szbench.models.WorkerHeartbeat` every few seconds: the runs
  it holds, and since when it has had a free slot without receiving anything. A live worker
  of a queue that has been free for ``reconcile_stale_s`` proves that queue empty: an
  unclaimed run of an unfinished evaluation on it was lost, not waiting in a backlog;
- a run claimed (``claimed_by``) by a worker that no longer heartbeats is sent again at
  once; one claimed by a live worker that does not hold it after ``reconcile_claim_grace_s``
  too (its retries gave up);
- a worker that starts sends again, at once, the runs its dead predecessors on the same
  host had claimed (:func:`reclaim_dead_predecessors`), instead of waiting for the broker.

Each time work of an evaluation is sent again is a round; rounds reset when the evaluation
progresses, and after :data:`MAX_ROUNDS` rounds without progress the evaluation ends
FAILED (its unfinished runs INFRASTRUCTURE_ERROR, the reason in each run's admin log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, object_session

from szbench import clock
from szbench.config import Settings, get_settings
from szbench.db import session_scope
from szbench.models import (
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    RecordingRun,
    RunOutcome,
    WorkerHeartbeat,
    as_utc,
)
from szbench.notifications import events as notify
from szbench.queue import (
    TASK_FINALIZE,
    TASK_RUN_RECORDING,
    TASK_START_EVALUATION,
    is_embedded,
    queue_for,
    send_task,
)
from szbench_worker.pipeline import INFRA_MESSAGE
from szbench_worker.runner import owner_alive

log = logging.getLogger(__name__)

#: Shown to everyone (it says nothing about the algorithm or the data).
GAVE_UP_MESSAGE = (
    "The platform could not make progress on this evaluation ({what}, {rounds} times without "
    "result); no score was computed. An administrator can re-run it."
)

#: Rounds in a row without progress after which an evaluation ends FAILED: a lost task sent
#: again 5 times that still moved nothing is not lost but stuck (a recording no worker of its
#: queue can run), and an admin's re-run is the way on. A constant: nothing an operator
#: decides hangs on it.
MAX_ROUNDS = 5


def _now() -> datetime:
    # The database's clock, which every worker's heartbeat and claim was written by: this
    # host's own may be off by hours (szbench.clock).
    return clock.now()


# --- heartbeats ---------------------------------------------------------------------------


@dataclass
class Beat:
    """What a worker reports about itself."""

    id: str
    host: str
    node: str
    queues: Sequence[str]
    concurrency: int
    run_ids: Sequence[int]
    #: For how long it has had a free slot without receiving a task (its monotonic clock);
    #: None while every slot is busy. Stored as a time on the database's clock.
    free_for_s: float | None
    #: Why it takes no runs now (:func:`szbench_worker.health.host_fault`, a sentence anyone
    #: may read); None: it does. ``fault_kind``: what its host lacks.
    fault: str | None = None
    fault_kind: str | None = None


def write_heartbeat(beat: Beat) -> None:
    """Record ``beat`` (one row per worker instance, replaced each time), every time in it
    on the database's clock: the reconciler and the pages compare them with that clock."""
    with session_scope() as session:
        now = clock.now(session)
        row = session.get(WorkerHeartbeat, beat.id)
        if row is None:
            row = WorkerHeartbeat(id=beat.id, started_at=now)
            session.add(row)
        row.host = beat.host
        row.node = beat.node
        row.queues = sorted(beat.queues)
        row.concurrency = beat.concurrency
        row.run_ids = sorted(beat.run_ids)
        row.free_since = (
            None if beat.free_for_s is None else now - timedelta(seconds=beat.free_for_s)
        )
        row.fault = beat.fault[:500] if beat.fault else None
        row.fault_kind = beat.fault_kind[:40] if beat.fault and beat.fault_kind else None
        row.last_seen_at = now


def forget_worker(worker: str) -> None:
    """Remove a worker's heartbeat (it stops cleanly: its claims are no longer held)."""
    with session_scope() as session:
        session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.id == worker))


# --- sending work again -------------------------------------------------------------------


@dataclass
class ReconcileReport:
    """What one pass did (for logs, tests and the fault drill)."""

    resent_runs: list[int] = field(default_factory=list)
    resent_starts: list[int] = field(default_factory=list)
    resent_finalize: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    idle_queues: list[str] = field(default_factory=list)
    queues_without_workers: list[str] = field(default_factory=list)
    #: The broker lost its contents since the last pass (:func:`_broker_emptied`).
    broker_emptied: bool = False

    @property
    def changed(self) -> bool:
        return bool(
            self.resent_runs
            or self.resent_starts
            or self.resent_finalize
            or self.failed
            or self.broker_emptied
        )


def _broker_emptied(settings: Settings) -> bool:
    """Whether the Redis broker lost everything it held since the last pass (any process's);
    False in the embedded mode and while the broker is away (nothing can be sent then)."""
    # Deferred: kombu's Redis transport loads only where a Redis broker is configured (the
    # embedded mode's processes, `szbench evaluate` among them, never load it).
    from szbench.broker import broker_was_emptied

    if is_embedded(settings) or not settings.broker_url.startswith("redis://"):
        return False
    try:
        return broker_was_emptied(settings.broker_url)
    except Exception as exc:
        log.warning("reconciler: the broker is unreachable (%s)", exc)
        return False


def _count_round(
    evaluation: Evaluation, settings: Settings, now: datetime, what: str, report: ReconcileReport
) -> bool:
    """Count a round for ``evaluation``; False (and the evaluation FAILED) when it has had
    its last one."""
    if evaluation.recordings_done > evaluation.reconcile_progress:
        evaluation.reconcile_rounds = 0
    if evaluation.reconcile_rounds >= MAX_ROUNDS:
        _give_up(evaluation, what, now)
        report.failed.append(evaluation.id)
        return False
    evaluation.reconcile_rounds += 1
    evaluation.reconciled_at = now
    evaluation.reconcile_progress = evaluation.recordings_done
    return True


def _give_up(evaluation: Evaluation, what: str, now: datetime) -> None:
    rounds = evaluation.reconcile_rounds
    evaluation.status = EvaluationStatus.FAILED
    evaluation.finished_at = now
    evaluation.message = GAVE_UP_MESSAGE.format(what=what, rounds=rounds)
    finished = 0
    for run in evaluation.runs:
        if run.finished_at is None:
            run.outcome = RunOutcome.INFRASTRUCTURE_ERROR
            run.submitter_message = INFRA_MESSAGE
            run.admin_log = (run.admin_log + "\n" if run.admin_log else "") + (
                f"[reconciler] gave up at {now.isoformat()} after {rounds} round(s) without "
                f"progress: {what}; last claimed by {run.claimed_by or 'nobody'}"
                + (f" at {as_utc(run.started_at).isoformat()}" if run.started_at else "")
                + f", {run.attempts} attempt(s)."
            )
            run.finished_at = now
        finished += 1
    evaluation.recordings_done = finished
    session = object_session(evaluation)
    assert session is not None
    notify.record_evaluation_end(session, evaluation)
    log.error(
        "reconciler: evaluation %s FAILED after %d round(s) without progress (%s)",
        evaluation.id,
        rounds,
        what,
    )


def reconcile(now: datetime | None = None) -> ReconcileReport:
    """One pass over every unfinished evaluation; send again what cannot be progressing.

    Safe to run anywhere and concurrently (each evaluation is changed under its row lock;
    a second pass finds the first one's round and waits ``reconcile_stale_s``).
    """
    settings = get_settings()
    now = now or _now()
    report = ReconcileReport(broker_emptied=_broker_emptied(settings))
    timeout = timedelta(seconds=settings.worker_heartbeat_timeout_s)
    stale = timedelta(seconds=settings.reconcile_stale_s)
    with session_scope() as session:
        beats = {b.id: b for b in session.scalars(select(WorkerHeartbeat))}
        candidates = session.scalars(
            select(Evaluation.id)
            .where(
                Evaluation.status.in_(
                    (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING, EvaluationStatus.SCORING)
                ),
                # A smoke test runs inside its own task (no run task of its own to send).
                Evaluation.kind != EvaluationKind.SMOKE_TEST,
            )
            .order_by(Evaluation.id)
        ).all()
        # Rows of workers gone for long say nothing more (their claims count as dead anyway).
        session.execute(
            delete(WorkerHeartbeat).where(WorkerHeartbeat.last_seen_at < now - 20 * timeout)
        )
    live = {k: b for k, b in beats.items() if as_utc(b.last_seen_at) >= now - timeout}
    idle_queues: set[str] = set()
    served: set[str] = set()
    for beat in live.values():
        if beat.fault:
            # It takes no runs until its host recovers: it neither serves its queues nor
            # proves them empty (its free slot receives nothing by its own choice).
            continue
        served.update(beat.queues)
        if beat.free_since is not None and as_utc(beat.free_since) <= now - stale:
            idle_queues.update(beat.queues)
    if report.broker_emptied:
        # Every message the broker held is gone: what no live worker holds was lost, now,
        # whatever the workers' idle time says.
        idle_queues = set(served)
        log.warning("reconciler: the broker lost its contents; sending unfinished work again")
    report.idle_queues = sorted(idle_queues)
    for evaluation_id in candidates:
        try:
            _reconcile_one(evaluation_id, settings, now, beats, live, idle_queues, served, report)
        except Exception:
            # One evaluation (or a broker that is down) must not stop the others' pass.
            log.exception("reconciler: evaluation %s not reconciled", evaluation_id)
    if report.changed or report.queues_without_workers:
        log.warning("reconciler: %s", report)
    return report


def _reconcile_one(
    evaluation_id: int,
    settings: Settings,
    now: datetime,
    beats: dict[str, WorkerHeartbeat],
    live: dict[str, WorkerHeartbeat],
    idle_queues: set[str],
    served: set[str],
    report: ReconcileReport,
) -> None:
    stale = timedelta(seconds=settings.reconcile_stale_s)
    grace = timedelta(seconds=settings.reconcile_claim_grace_s)
    with session_scope() as session:
        evaluation = _lock(session, evaluation_id)
        if evaluation is None or evaluation.status.finished:
            return
        queue = evaluation.queue
        unfinished: Sequence[RecordingRun] = ()
        if evaluation.status != EvaluationStatus.QUEUED:
            unfinished = session.scalars(
                select(RecordingRun)
                .where(
                    RecordingRun.evaluation_id == evaluation.id,
                    RecordingRun.finished_at.is_(None),
                )
                .order_by(RecordingRun.id)
            ).all()
        # The queue of the task it waits for: its own for the start and the runs, the score
        # queue for the finalize (szbench.queue.queue_for).
        waits_on = (
            queue_for(TASK_FINALIZE, queue)
            if evaluation.status != EvaluationStatus.QUEUED and not unfinished
            else queue
        )
        if waits_on not in served:
            # Nothing can progress without a worker, but nothing is lost either: say so, and
            # count no round (a worker that starts later reconciles at once).
            if waits_on not in report.queues_without_workers:
                report.queues_without_workers.append(waits_on)
            return
        emptied = report.broker_emptied
        if (
            not emptied
            and evaluation.reconciled_at is not None
            and as_utc(evaluation.reconciled_at) > now - stale
        ):
            return  # the last round's tasks get their time (unless the broker lost them)
        idle = waits_on in idle_queues
        if evaluation.status == EvaluationStatus.QUEUED:
            if (
                idle
                and (emptied or as_utc(evaluation.created_at) <= now - stale)
                and _count_round(evaluation, settings, now, "its start task was lost", report)
            ):
                send_task(TASK_START_EVALUATION, queue=queue, evaluation_id=evaluation.id)
                report.resent_starts.append(evaluation.id)
            return
        if not unfinished:
            if idle and _count_round(
                evaluation, settings, now, "its finalize task was lost", report
            ):
                send_task(TASK_FINALIZE, queue=queue, evaluation_id=evaluation.id)
                report.resent_finalize.append(evaluation.id)
            return
        timeout = timedelta(seconds=settings.worker_heartbeat_timeout_s)
        stuck = [
            run.id
            for run in unfinished
            if _is_stuck(run, beats, live, idle, now, grace, timeout, stale, emptied=emptied)
        ]
        if not stuck:
            return
        if not _count_round(evaluation, settings, now, "its runs' tasks were lost", report):
            return
        for run_id in stuck:
            send_task(TASK_RUN_RECORDING, queue=queue, run_id=run_id)
        report.resent_runs.extend(stuck)


def _is_stuck(
    run: RecordingRun,
    beats: dict[str, WorkerHeartbeat],
    live: dict[str, WorkerHeartbeat],
    idle: bool,
    now: datetime,
    grace: timedelta,
    timeout: timedelta,
    stale: timedelta,
    *,
    emptied: bool = False,
) -> bool:
    if run.released_at is not None:
        return True  # given up for a platform fault: no message of it is left anywhere
    if run.started_at is None:
        return idle  # never claimed: lost when the queue is proven empty
    holder = live.get(run.claimed_by)
    if holder is None:
        if run.claimed_by in beats:
            return True  # its worker stopped heartbeating: dead
        if run.claimed_by:
            # No heartbeat row at all: a worker between its claim and its first heartbeat,
            # or one gone so long that its row was dropped.
            return as_utc(run.started_at) <= now - timeout
        # An unnamed process's claim (not a heartbeating worker) is trusted for the grace.
        return as_utc(run.started_at) <= now - grace
    if run.id in (holder.run_ids or ()):
        return False
    if emptied:
        return True  # its message (or its retry's) went with the broker's contents
    if idle and as_utc(run.started_at) <= now - stale:
        # Its queue is proven empty, so no retry of it waits there either (an idle worker
        # would have fetched it and would hold it): the claim was abandoned (the broker
        # lost the task while it ran, or its retries gave up).
        return True
    return as_utc(run.started_at) <= now - grace


def _lock(session: Session, evaluation_id: int) -> Evaluation | None:
    return session.execute(
        select(Evaluation)
        .where(Evaluation.id == evaluation_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def reclaim_dead_predecessors(host: str, me: str) -> list[int]:
    """Send again the unfinished runs that dead worker processes on ``host`` had claimed.

    For a worker starting on a host where another was killed: its runs come back now, not
    after the broker's visibility timeout. A later delivery of the old message finds them
    finished (or runs them redundantly; the first result stands). Returns the runs sent.
    """
    settings = get_settings()
    now = _now()
    prefix = f"{host}:"
    sent: list[int] = []
    with session_scope() as session:
        claims = session.execute(
            select(RecordingRun.id, RecordingRun.claimed_by, RecordingRun.evaluation_id)
            .join(Evaluation, Evaluation.id == RecordingRun.evaluation_id)
            .where(
                RecordingRun.finished_at.is_(None),
                RecordingRun.started_at.is_not(None),
                RecordingRun.claimed_by.startswith(prefix, autoescape=True),
                RecordingRun.claimed_by != me,
                Evaluation.status.in_((EvaluationStatus.RUNNING, EvaluationStatus.SCORING)),
                Evaluation.kind != EvaluationKind.SMOKE_TEST,
            )
            .order_by(RecordingRun.id)
        ).all()
    dead: dict[int, list[int]] = {}
    for run_id, claimed_by, evaluation_id in claims:
        if not owner_alive(claimed_by[len(prefix) :]):
            dead.setdefault(evaluation_id, []).append(run_id)
    report = ReconcileReport()
    for evaluation_id, run_ids in dead.items():
        with session_scope() as session:
            evaluation = _lock(session, evaluation_id)
            if evaluation is None or evaluation.status.finished:
                continue
            what = "its runs' worker died"
            if not _count_round(evaluation, settings, now, what, report):
                continue
            for run_id in run_ids:
                send_task(TASK_RUN_RECORDING, queue=evaluation.queue, run_id=run_id)
            sent.extend(run_ids)
    if sent:
        log.warning("sent again %d run(s) of dead workers on %s: %s", len(sent), host, sent)
    return sent
