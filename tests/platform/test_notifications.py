"""Notifications (issue 23.1): the webhook's signature, the addresses it may reach, retries
with backoff, idempotent deliveries, preferences, what a notification discloses, and the API
under /api/v1/users/me/notifications. Real PostgreSQL, a real webhook receiver and a real
SMTP sink on loopback."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.errors import BadRequest
from szbench.models import (
    DatasetKind,
    DeliveryStatus,
    Disclosure,
    EvaluationKind,
    EvaluationStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationKind,
    RunOutcome,
    Team,
    TeamMember,
    TeamRole,
    User,
    VersionStatus,
)
from szbench.notifications import delivery, events, fanout, preferences, webhook
from tests.platform import factories as f
from tests.platform.smtp_sink import Sink, smtp_sink
from tests.platform.webhook_receiver import Receiver, webhook_receiver

LOOPBACK = {
    "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
}
LEAK = "SECRET-FROM-THE-CONTAINER"


def _env(patcher: pytest.MonkeyPatch, **values: str) -> None:
    for key, value in values.items():
        patcher.setenv(key, value)
    get_settings.cache_clear()


@pytest.fixture
def receiver(settings_env: pytest.MonkeyPatch) -> Iterator[Receiver]:
    _env(settings_env, **LOOPBACK)
    with webhook_receiver() as server:
        yield server


@pytest.fixture
def sink(settings_env: pytest.MonkeyPatch) -> Iterator[Sink]:
    with smtp_sink() as server:
        _env(
            settings_env,
            SZBENCH_SMTP_HOST="127.0.0.1",
            SZBENCH_SMTP_PORT=str(server.port),
            SZBENCH_SMTP_STARTTLS="false",
        )
        yield server


# --- the signature ------------------------------------------------------------------------------


def test_signature_is_the_hmac_of_timestamp_and_body() -> None:
    body = b'{"event":"test"}'
    header = webhook.sign("a-secret-of-16-chars", 1_800_000_000, body)
    assert header.startswith("sha256=")
    assert len(header) == 7 + 64
    assert header == webhook.sign("a-secret-of-16-chars", 1_800_000_000, body)
    # Another secret, time or body signs differently: none can be replayed as another.
    assert header != webhook.sign("another-secret-16ch", 1_800_000_000, body)
    assert header != webhook.sign("a-secret-of-16-chars", 1_800_000_001, body)
    assert header != webhook.sign("a-secret-of-16-chars", 1_800_000_000, body + b" ")


def test_backoff_doubles_up_to_its_cap(settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setattr(delivery, "BACKOFF_BASE_S", 30.0)
    settings_env.setattr(delivery, "BACKOFF_MAX_S", 200.0)
    assert [delivery.backoff_s(n) for n in range(1, 6)] == [30.0, 60.0, 120.0, 200.0, 200.0]


# --- which URLs and addresses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://hooks.example/x", "https://"),
        ("http://93.184.216.34/x", "only https://"),
        ("https://user:pw@93.184.216.34/x", "no user name or password"),
        ("https://127.0.0.1/x", "not a public internet address"),
        ("https://localhost:8443/x", "not a public internet address"),
        ("https://10.1.2.3/x", "not a public internet address"),
        ("https://192.168.0.10/x", "not a public internet address"),
        ("https://169.254.169.254/latest/meta-data/", "not a public internet address"),
        ("https://[::1]/x", "not a public internet address"),
        ("https://[::ffff:127.0.0.1]/x", "not a public internet address"),
        ("https://[fe80::1]/x", "not a public internet address"),
        ("https://100.64.0.1/x", "not a public internet address"),
    ],
)
def test_webhook_urls_that_are_refused(
    settings_env: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    with pytest.raises(webhook.Refused) as refused:
        webhook.check_addresses(webhook.check_url(url))
    assert refused.value.detail.startswith("webhook_url: ")
    assert reason in refused.value.detail


# Issue 28.6: IPv6 forms that carry an IPv4 address lead to that address.
EMBEDDED_PRIVATE = [
    "64:ff9b::7f00:1",  # NAT64 well-known prefix: 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64: 169.254.169.254, the cloud's metadata service
    "64:ff9b:1::a00:1",  # local-use NAT64 (refused whatever it holds)
    "2002:7f00:1::1",  # 6to4: 127.0.0.1
    "2002:a00:1::1",  # 6to4: 10.0.0.1
    "::7f00:1",  # IPv4-compatible: 127.0.0.1
    "::a9fe:a9fe",  # IPv4-compatible: 169.254.169.254
    "::ffff:0:7f00:1",  # SIIT (IPv4-translated): 127.0.0.1
    "::ffff:0:c0a8:1",  # SIIT: 192.168.0.1
    "2001:0:7f00:1::1",  # Teredo (refused whatever it holds)
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo with a public server
]


@pytest.mark.parametrize("address", EMBEDDED_PRIVATE)
def test_ipv6_forms_that_embed_an_ipv4_address_are_checked_as_it(
    settings_env: pytest.MonkeyPatch, address: str
) -> None:
    with pytest.raises(webhook.Refused) as refused:
        webhook.check_addresses(webhook.check_url(f"https://[{address}]/hook"))
    assert refused.value.detail.startswith("webhook_url: ")
    assert "webhooks may not reach it" in refused.value.detail
    # The same address where a name resolves to it (the check on connecting).
    assert webhook.address_refusal(ipaddress.ip_address(address), get_settings())


@pytest.mark.parametrize(
    "address", ["64:ff9b::5db8:d822", "2002:5db8:d822::1", "::ffff:0:5db8:d822", "2606:4700::1"]
)
def test_ipv6_forms_of_a_public_address_pass(
    settings_env: pytest.MonkeyPatch, address: str
) -> None:
    # 93.184.216.34 through NAT64, 6to4 and SIIT, and a plain public IPv6 address.
    assert webhook.address_refusal(ipaddress.ip_address(address), get_settings()) is None


def test_an_allowed_network_covers_its_embedded_forms(settings_env: pytest.MonkeyPatch) -> None:
    _env(settings_env, SZBENCH_WEBHOOK_ALLOWED_NETWORKS="10.20.0.0/16")
    settings = get_settings()
    assert webhook.address_refusal(ipaddress.ip_address("64:ff9b::a14:105"), settings) is None
    assert webhook.address_refusal(ipaddress.ip_address("64:ff9b::a15:105"), settings)


def test_public_addresses_pass_and_the_operator_may_allow_a_network(
    settings_env: pytest.MonkeyPatch,
) -> None:
    public = webhook.check_url("https://93.184.216.34:8443/hook")
    assert [str(a) for a in webhook.check_addresses(public)] == ["93.184.216.34"]
    intranet = webhook.check_url("https://10.20.1.5/hook")
    with pytest.raises(webhook.Refused):
        webhook.check_addresses(intranet)
    _env(settings_env, SZBENCH_WEBHOOK_ALLOWED_NETWORKS="10.20.0.0/16")
    assert webhook.check_addresses(intranet)
    # Plain http only where the operator allows it, and then only to the listed networks.
    with pytest.raises(webhook.Refused, match="only https"):
        webhook.check_url("http://10.20.1.5/hook")
    _env(settings_env, SZBENCH_WEBHOOK_ALLOW_HTTP="true")
    assert webhook.check_addresses(webhook.check_url("http://10.20.1.5/hook"))
    with pytest.raises(webhook.Refused, match="plain http goes only to"):
        webhook.check_addresses(webhook.check_url("http://93.184.216.34/hook"))


def test_centre_mode_pushes_nothing_off_the_host(
    settings_env: pytest.MonkeyPatch, sink: Sink
) -> None:
    _env(settings_env, SZBENCH_CENTRE_MODE="true")
    with pytest.raises(webhook.Refused, match="centre mode"):
        webhook.check_addresses(webhook.check_url("https://93.184.216.34/hook"))
    assert not preferences.mail_enabled()  # SMTP is set, but no notification e-mail
    _env(settings_env, SZBENCH_WEBHOOK_ALLOWED_NETWORKS="10.20.0.0/16")
    assert webhook.check_addresses(webhook.check_url("https://10.20.1.5/hook"))


# --- one call ---------------------------------------------------------------------------------


def test_a_call_reaches_a_real_receiver_signed(receiver: Receiver) -> None:
    receiver.secret = "receiver-secret-0123456789"
    outcome = webhook.post(receiver.url(), receiver.secret, b'{"event":"test"}', {"X-A": "1"})
    assert outcome.delivered
    assert outcome.status_code == 204
    (call,) = receiver.calls
    assert call.signed
    assert call.body == b'{"event":"test"}'
    assert call.headers["x-a"] == "1"
    assert call.headers["content-type"] == "application/json"


def test_a_call_keeps_only_a_bounded_snippet_of_the_answer(receiver: Receiver) -> None:
    receiver.answers = [500]
    receiver.answer_body = b"E" * 100_000
    outcome = webhook.post(receiver.url(), "s" * 16, b"{}", {})
    assert not outcome.delivered
    assert outcome.retry
    assert outcome.status_code == 500
    assert outcome.error == "answered 500"
    assert outcome.snippet == "E" * webhook.SNIPPET_BYTES


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    receiver.answers = [302]
    outcome = webhook.post(receiver.url(), "s" * 16, b"{}", {})
    assert not outcome.delivered
    assert outcome.status_code == 302
    assert "redirects are not followed" in outcome.error
    assert len(receiver.calls) == 1


def test_the_address_is_checked_when_connecting_not_only_when_saved(
    receiver: Receiver, settings_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name that resolved to a public address when the URL was saved resolves to loopback
    # at the call (DNS rebinding): the call is refused, and nothing reaches the receiver.
    real = socket.getaddrinfo
    answers = iter(["93.184.216.34", "127.0.0.1"])

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.example":
            return real(next(answers), port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    _env(settings_env, SZBENCH_WEBHOOK_ALLOWED_NETWORKS="")
    url = f"http://hooks.example:{receiver.port}/hook"
    target = webhook.check_url(url)
    with pytest.raises(webhook.Refused):  # http to a public address: refused already
        webhook.check_addresses(target)
    outcome = webhook.post(url, "s" * 16, b"{}", {})
    assert not outcome.delivered
    assert not outcome.retry
    assert "127.0.0.1" in outcome.error
    assert "not a public internet address" in outcome.error
    assert receiver.calls == []


def test_no_answer_in_time_is_a_failure_to_retry(settings_env: pytest.MonkeyPatch) -> None:
    _env(settings_env, SZBENCH_WEBHOOK_TIMEOUT_S="0.5", **LOOPBACK)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        outcome = webhook.post(f"http://127.0.0.1:{silent.getsockname()[1]}/", "s" * 16, b"{}", {})
    finally:
        silent.close()
    assert not outcome.delivered
    assert outcome.retry
    assert outcome.error == "no answer within 0.5 s"


# --- preferences --------------------------------------------------------------------------------


def test_preferences_default_on_and_each_switch_turns_off(
    db_session: Session, receiver: Receiver
) -> None:
    user = f.user(db_session)
    prefs = preferences.preferences_of(db_session, user)
    assert all(all(c.values()) for c in preferences.switches(prefs).values())
    assert prefs.webhook_url == ""
    assert not prefs.all_phases
    secret = preferences.update_preferences(
        db_session,
        user,
        events={NotificationKind.EVALUATION_FINISHED: {NotificationChannel.MAIL: False}},
        webhook_url=receiver.url(),
        all_phases=True,
    )
    # A first URL gets a secret (shown once); a later change keeps it.
    assert secret is not None
    assert len(secret) >= 32
    assert preferences.update_preferences(db_session, user, webhook_url=receiver.url("/b")) is None
    prefs = preferences.preferences_of(db_session, user)
    switches = preferences.switches(prefs)
    assert switches[NotificationKind.EVALUATION_FINISHED] == {
        NotificationChannel.MAIL: False,
        NotificationChannel.WEBHOOK: True,
    }
    assert switches[NotificationKind.EVALUATION_FAILED][NotificationChannel.MAIL] is True
    assert prefs.webhook_secret == secret
    assert prefs.all_phases


def test_a_refused_url_changes_nothing(db_session: Session, receiver: Receiver) -> None:
    user = f.user(db_session)
    preferences.update_preferences(db_session, user, webhook_url=receiver.url())
    with pytest.raises(webhook.Refused):
        preferences.update_preferences(
            db_session,
            user,
            events={NotificationKind.PHASE_OPENED: {NotificationChannel.WEBHOOK: False}},
            webhook_url="https://10.9.9.9/hook",
        )
    prefs = preferences.preferences_of(db_session, user)
    assert prefs.webhook_url == receiver.url()
    assert preferences.is_on(prefs, NotificationKind.PHASE_OPENED, NotificationChannel.WEBHOOK)


def test_secrets_made_or_given(db_session: Session) -> None:
    user = f.user(db_session)
    made = preferences.set_secret(db_session, user)
    assert made != preferences.set_secret(db_session, user)
    assert preferences.set_secret(db_session, user, "my-own-secret-1234") == "my-own-secret-1234"
    for bad in ("short", " padded-secret-123 ", "x" * 201, "tab\there-secret-12"):
        with pytest.raises(BadRequest, match=r"^secret: "):
            preferences.set_secret(db_session, user, bad)


# --- events, fan-out, attempts -------------------------------------------------------------------


def _held_out_evaluation(
    db_session: Session, owner: User, status: EvaluationStatus = EvaluationStatus.DONE
) -> Any:
    dataset = f.dataset(db_session, DatasetKind.HELD_OUT, disclosure=Disclosure.AGGREGATE)
    dv = f.dataset_version(db_session, dataset)
    av = f.version(db_session, f.algorithm(db_session, owner, name="detector"), version="2.0")
    ev = f.evaluation(db_session, av, dv, status=status, message="1 of 2 recordings failed.")
    recordings = [f.recording(db_session, dv, subject=s) for s in ("01", "02")]
    f.run(db_session, ev, recordings[0], RunOutcome.OK, submitter_message=LEAK)
    f.run(db_session, ev, recordings[1], RunOutcome.CRASHED, submitter_message=LEAK + " crash")
    if status == EvaluationStatus.DONE:
        f.result(db_session, ev, {"01": {"event_f1": 0.5}, "02": {"event_f1": 0.25}})
    return ev


def test_an_evaluation_end_is_one_event_and_one_delivery_per_channel(
    db_session: Session, receiver: Receiver, sink: Sink
) -> None:
    owner = f.user(db_session)
    preferences.update_preferences(db_session, owner, webhook_url=receiver.url())
    ev = _held_out_evaluation(db_session, owner)
    first = events.record_evaluation_end(db_session, ev)
    assert events.record_evaluation_end(db_session, ev) == first  # recorded twice: one event
    assert len(fanout.fan_out(db_session, first)) == 2
    assert fanout.fan_out(db_session, first) == []
    rows = db_session.scalars(
        select(NotificationDelivery).where(NotificationDelivery.event_id == first)
    ).all()
    assert sorted(r.channel.value for r in rows) == ["mail", "webhook"]
    assert {r.status for r in rows} == {DeliveryStatus.PENDING}
    assert db_session.scalar(select(func.count(NotificationEvent.id))) == 1


def test_a_held_out_evaluation_says_what_its_page_shows_its_owner(
    db_session: Session, receiver: Receiver
) -> None:
    owner = f.user(db_session)
    preferences.update_preferences(db_session, owner, webhook_url=receiver.url())
    ev = _held_out_evaluation(db_session, owner)
    event_id = events.record_evaluation_end(db_session, ev)
    assert event_id is not None
    fanout.fan_out(db_session, event_id)
    row = db_session.scalars(
        select(NotificationDelivery).where(NotificationDelivery.event_id == event_id)
    ).one()
    payload = row.payload
    assert payload["event"] == "evaluation.finished"
    e = payload["evaluation"]
    assert e["status"] == "done"
    assert e["held_out"]
    assert e["url"] == f"/evaluations/{ev.id}"
    # Aggregate disclosure: how many runs succeeded and failed, never which or why.
    assert e["outcomes"] == {"ok": 1, "failed": 1}
    # The figures as released to the owner at this level: rounded (docs/security.md).
    assert (e["figures"]["event_f1"], e["figures"]["release"]) == (0.38, "rounded")
    assert e["message"] == "1 of 2 recordings failed."
    assert LEAK not in json.dumps(payload)
    assert (
        delivery.summary(payload)
        == f"Evaluation {ev.id} finished: detector 2.0 on {e['dataset']} {e['dataset_version']}"
    )


def test_smoke_failure_message_follows_the_disclosure_of_its_dataset(
    db_session: Session, receiver: Receiver
) -> None:
    owner = f.user(db_session)
    preferences.update_preferences(db_session, owner, webhook_url=receiver.url())
    for kind, shown in ((DatasetKind.PUBLIC_SAMPLE, True), (DatasetKind.HELD_OUT, False)):
        av = f.version(
            db_session,
            f.algorithm(db_session, owner),
            status=VersionStatus.REJECTED,
            status_message=f"Smoke test failed (crashed): {LEAK}",
        )
        dv = f.dataset_version(db_session, f.dataset(db_session, kind))
        smoke = f.evaluation(db_session, av, dv, kind=EvaluationKind.SMOKE_TEST)
        f.run(
            db_session,
            smoke,
            f.recording(db_session, dv),
            RunOutcome.CRASHED,
            submitter_message=LEAK,
        )
        event_id = events.record_smoke_failure(db_session, av)
        fanout.fan_out(db_session, event_id)
        payload = db_session.scalars(
            select(NotificationDelivery.payload).where(NotificationDelivery.event_id == event_id)
        ).one()
        assert payload["event"] == "smoke_test.failed"
        assert (LEAK in json.dumps(payload)) is shown, kind


def test_nobody_but_the_owner_hears_of_an_evaluation(
    db_session: Session, receiver: Receiver
) -> None:
    owner, other = f.user(db_session), f.user(db_session)
    for user in (owner, other):
        preferences.update_preferences(db_session, user, webhook_url=receiver.url(f"/{user.id}"))
    ev = _held_out_evaluation(db_session, owner, EvaluationStatus.FAILED)
    event_id = events.record_evaluation_end(db_session, ev)
    assert event_id is not None
    fanout.fan_out(db_session, event_id)
    users = db_session.scalars(
        select(NotificationDelivery.user_id).where(NotificationDelivery.event_id == event_id)
    ).all()
    assert users == [owner.id]


def _team_of(db_session: Session, *users: User) -> Team:
    team = Team(name=f"team-{users[0].id}")
    db_session.add(team)
    db_session.flush()
    for user in users:
        db_session.add(TeamMember(team_id=team.id, user_id=user.id, role=TeamRole.MEMBER))
    db_session.flush()
    return team


def test_a_team_algorithm_tells_every_member_what_the_owner_is_told(
    db_session: Session, receiver: Receiver
) -> None:
    owner, member, outsider = (f.user(db_session) for _ in range(3))
    for user in (owner, member, outsider):
        preferences.update_preferences(db_session, user, webhook_url=receiver.url(f"/{user.id}"))
    ev = _held_out_evaluation(db_session, owner)
    ev.algorithm_version.algorithm.team_id = _team_of(db_session, owner, member).id
    event_id = events.record_evaluation_end(db_session, ev)
    assert event_id is not None
    fanout.fan_out(db_session, event_id)
    rows = db_session.scalars(
        select(NotificationDelivery)
        .where(NotificationDelivery.event_id == event_id)
        .order_by(NotificationDelivery.user_id)
    ).all()
    assert [r.user_id for r in rows] == sorted([owner.id, member.id])
    # Each is told through the disclosure rules as themselves: the same owner's view here.
    assert rows[0].payload["evaluation"] == rows[1].payload["evaluation"]
    assert rows[1].payload["evaluation"]["outcomes"] == {"ok": 1, "failed": 1}
    assert LEAK not in json.dumps(rows[1].payload)


def test_phase_news_reaches_the_team_of_a_submitted_algorithm(
    db_session: Session, receiver: Receiver
) -> None:
    owner, member, outsider = (f.user(db_session) for _ in range(3))
    for user in (owner, member, outsider):
        preferences.update_preferences(db_session, user, webhook_url=receiver.url(f"/{user.id}"))
    phase = f.phase(db_session, title="Final")
    algo = f.algorithm(db_session, owner, team_id=_team_of(db_session, member).id)
    f.version(db_session, algo, phase_id=phase.id)
    event_id = events._record(
        db_session, NotificationKind.PHASE_OPENED, f"phase:{phase.id}:1", phase_id=phase.id
    )
    fanout.fan_out(db_session, event_id)
    users = db_session.scalars(
        select(NotificationDelivery.user_id).where(NotificationDelivery.event_id == event_id)
    ).all()
    assert sorted(users) == sorted([owner.id, member.id])


def test_switched_off_kinds_make_no_delivery(db_session: Session, receiver: Receiver) -> None:
    owner = f.user(db_session)
    preferences.update_preferences(
        db_session,
        owner,
        webhook_url=receiver.url(),
        events={NotificationKind.EVALUATION_FAILED: {NotificationChannel.WEBHOOK: False}},
    )
    failed = _held_out_evaluation(db_session, owner, EvaluationStatus.FAILED)
    event_id = events.record_evaluation_end(db_session, failed)
    assert event_id is not None
    assert fanout.fan_out(db_session, event_id) == []  # mail is off here, webhook switched off


def test_cancelled_and_smoke_evaluations_are_no_evaluation_events(db_session: Session) -> None:
    owner = f.user(db_session)
    ev = _held_out_evaluation(db_session, owner, EvaluationStatus.CANCELLED)
    assert events.record_evaluation_end(db_session, ev) is None
    ev.status, ev.kind = EvaluationStatus.DONE, EvaluationKind.SMOKE_TEST
    assert events.record_evaluation_end(db_session, ev) is None


def test_phase_news_goes_to_its_submitters_and_those_who_asked(
    db_session: Session, receiver: Receiver
) -> None:
    submitter, curious, bystander = (f.user(db_session) for _ in range(3))
    for user in (submitter, curious, bystander):
        preferences.update_preferences(db_session, user, webhook_url=receiver.url(f"/{user.id}"))
    preferences.update_preferences(db_session, curious, all_phases=True)
    phase = f.phase(db_session, title="Final")
    f.version(db_session, f.algorithm(db_session, submitter), phase_id=phase.id)
    event_id = events._record(
        db_session, NotificationKind.PHASE_CLOSED, f"phase:{phase.id}:9", phase_id=phase.id
    )
    fanout.fan_out(db_session, event_id)
    rows = db_session.scalars(
        select(NotificationDelivery).where(NotificationDelivery.event_id == event_id)
    ).all()
    assert sorted(r.user_id for r in rows) == sorted([submitter.id, curious.id])
    assert delivery.summary(rows[0].payload) == "Phase Final closed"


def test_attempts_retry_with_backoff_then_give_up(
    db_session: Session, receiver: Receiver, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setattr(delivery, "MAX_ATTEMPTS", 3)
    owner = f.user(db_session)
    preferences.update_preferences(db_session, owner, webhook_url=receiver.url())
    event_id = events.record_evaluation_end(db_session, _held_out_evaluation(db_session, owner))
    assert event_id is not None
    fanout.fan_out(db_session, event_id)
    receiver.answers = [503, 503, 503]
    receiver.secret = preferences.preferences_of(db_session, owner).webhook_secret
    ((delivery_id, _lane),) = delivery.due(db_session, event_id=event_id)
    waits = []
    for attempt in (1, 2, 3):
        job = delivery.claim(db_session, delivery_id)
        assert job is not None
        # Claimed: a second worker finds nothing due.
        assert delivery.claim(db_session, delivery_id) is None
        before = datetime.now(UTC)
        row = delivery.finish(db_session, delivery_id, delivery.send(job))
        assert row.attempts == attempt
        assert row.last_status_code == 503
        if attempt < 3:
            assert row.status == DeliveryStatus.PENDING
            waits.append((row.next_attempt_at - before).total_seconds())
            assert delivery.due(db_session, event_id=event_id) == []  # not due before its time
            row.next_attempt_at = before - timedelta(seconds=1)
            db_session.flush()
    assert waits[0] == pytest.approx(60, abs=5)
    assert waits[1] == pytest.approx(120, abs=5)
    assert row.status == DeliveryStatus.FAILED
    assert row.next_attempt_at is None
    # Every attempt sent the same body, signed with the owner's secret.
    assert len(receiver.calls) == 3
    assert all(c.signed for c in receiver.calls)
    c = receiver.calls[0]
    assert {call.body for call in receiver.calls} == {c.body}
    assert c.headers["x-szbench-delivery"] == str(delivery_id)
    assert c.headers["x-szbench-event"] == "evaluation.finished"


def test_a_refused_address_is_not_retried(
    db_session: Session, receiver: Receiver, settings_env: pytest.MonkeyPatch
) -> None:
    owner = f.user(db_session)
    preferences.update_preferences(db_session, owner, webhook_url=receiver.url())
    event_id = events.record_evaluation_end(db_session, _held_out_evaluation(db_session, owner))
    assert event_id is not None
    fanout.fan_out(db_session, event_id)
    _env(settings_env, SZBENCH_WEBHOOK_ALLOWED_NETWORKS="")  # the operator narrowed it since
    ((delivery_id, _lane),) = delivery.due(db_session, event_id=event_id)
    job = delivery.claim(db_session, delivery_id)
    assert job is not None
    row = delivery.finish(db_session, delivery_id, delivery.send(job))
    assert row.status == DeliveryStatus.FAILED
    assert row.attempts == 1
    assert "not a public internet address" in row.last_error
    assert receiver.calls == []


# --- the API ----------------------------------------------------------------------------------


# The API routes of test sends: tests/platform/test_notification_sends.py (they commit).
