"""The reconciler's decisions on real PostgreSQL, with the fake runner and captured sends.

Heartbeats are written as a worker writes them; ``now`` is passed in, so that "a worker
free for five minutes" or "a claim older than the grace" needs no waiting. The Celery path
for real (workers killed, Redis restarted empty) is in ``test_reconcile_celery``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from szbench import queue
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import (
    Evaluation,
    EvaluationStatus,
    NotificationEvent,
    NotificationKind,
    RecordingRun,
    RunOutcome,
)
from szbench_worker import pipeline, reconcile

from .test_pipeline import (  # noqa: F401 (pipeline_env: the fixture env)
    DIGEST,
    RECS,
    Env,
    deliver,
    new_evaluation,
    pipeline_env,
)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def beat(
    worker: str,
    *,
    seen: datetime,
    free_since: datetime | None = None,
    run_ids: tuple[int, ...] = (),
    queues: tuple[str, ...] = ("cpu", "score"),
) -> None:
    reconcile.write_heartbeat(
        reconcile.Beat(
            id=worker,
            host=worker.split(":")[0],
            node=f"cpu@{worker}",
            queues=queues,
            concurrency=1,
            run_ids=run_ids,
            free_for_s=None,
        )
    )
    with session_scope() as session:
        from szbench.models import WorkerHeartbeat

        # As a worker would have written them at ``seen`` (the tests' clock, passed in).
        row = session.get_one(WorkerHeartbeat, worker)
        row.last_seen_at = seen
        row.free_since = free_since


def created_at(evaluation_id: int, when: datetime) -> None:
    with session_scope() as session:
        session.get_one(Evaluation, evaluation_id).created_at = when


def evaluation(evaluation_id: int) -> Evaluation:
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        session.expunge(ev)
        return ev


def test_a_lost_start_task_is_sent_again_once_a_worker_proves_the_queue_empty(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    env.sent.clear()  # the broker lost it
    created_at(evaluation_id, T0)
    stale = get_settings().reconcile_stale_s
    # A worker that is busy, or free for less than reconcile_stale_s: the task may be waiting.
    beat("h1:1.1", seen=T0 + timedelta(seconds=400), free_since=T0 + timedelta(seconds=200))
    report = reconcile.reconcile(now=T0 + timedelta(seconds=400))
    assert env.sent == []
    assert report.resent_starts == []
    # Free for longer: the queue is empty, the start task was lost.
    now = T0 + timedelta(seconds=200 + stale + 1)
    beat("h1:1.1", seen=now, free_since=T0 + timedelta(seconds=200))
    report = reconcile.reconcile(now=now)
    assert report.resent_starts == [evaluation_id]
    assert env.sent == [(queue.TASK_START_EVALUATION, "cpu", {"evaluation_id": evaluation_id})]
    # The next pass gives that task its time (no second send within reconcile_stale_s).
    assert reconcile.reconcile(now=now + timedelta(seconds=10)).resent_starts == []
    deliver(env)
    assert evaluation(evaluation_id).status == EvaluationStatus.DONE


def test_no_worker_for_the_queue_sends_nothing_and_counts_no_round(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    env.sent.clear()
    created_at(evaluation_id, T0)
    beat("h1:1.1", seen=T0, free_since=T0 - timedelta(hours=1))  # long dead
    report = reconcile.reconcile(now=T0 + timedelta(hours=2))
    assert env.sent == []
    assert report.queues_without_workers == ["cpu"]
    assert evaluation(evaluation_id).reconcile_rounds == 0


def _running_with_claims(env: Env, claims: dict[int, str]) -> tuple[int, list[int]]:
    """An evaluation whose runs exist; run i is claimed by ``claims[i]`` (index into runs)."""
    evaluation_id = new_evaluation(env)
    name, _q, kwargs = env.sent.pop(0)
    assert name == queue.TASK_START_EVALUATION
    pipeline.start_evaluation(**kwargs)
    env.sent.clear()  # every run task lost
    with session_scope() as session:
        runs = session.scalars(
            select(RecordingRun)
            .where(RecordingRun.evaluation_id == evaluation_id)
            .order_by(RecordingRun.id)
        ).all()
        for i, worker in claims.items():
            runs[i].started_at = T0
            runs[i].attempts = 1
            runs[i].claimed_by = worker
        return evaluation_id, [r.id for r in runs]


def test_runs_of_a_dead_worker_are_sent_again_and_a_live_workers_are_not(env: Env) -> None:
    evaluation_id, runs = _running_with_claims(env, {0: "h1:1.1", 1: "h2:2.2"})
    now = T0 + timedelta(seconds=120)
    beat("h1:1.1", seen=T0)  # silent for 120 s > the 90 s timeout: dead
    beat("h2:2.2", seen=now, run_ids=(runs[1],))  # alive and holding its run
    report = reconcile.reconcile(now=now)
    # Only the dead worker's run: the unclaimed ones may still wait in a busy queue.
    assert report.resent_runs == [runs[0]]
    assert env.sent == [(queue.TASK_RUN_RECORDING, "cpu", {"run_id": runs[0]})]
    assert evaluation(evaluation_id).reconcile_rounds == 1


def test_a_run_a_live_worker_gave_up_on_is_sent_again_after_the_grace(env: Env) -> None:
    # The database was away longer than the retries: the task was acknowledged, the run
    # stayed claimed by a worker that is alive and idle.
    _evaluation_id, runs = _running_with_claims(env, {0: "h1:1.1"})
    grace = get_settings().reconcile_claim_grace_s
    early = T0 + timedelta(seconds=grace - 10)
    beat("h1:1.1", seen=early)  # alive, busy with nothing it reports (no free_since yet)
    assert reconcile.reconcile(now=early).resent_runs == []
    late = T0 + timedelta(seconds=grace + 1)
    beat("h1:1.1", seen=late)
    assert reconcile.reconcile(now=late).resent_runs == [runs[0]]


def test_a_claim_its_live_worker_dropped_is_sent_again_once_the_queue_is_proven_empty(
    env: Env,
) -> None:
    # Redis restarted empty while the run was in a container: the worker lives on, holds
    # nothing, and receives nothing. No need to wait for the (long) claim grace.
    _evaluation_id, runs = _running_with_claims(env, dict.fromkeys(range(len(RECS)), "h1:1.1"))
    stale = get_settings().reconcile_stale_s
    now = T0 + timedelta(seconds=stale + 1)
    # Holding them (running, or waiting for a retry's countdown): never sent again.
    beat("h1:1.1", seen=now, free_since=T0, run_ids=tuple(runs))
    assert reconcile.reconcile(now=now).resent_runs == []
    beat("h1:1.1", seen=now, free_since=T0)
    assert reconcile.reconcile(now=now).resent_runs == runs
    assert stale + 1 < get_settings().reconcile_claim_grace_s


def test_an_evaluation_that_never_progresses_ends_failed_with_a_reason(env: Env) -> None:
    evaluation_id, runs = _running_with_claims(env, {0: "h1:1.1"})
    settings = get_settings()
    now = T0
    for _ in range(reconcile.MAX_ROUNDS):
        now += timedelta(seconds=settings.reconcile_stale_s + 1)
        beat("h2:2.2", seen=now, free_since=T0 - timedelta(hours=1))
        report = reconcile.reconcile(now=now)
        assert runs[0] in report.resent_runs
        env.sent.clear()  # lost again
    now += timedelta(seconds=settings.reconcile_stale_s + 1)
    beat("h2:2.2", seen=now, free_since=T0 - timedelta(hours=1))
    report = reconcile.reconcile(now=now)
    assert report.failed == [evaluation_id]
    assert env.sent == []
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.FAILED
        assert "could not make progress" in ev.message
        assert ev.recordings_done == ev.recordings_total == len(runs)
        for run in ev.runs:
            assert run.finished_at is not None
            assert run.outcome == RunOutcome.INFRASTRUCTURE_ERROR
            assert run.submitter_message == pipeline.INFRA_MESSAGE
            assert "[reconciler] gave up" in run.admin_log
        assert "h1:1.1" in ev.runs[0].admin_log
        # Its owner is told, once (szbench.notifications).
        told = session.execute(select(NotificationEvent.kind, NotificationEvent.evaluation_id))
        assert [tuple(row) for row in told] == [(NotificationKind.EVALUATION_FAILED, evaluation_id)]
    # Nothing is left to reconcile.
    assert not reconcile.reconcile(now=now + timedelta(hours=1)).changed


def test_progress_resets_the_rounds(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconcile, "MAX_ROUNDS", 2)
    evaluation_id, runs = _running_with_claims(env, {})
    settings = get_settings()
    assert len(runs) > reconcile.MAX_ROUNDS
    now = T0
    for i in range(reconcile.MAX_ROUNDS + 2):
        now += timedelta(seconds=settings.reconcile_stale_s + 1)
        beat("h2:2.2", seen=now, free_since=T0 - timedelta(hours=1))
        report = reconcile.reconcile(now=now)
        assert report.failed == []
        assert report.resent_runs
        # Each round, one of the re-sent runs gets through.
        env.sent[:] = env.sent[:1]
        deliver(env)
        if i == len(runs) - 1:
            break
    assert evaluation(evaluation_id).status == EvaluationStatus.DONE


def test_a_lost_finalize_is_sent_again(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    deliver_all_but_finalize(env)
    assert evaluation(evaluation_id).status == EvaluationStatus.RUNNING
    now = T0 + timedelta(hours=1)
    beat("h1:1.1", seen=now, free_since=T0)
    assert reconcile.reconcile(now=now).resent_finalize == [evaluation_id]
    deliver(env)
    assert evaluation(evaluation_id).status == EvaluationStatus.DONE


def test_a_lost_finalize_is_proven_lost_by_the_score_queues_idle_worker(env: Env) -> None:
    """The finalize goes to the score queue (issue 29.9): a scheduler idle on it proves it
    lost while the run workers are busy; with nobody on it nothing is sent, and it says so."""
    evaluation_id = new_evaluation(env)
    deliver_all_but_finalize(env)
    now = T0 + timedelta(hours=1)
    beat("h1:1.1", seen=now, queues=("cpu",))  # busy (no free slot): proves nothing
    report = reconcile.reconcile(now=now)
    assert report.resent_finalize == []
    assert report.queues_without_workers == ["score"]
    assert evaluation(evaluation_id).reconcile_rounds == 0
    beat("sched:2.2", seen=now, free_since=T0, queues=("maintenance", "score"))
    assert reconcile.reconcile(now=now).resent_finalize == [evaluation_id]
    assert env.sent == [(queue.TASK_FINALIZE, "score", {"evaluation_id": evaluation_id})]
    deliver(env)
    assert evaluation(evaluation_id).status == EvaluationStatus.DONE


def deliver_all_but_finalize(env: Env) -> None:
    from .test_pipeline import DISPATCH

    while env.sent:
        name, _q, kwargs = env.sent.pop(0)
        if name != queue.TASK_FINALIZE:
            DISPATCH[name](**kwargs)


def test_a_restarted_worker_reclaims_its_dead_predecessors_runs(env: Env) -> None:
    from szbench_worker.runner import owner_token

    me = f"h1:{owner_token()}"
    # A pid above the kernel's largest pid_max: no process has it.
    evaluation_id, runs = _running_with_claims(env, {0: "h1:4194999.1", 1: me, 2: "h9:1.1"})
    sent = reconcile.reclaim_dead_predecessors("h1", me)
    # Its own run and another host's are not its to judge.
    assert sent == [runs[0]]
    assert env.sent == [(queue.TASK_RUN_RECORDING, "cpu", {"run_id": runs[0]})]
    assert evaluation(evaluation_id).reconcile_rounds == 1


@pytest.fixture
def own_redis(env: Env, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own as the broker (sends stay captured)."""
    from .test_reconcile_celery import OwnRedis

    server = OwnRedis(tmp_path)
    server.start()
    settings_env.setenv("SZBENCH_BROKER_URL", server.url)
    get_settings.cache_clear()
    try:
        yield server.url
    finally:
        server.kill()
        get_settings.cache_clear()


