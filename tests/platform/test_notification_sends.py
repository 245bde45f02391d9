"""Test notifications ("send a test", issue 28.5): sent off the request thread, bounded by
the call's deadline, rate-limited per user, and harmless to every other route even 50 at
once to a receiver that drips its answer one byte at a time.

The routes open their own transactions (the attempts run in the senders' pool), so these
tests use committed data in the session's real PostgreSQL database, emptied afterwards."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from szbench import db
from szbench.app import create_app
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.notifications import ping, preferences
from tests.platform import factories as f
from tests.platform.dripping_receiver import Drip, dripping_receiver
from tests.platform.smtp_sink import Sink, smtp_sink
from tests.platform.webhook_receiver import Receiver, webhook_receiver
from tests.web.conftest import PASSWORD, csrf_of, sign_in
from tests.worker._pipeline_factories import truncate_all

BASE = "/api/v1/users/me/notifications"
PAGE = "/account/notifications"
LOOPBACK = {
    "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
}


@pytest.fixture
def live(pg_url: str, settings_env: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The app on the real database, committing for real (emptied afterwards)."""
    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    for key, value in LOOPBACK.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    try:
        yield settings_env
    finally:
        with session_scope() as session:
            truncate_all(session)


def _user_with_webhook(url: str, email: str | None = None) -> tuple[dict[str, str], str]:
    """A researcher with a webhook at ``url``: their API headers and the signing secret."""
    with session_scope() as session:
        user = f.user(session, password=PASSWORD, **({"email": email} if email else {}))
        user.email_verified_at = user.created_at
        secret = preferences.update_preferences(session, user, webhook_url=url)
        assert secret is not None
        return f.headers(session, user), secret


def test_api_settings_test_send_and_delivery_log(live: pytest.MonkeyPatch) -> None:
    with webhook_receiver() as receiver, smtp_sink() as sink:
        live.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
        live.setenv("SZBENCH_SMTP_PORT", str(sink.port))
        live.setenv("SZBENCH_SMTP_STARTTLS", "false")
        live.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
        get_settings.cache_clear()
        _api_round_trip(receiver, sink)


