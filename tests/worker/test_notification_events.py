"""Notifications as the events happen (issue 23.1): an evaluation finishing or failing and a
smoke test failing through the real pipeline, phases opening and closing by their dates,
and the embedded worker's notifier. Real PostgreSQL (SQLite for the embedded mode), the fake
runner, a real webhook receiver checking each signature and a real SMTP sink."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench import queue
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DeliveryStatus,
    EvaluationStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationKind,
    Phase,
    PhaseState,
    PhaseTransition,
    RunOutcome,
    User,
    VersionStatus,
)
from szbench.notifications import events, outbox, preferences
from szbench.phases import lifecycle
from szbench_worker import pipeline
from szbench_worker.embedded import start_embedded_worker
from tests.platform import factories as f
from tests.platform.dripping_receiver import dripping_receiver
from tests.platform.smtp_sink import Sink, smtp_sink
from tests.platform.webhook_receiver import Receiver, webhook_receiver
from tests.redis_urls import redis_url

from ._pipeline_factories import make_prepared_dataset, seed_world
from .fakes import FakeRun, FakeRunner
from .test_pipeline import (  # noqa: F401 (pipeline_env: the fixture env)
    DIGEST,
    DISPATCH,
    RECS,
    Env,
    deliver,
    new_evaluation,
    pipeline_env,
    seed_pending_on_public_sample,
)
from .test_pipeline_embedded import embedded, wait_finished  # noqa: F401 (a fixture)

pytestmark = pytest.mark.postgres

ALICE = "alice@example.org"  # the owner seed_world makes


@dataclass
class Channels:
    receiver: Receiver
    sink: Sink


@pytest.fixture
def channels(settings_env: pytest.MonkeyPatch) -> Iterator[Channels]:
    with webhook_receiver() as receiver, smtp_sink() as sink:
        for key, value in {
            "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
            "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
            "SZBENCH_SMTP_HOST": "127.0.0.1",
            "SZBENCH_SMTP_PORT": str(sink.port),
            "SZBENCH_SMTP_STARTTLS": "false",
        }.items():
            settings_env.setenv(key, value)
        get_settings.cache_clear()
        yield Channels(receiver, sink)


def subscribe(channels: Channels, email: str = ALICE) -> None:
    """``email`` confirms their address and sets a webhook; the receiver learns the secret."""
    with session_scope() as session:
        user = session.scalars(select(User).where(User.email == email)).one()
        user.email_verified_at = datetime.now(UTC)
        preferences.update_preferences(session, user, webhook_url=channels.receiver.url())
        channels.receiver.secret = preferences.preferences_of(session, user).webhook_secret


def deliveries() -> list[NotificationDelivery]:
    with session_scope() as session:
        return list(session.scalars(select(NotificationDelivery).order_by(NotificationDelivery.id)))


def test_an_evaluation_finishing_fires_one_delivery_per_channel(
    env: Env, channels: Channels
) -> None:
    evaluation_id = new_evaluation(env)
    subscribe(channels)
    # Every task delivered twice, then two ticks: still one event, one call, one e-mail.
    deliver(env, duplicate=True)
    outbox.tick()
    outbox.tick()
    (call,) = channels.receiver.calls
    assert call.signed
    assert call.json["event"] == "evaluation.finished"
    assert call.json["evaluation"]["id"] == evaluation_id
    assert call.json["evaluation"]["status"] == "done"
    assert call.json["evaluation"]["figures"]["event_f1"] is not None
    (message,) = channels.sink.messages
    assert message["To"] == ALICE
    assert message["Subject"] == f"Evaluation {evaluation_id} finished: algo v1 on held 1"
    rows = deliveries()
    assert sorted(d.channel.value for d in rows) == ["mail", "webhook"]
    assert {d.status for d in rows} == {DeliveryStatus.DELIVERED}
    assert {d.attempts for d in rows} == {1}


def test_with_a_broker_the_event_sends_one_deliver_task_after_commit(
    env: Env, channels: Channels, settings_env: pytest.MonkeyPatch
) -> None:
    # Sends are captured (env.sent), so no broker is reached; a URL makes it the Celery mode.
    settings_env.setenv("SZBENCH_BROKER_URL", redis_url(15))
    get_settings.cache_clear()
    evaluation_id = new_evaluation(env)
    subscribe(channels)
    dispatch = {**DISPATCH, queue.TASK_NOTIFY: outbox.deliver_event}
    notify = []
    while env.sent:
        name, queue_name, kwargs = env.sent.pop(0)
        if name == queue.TASK_NOTIFY:
            notify.append((queue_name, kwargs))
        dispatch[name](**kwargs)
        dispatch[name](**kwargs)  # each task twice
    with session_scope() as session:
        event_id = session.scalars(select(NotificationEvent.id)).one()
    # Finalize ran twice; only the run that ended the evaluation recorded the event.
    assert notify == [(queue.QUEUE_MAINTENANCE, {"event_id": event_id})]
    assert len(channels.receiver.calls) == 1
    assert len(channels.sink.messages) == 1
    assert channels.receiver.calls[0].json["evaluation"]["id"] == evaluation_id


def test_an_evaluation_that_fails_for_good_is_told_once(env: Env, channels: Channels) -> None:
    evaluation_id = new_evaluation(env)
    subscribe(channels)
    env.sent.clear()
    error = RuntimeError("the database went away for good")
    pipeline.record_task_failure(queue.TASK_FINALIZE, {"evaluation_id": evaluation_id}, error)
    pipeline.record_task_failure(queue.TASK_FINALIZE, {"evaluation_id": evaluation_id}, error)
    outbox.tick()
    (call,) = channels.receiver.calls
    assert call.json["event"] == "evaluation.failed"
    assert "platform fault" in call.json["evaluation"]["message"]
    assert "went away" not in call.body.decode()  # the traceback is for admins
    (message,) = channels.sink.messages
    assert message["Subject"].startswith(f"Evaluation {evaluation_id} failed")


def test_a_smoke_test_failure_fires_one_delivery_per_channel(env: Env, channels: Channels) -> None:
    env.runner.script = lambda recording: FakeRun(
        outcome=RunOutcome.CRASHED, exit_code=1, log="boom"
    )
    with session_scope() as session:
        world = seed_pending_on_public_sample(session, env)
        version_id = world.version.id
    subscribe(channels)
    outcome = pipeline.smoke_test(version_id)
    assert outcome.status == VersionStatus.REJECTED
    deliver(env)  # the smoke evaluation's own finalize: no evaluation event
    outbox.tick()
    outbox.tick()
    (call,) = channels.receiver.calls
    assert call.signed
    assert call.json["event"] == "smoke_test.failed"
    assert call.json["algorithm_version"]["id"] == version_id
    assert call.json["algorithm_version"]["message"] == outcome.message
    (message,) = channels.sink.messages
    assert "failed its smoke test" in message["Subject"]
    with session_scope() as session:
        kinds = session.scalars(select(NotificationEvent.kind)).all()
    assert kinds == [NotificationKind.SMOKE_TEST_FAILED]


def test_a_user_who_turned_a_kind_off_gets_nothing_of_it(env: Env, channels: Channels) -> None:
    evaluation_id = new_evaluation(env)
    subscribe(channels)
    with session_scope() as session:
        alice = session.scalars(select(User).where(User.email == ALICE)).one()
        preferences.update_preferences(
            session,
            alice,
            events={
                NotificationKind.EVALUATION_FINISHED: {
                    NotificationChannel.MAIL: False,
                    NotificationChannel.WEBHOOK: False,
                }
            },
        )
    deliver(env)
    outbox.tick()
    with session_scope() as session:
        (event,) = session.scalars(select(NotificationEvent)).all()
        assert event.evaluation_id == evaluation_id
        assert event.fanned_out_at is not None
    assert deliveries() == []
    assert channels.receiver.calls == []
    assert channels.sink.messages == []


def test_a_slow_receiver_does_not_hold_up_other_users_deliveries(
    env: Env, settings_env: pytest.MonkeyPatch
) -> None:
    # Issue 28.5: one user's receiver drips its answer; three of their deliveries are due
    # before another user's one. The round calls the slow receiver once (its other
    # deliveries wait for the next round, unclaimed) and delivers the other user's at once.
    for key, value in {
        "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
        "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
        "SZBENCH_WEBHOOK_TIMEOUT_S": "1",  # shortened from 10 s for the test
    }.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    now = datetime.now(UTC)
    with dripping_receiver(interval_s=0.05) as drip, webhook_receiver() as good:
        with session_scope() as session:
            slow_user, fast_user = f.user(session), f.user(session)
            # Two host names for loopback: two receivers, two lanes.
            slow_url = f"http://localhost:{drip.port}/hook"
            preferences.update_preferences(session, slow_user, webhook_url=slow_url)
            preferences.update_preferences(session, fast_user, webhook_url=good.url())
            slow_ids = [
                _due_delivery(session, slow_user.id, f"slow:{i}", now - timedelta(hours=1))
                for i in range(3)
            ]
            fast_id = _due_delivery(session, fast_user.id, "fast", now)
        attempted = outbox.send_due()
        ((sent, hung_up),) = drip.wait_ended(1)
    assert sorted(attempted) == sorted([slow_ids[0], fast_id])
    assert hung_up
    assert sent < 100
    assert len(good.calls) == 1
    with session_scope() as session:
        rows = {d.id: d for d in session.scalars(select(NotificationDelivery))}
        assert rows[fast_id].status == DeliveryStatus.DELIVERED
        assert rows[slow_ids[0]].last_error == "no answer within 1 s"
        assert rows[slow_ids[0]].status == DeliveryStatus.PENDING  # retried later
        assert [rows[i].attempts for i in slow_ids[1:]] == [0, 0]  # next round


def _due_delivery(session: Session, user_id: int, key: str, due_at: datetime) -> int:
    event_id = events._record(session, NotificationKind.EVALUATION_FINISHED, key, enqueue=False)
    row = NotificationDelivery(
        event_id=event_id,
        user_id=user_id,
        channel=NotificationChannel.WEBHOOK,
        status=DeliveryStatus.PENDING,
        payload={"event": "evaluation.finished", "event_id": event_id},
        next_attempt_at=due_at,
    )
    session.add(row)
    session.flush()
    return row.id


# --- phases --------------------------------------------------------------------------------


def _phase_with_submitter(opens_at: datetime, closes_at: datetime) -> int:
    with session_scope() as session:
        world_user = User(email=ALICE, name="Alice")
        session.add(world_user)
        session.flush()
        phase = Phase(slug="final", title="Final", opens_at=opens_at, closes_at=closes_at)
        session.add(phase)
        session.flush()
        algorithm = Algorithm(owner_id=world_user.id, name="algo")
        session.add(algorithm)
        session.flush()
        session.add(AlgorithmVersion(algorithm_id=algorithm.id, version="1", phase_id=phase.id))
        return phase.id


def test_a_phase_opening_and_closing_by_date_is_told_once_each(
    env: Env, channels: Channels
) -> None:
    now = datetime.now(UTC)
    phase_id = _phase_with_submitter(now + timedelta(hours=1), now + timedelta(hours=2))
    subscribe(channels)

    def look(at: datetime) -> list[bool]:
        with session_scope() as session:
            return [t.opened for t in lifecycle.check(session, at)]

    assert look(now) == []  # a new phase, not open yet: nothing to tell
    assert look(now + timedelta(hours=1)) == [True]  # its opening date passed; nothing written
    assert look(now + timedelta(hours=1, minutes=1)) == []
    assert look(now + timedelta(hours=2)) == [False]
    assert look(now + timedelta(hours=3)) == []
    # The notifications tick tells of both transitions, once.
    report = outbox.tick()
    assert len(report.phase_events) == 2
    assert outbox.tick().phase_events == []
    told = [c.json["event"] for c in channels.receiver.calls]
    assert told == ["phase.opened", "phase.closed"]
    assert all(c.signed for c in channels.receiver.calls)
    assert [m["Subject"] for m in channels.sink.messages] == [
        "Phase Final is open for submissions",
        "Phase Final closed",
    ]
    with session_scope() as session:
        state = session.get_one(PhaseState, phase_id)
        assert state.changes == 2
        assert state.is_open is False


def test_the_notifications_tick_only_consumes_phase_transitions(
    env: Env, channels: Channels
) -> None:
    # Issue 32.1: a phase whose closing date passed is the phase lifecycle's to notice. The
    # notifications tick neither notices it, nor freezes boards, nor tells of it until the
    # lifecycle has recorded the transition; then it tells of it once.
    now = datetime.now(UTC)
    phase_id = _phase_with_submitter(now - timedelta(hours=2), now - timedelta(hours=1))
    with session_scope() as session:
        session.add(PhaseState(phase_id=phase_id, is_open=True))  # seen open before
    subscribe(channels)
    assert outbox.tick().phase_events == []
    with session_scope() as session:
        assert session.get_one(PhaseState, phase_id).is_open is True
        assert session.scalar(select(func.count(PhaseTransition.id))) == 0
    assert channels.receiver.calls == []
    with session_scope() as session:
        (transition,) = lifecycle.check(session)
        assert (transition.phase_id, transition.seq, transition.opened) == (phase_id, 1, False)
    assert len(outbox.tick().phase_events) == 1
    assert outbox.tick().phase_events == []
    assert [c.json["event"] for c in channels.receiver.calls] == ["phase.closed"]


def test_two_ticks_at_once_record_a_phase_change_once(env: Env) -> None:
    now = datetime.now(UTC)
    _phase_with_submitter(now - timedelta(hours=1), now + timedelta(hours=1))
    with session_scope() as session:
        # Seen closed before (as if its opening date passed since the last look).
        session.add(PhaseState(phase_id=session.scalars(select(Phase.id)).one(), is_open=False))
    barrier = threading.Barrier(2)
    made: list[list[int]] = []

    def tick_now() -> None:
        with session_scope() as session:
            barrier.wait()
            made.append([t.seq for t in lifecycle.check(session, now)])

    threads = [threading.Thread(target=tick_now) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(len(m) for m in made) == [0, 1]
    with session_scope() as session:
        assert session.scalar(select(func.count(PhaseTransition.id))) == 1
    outbox.tick()
    outbox.tick()
    with session_scope() as session:
        assert session.scalar(select(func.count(NotificationEvent.id))) == 1


def test_phases_older_than_notifications_are_looked_at_without_an_event(env: Env) -> None:
    now = datetime.now(UTC)
    _phase_with_submitter(now - timedelta(hours=1), now + timedelta(hours=1))
    with session_scope() as session:
        # What migration 0011 writes for phases that existed before it.
        session.add(PhaseState(phase_id=session.scalars(select(Phase.id)).one(), is_open=None))
    with session_scope() as session:
        assert lifecycle.check(session, now) == []
        assert session.scalars(select(PhaseState.is_open)).one() is True


# --- the embedded mode ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("embedded")
def test_the_embedded_worker_tells_the_owner_without_a_broker(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setattr(queue, "NOTIFY_TICK_S", 0.2)
    settings_env.setenv("SZBENCH_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
    settings_env.setenv("SZBENCH_WEBHOOK_ALLOW_HTTP", "true")
    get_settings.cache_clear()
    runner = FakeRunner(script=lambda rec: FakeRun(outcome=RunOutcome.TIMEOUT), image_digest=DIGEST)
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS[:1])
    with webhook_receiver() as receiver:
        with session_scope() as session:
            world = seed_world(session, prepared, RECS[:1], digest=DIGEST)
            preferences.update_preferences(session, world.user, webhook_url=receiver.url())
            receiver.secret = preferences.preferences_of(session, world.user).webhook_secret
            evaluation_id = evaluations.create_evaluation(
                session, algorithm_version=world.version, dataset_version=world.dataset_version
            ).id
        worker = start_embedded_worker(upgrade_database=False)
        try:
            assert wait_finished(evaluation_id).status == EvaluationStatus.DONE
            (call,) = receiver.wait_for(1)
        finally:
            worker.stop()
    assert call.signed
    assert call.json["evaluation"]["id"] == evaluation_id
    # A timeout on held-out data: counted, never described.
    assert call.json["evaluation"]["outcomes"] == {"failed": 1}