def test_a_broker_that_lost_its_contents_gets_its_work_again_at_once(
    env: Env, own_redis: str
) -> None:
    """Redis restarted empty: the marker the reconciler keeps there is gone, so everything
    no live worker holds is sent again on the next pass, not after the workers' idle time."""
    evaluation_id, runs = _running_with_claims(env, {0: "h1:1.1", 1: "h2:2.2"})
    now = T0 + timedelta(seconds=30)
    # h1 is busy with run 0 (it holds it), h2 claimed run 1 but no longer holds it: neither
    # is idle, so without the marker nothing would be sent before reconcile_claim_grace_s.
    beat("h1:1.1", seen=now, run_ids=(runs[0],))
    beat("h2:2.2", seen=now)
    first = reconcile.reconcile(now=now)  # the first pass ever sets the marker
    assert first.broker_emptied
    env.sent.clear()
    assert reconcile.reconcile(now=now + timedelta(seconds=1)).broker_emptied is False
    assert reconcile.reconcile(now=now + timedelta(seconds=2)).resent_runs == []
    redis.Redis.from_url(own_redis).flushall()  # restarted empty
    later = now + timedelta(seconds=20)
    beat("h1:1.1", seen=later, run_ids=(runs[0],))
    beat("h2:2.2", seen=later)
    report = reconcile.reconcile(now=later)
    assert report.broker_emptied
    assert report.resent_runs == runs[1:]  # all but the one a live worker runs
    assert sorted(kwargs["run_id"] for _, _, kwargs in env.sent) == runs[1:]
    assert evaluation(evaluation_id).reconcile_rounds == 2
    assert reconcile.reconcile(now=later + timedelta(seconds=1)).resent_runs == []


def test_a_start_task_lost_with_the_broker_is_sent_again_at_once(env: Env, own_redis: str) -> None:
    reconcile.reconcile(now=T0)  # the marker
    evaluation_id = new_evaluation(env)
    env.sent.clear()  # submitted while Redis was away (503): no start task anywhere
    created_at(evaluation_id, T0)
    redis.Redis.from_url(own_redis).flushall()
    now = T0 + timedelta(seconds=10)
    beat("h1:1.1", seen=now)  # a worker, not idle for long
    report = reconcile.reconcile(now=now)
    assert report.resent_starts == [evaluation_id]