def _api_round_trip(receiver: Receiver, sink: Sink) -> None:
    with session_scope() as session:
        headers = f.headers(session, f.user(session, email="hooked@example.org"))
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        r = client.get(BASE, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["mail_enabled"]
        assert r.json()["mail_to"] == "hooked@example.org"
        assert r.json()["events"]["evaluation_finished"] == {"mail": True, "webhook": True}
        r = client.patch(BASE, headers=headers, json={"webhook_url": "https://169.254.169.254/x"})
        assert r.status_code == 400
        assert r.json()["error"] == "Refused"
        assert r.json()["detail"].startswith("webhook_url: ")
        r = client.patch(
            BASE,
            headers=headers,
            json={"webhook_url": receiver.url(), "events": {"phase_opened": {"mail": False}}},
        )
        assert r.status_code == 200, r.text
        secret = r.json()["webhook_secret"]
        assert secret
        assert r.json()["webhook_secret_set"]
        assert r.json()["events"]["phase_opened"] == {"mail": False, "webhook": True}
        assert "webhook_secret" not in client.get(BASE, headers=headers).json()
        receiver.secret = secret
        r = client.post(f"{BASE}/test", headers=headers)
        assert r.status_code == 200, r.text
        outcomes = {d["channel"]: d for d in r.json()}
        assert outcomes["webhook"]["status"] == "delivered"
        assert outcomes["webhook"]["last_status_code"] == 204
        assert outcomes["mail"]["status"] == "delivered"
        (call,) = receiver.calls
        assert call.signed
        assert call.json["event"] == "test"
        (message,) = sink.messages
        assert message["To"] == "hooked@example.org"
        assert message["Subject"] == "szbench test notification"
        r = client.post(
            f"{BASE}/webhook-secret", headers=headers, json={"secret": "mine-and-long-enough"}
        )
        assert r.json() == {"webhook_secret": "mine-and-long-enough"}
        r = client.post(f"{BASE}/webhook-secret", headers=headers, json={"secret": "short"})
        assert r.status_code == 422
        page = client.get(f"{BASE}/deliveries", headers=headers).json()
        assert page["total"] == 2
        assert {d["summary"] for d in page["items"]} == {"szbench test notification"}
        assert client.get(f"{BASE}/deliveries").status_code == 401


def test_a_test_without_a_channel_says_what_to_do(live: pytest.MonkeyPatch) -> None:
    with session_scope() as session:
        headers = f.headers(session, f.user(session))
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        r = client.post(f"{BASE}/test", headers=headers)
    assert r.status_code == 409
    assert r.json()["detail"].startswith("webhook_url: nothing to send a test to")


def test_a_test_to_a_dripping_receiver_answers_having_given_up(
    live: pytest.MonkeyPatch,
) -> None:
    live.setenv("SZBENCH_WEBHOOK_TIMEOUT_S", "0.5")  # shortened from 10 s for the test
    get_settings.cache_clear()
    with dripping_receiver(interval_s=0.05) as drip:  # its headers alone take about 23 s
        headers, _ = _user_with_webhook(drip.url())
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            r = client.post(f"{BASE}/test", headers=headers)
        ((sent, hung_up),) = drip.wait_ended(1)
    assert r.status_code == 200, r.text
    (outcome,) = r.json()
    assert outcome["status"] == "failed"
    assert outcome["last_error"] == "no answer within 0.5 s"
    assert hung_up  # the platform hung up; the receiver had not finished
    assert sent < 100


def test_tests_are_rate_limited_per_user(live: pytest.MonkeyPatch) -> None:
    with webhook_receiver() as receiver:
        headers, _ = _user_with_webhook(receiver.url())
        other, _ = _user_with_webhook(receiver.url())
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            codes = [client.post(f"{BASE}/test", headers=headers) for _ in range(6)]
            assert [r.status_code for r in codes] == [200] * ping.TESTS_PER_WINDOW + [429]
            assert int(codes[-1].headers["retry-after"]) > 0
            assert "too many test notifications" in codes[-1].json()["detail"]
            # Another user's tests are their own.
            assert client.post(f"{BASE}/test", headers=other).status_code == 200
        assert len(receiver.calls) == ping.TESTS_PER_WINDOW + 1


def test_one_test_at_a_time_per_user(live: pytest.MonkeyPatch) -> None:
    live.setenv("SZBENCH_WEBHOOK_TIMEOUT_S", "2")  # shortened from 10 s for the test
    get_settings.cache_clear()
    with dripping_receiver(interval_s=0.05) as drip:
        headers, _ = _user_with_webhook(drip.url())
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            first: list[Any] = []
            thread = threading.Thread(
                target=lambda: first.append(client.post(f"{BASE}/test", headers=headers))
            )
            thread.start()
            with drip.changed:  # the first test's call is under way
                assert drip.changed.wait_for(lambda: drip.connections == 1, 30)
            second = client.post(f"{BASE}/test", headers=headers)
            thread.join(30)
    assert second.status_code == 429
    assert "still being sent" in second.json()["detail"]
    assert first[0].status_code == 200
    assert drip.connections == 1


@pytest.mark.slow
def test_fifty_tests_at_once_leave_the_other_routes_answering(
    live: pytest.MonkeyPatch,
) -> None:
    # Fifty test sends at once from one account (45 held every sync route before), each
    # to a receiver that drips, with the shipped 10 s deadline: while the receiver still
    # holds its call, a sync route that reads the database answers, and every test
    # request has been answered (sent, or refused with 429) within the deadline's wait.
    with dripping_receiver(interval_s=0.05) as drip:
        headers, _ = _user_with_webhook(drip.url())
        statuses, other = anyio.run(_fifty_and_one_more, drip, headers)
        # The other route answered while the receiver was still dripping its one call.
        assert other == (200, 0)
        assert sorted(set(statuses)) == [200, 429]
        assert statuses.count(200) == 1
        assert drip.connections == 1


def _first_call_arrived(drip: Drip) -> None:
    with drip.changed:
        assert drip.changed.wait_for(lambda: drip.connections >= 1, 30)


async def _fifty_and_one_more(
    drip: Drip, headers: dict[str, str]
) -> tuple[list[int], tuple[int, int]]:
    transport = httpx.ASGITransport(app=create_app())
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as client:

        async def one_test() -> None:
            statuses.append((await client.post(f"{BASE}/test", headers=headers)).status_code)

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(one_test)
            await anyio.to_thread.run_sync(_first_call_arrived, drip)
            r = await client.get("/api/v1/users/me/notifications", headers=headers)
            with drip.changed:
                other = (r.status_code, len(drip.ended))
    return statuses, other


def test_the_page_button_sends_a_test_and_says_how_it_went(live: pytest.MonkeyPatch) -> None:
    with webhook_receiver() as receiver:
        _, secret = _user_with_webhook(receiver.url(), email="page@example.org")
        with session_scope() as session:
            f.user(session, email="bare@example.org", password=PASSWORD)
        receiver.secret = secret
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            sign_in(client, "page@example.org")
            token = csrf_of(client.get(PAGE).text)
            r = client.post(f"{PAGE}/test", data={"csrf_token": token}, follow_redirects=True)
            assert "Test sent: webhook delivered (HTTP 204)." in r.text
            log = r.text[r.text.index('id="deliveries"') :]
            assert "szbench test notification" in log
            assert "delivered" in log
            (call,) = receiver.calls
            assert call.signed
            client.cookies.clear()
            sign_in(client, "bare@example.org")
            token = csrf_of(client.get(PAGE).text)
            r = client.post(f"{PAGE}/test", data={"csrf_token": token}, follow_redirects=True)
            assert r.status_code == 409
            assert 'id="webhook-url-error">Nothing to send a test to' in r.text
