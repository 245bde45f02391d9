"""The account's notifications page (issue 23.1): switches per event and channel, the
webhook URL with its error next to the field (what was typed kept), the secret shown once,
a test send and the delivery log. In Chromium at 1280 and 390 px against uvicorn (on
PostgreSQL and on the embedded default, SQLite), with a real webhook receiver on loopback that
checks each call's HMAC and a real SMTP sink."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import NotificationChannel, NotificationKind
from szbench.notifications import preferences
from tests.platform import factories as f
from tests.platform.smtp_sink import Sink, smtp_sink
from tests.platform.webhook_receiver import Receiver, webhook_receiver

from .axe import assert_no_axe_violations
from .browsing import Watched, fits, seeded_site, sign_in
from .conftest import DATABASES, PASSWORD, csrf_of
from .conftest import sign_in as sign_in_client

LOOPBACK = {
    "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
}
PAGE = "/account/notifications"
SECRET = re.compile(r'id="new-secret" class="secret" readonly value="([^"]+)"')


@pytest.fixture
def receiver(settings_env: pytest.MonkeyPatch) -> Iterator[Receiver]:
    for key, value in LOOPBACK.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    with webhook_receiver() as server:
        yield server


def _form(client: TestClient, data: dict[str, Any], action: str = PAGE) -> Any:
    token = csrf_of(client.get(PAGE).text)
    return client.post(action, data={**data, "csrf_token": token}, follow_redirects=True)


def test_a_refused_url_is_shown_next_to_its_field_with_what_was_typed(
    client: TestClient, db_session: Session, receiver: Receiver
) -> None:
    user = f.user(db_session, email="forms@example.org", password=PASSWORD)
    sign_in_client(client, "forms@example.org")
    assert 'href="/account/notifications"' in client.get("/account").text
    page = client.get(PAGE).text
    assert 'id="no-mail"' in page  # no SMTP: the webhook column only
    assert 'value="mail:evaluation_finished"' not in page
    typed = "https://10.1.2.3/hook?x=1"
    r = _form(client, {"switch": ["webhook:evaluation_failed"], "webhook_url": typed})
    assert r.status_code == 400
    html = r.text
    assert 'aria-describedby="webhook-url-error"' in html
    assert (
        'id="webhook-url-error">10.1.2.3 resolves to 10.1.2.3, which is not a public internet '
        "address" in html
    )
    assert f'value="{typed.replace("&", "&amp;")}"' in html
    # The switches as they were sent, not as stored...
    assert re.search(r'value="webhook:evaluation_failed"[^>]*checked', html)
    assert not re.search(r'value="webhook:evaluation_finished"[^>]*checked', html)
    # ...and nothing was saved.
    prefs = preferences.preferences_of(db_session, user)
    assert prefs.webhook_url == ""
    assert preferences.is_on(
        prefs, NotificationKind.EVALUATION_FINISHED, NotificationChannel.WEBHOOK
    )


def test_saving_a_url_shows_the_secret_once(
    client: TestClient, db_session: Session, receiver: Receiver
) -> None:
    user = f.user(db_session, email="hook@example.org", password=PASSWORD)
    sign_in_client(client, "hook@example.org")
    switches = [f"webhook:{k.value}" for k in preferences.SWITCHABLE if k.value != "phase_closed"]
    r = _form(client, {"switch": switches, "webhook_url": receiver.url(), "all_phases": "1"})
    assert r.status_code == 200
    (secret,) = SECRET.findall(r.text)
    assert SECRET.search(client.get(PAGE).text) is None  # shown once
    prefs = preferences.preferences_of(db_session, user)
    assert prefs.webhook_secret == secret
    assert prefs.all_phases
    assert not preferences.is_on(prefs, NotificationKind.PHASE_CLOSED, NotificationChannel.WEBHOOK)
    # A secret of one's own; too short a one is refused next to its field.
    r = _form(client, {"secret": "short"}, action=f"{PAGE}/secret")
    assert r.status_code == 400
    assert 'id="secret-error"' in r.text
    r = _form(client, {"secret": "my-very-own-secret"}, action=f"{PAGE}/secret")
    assert SECRET.findall(r.text) == ["my-very-own-secret"]


# --- in the browser ------------------------------------------------------------------------


@dataclass
class Site:
    url: str
    receiver: Receiver
    sink: Sink


EMAIL = "notify@example.org"


@pytest.fixture
def site(database_url: str, settings_env: pytest.MonkeyPatch) -> Iterator[Site]:
    with webhook_receiver() as receiver, smtp_sink() as sink:
        env = {
            "SZBENCH_DATABASE_URL": database_url,
            "SZBENCH_PASSWORD_SCRYPT_N": "1024",
            "SZBENCH_SECRET_KEY": "notification-pages-test-secret-key",
            "SZBENCH_SMTP_HOST": "127.0.0.1",
            "SZBENCH_SMTP_PORT": str(sink.port),
            "SZBENCH_SMTP_STARTTLS": "false",
            # Mail on needs the site's public address (links are never built from Host).
            "SZBENCH_PUBLIC_URL": "https://bench.example.org",
            **LOOPBACK,
        }

        def seed() -> None:
            with session_scope() as s:
                f.user(s, email=EMAIL, password=PASSWORD, name="Nora")

        with seeded_site(settings_env, env, seed) as (url, _):
            yield Site(url, receiver, sink)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("width", [1280, 390])
def test_notifications_page_in_the_browser(browser: Any, site: Site, width: int) -> None:
    watched = Watched(browser, width)
    page = watched.page()
    sign_in(page, site.url, EMAIL)
    page.goto(f"{site.url}/account")
    page.locator("#notifications-link").click()
    page.wait_for_url(f"{site.url}{PAGE}")
    fits(page)
    assert_no_axe_violations(page, f"{PAGE} at {width} px")
    assert "E-mail goes to notify@example.org." in page.inner_text("main")

    # A URL this server may not call: the error sits by the field, the typed text stays
    # (the page answers 400, which the browser logs).
    watched.allowed.append("status of 400 (Bad Request)")
    page.get_by_label("A phase closes: e-mail").uncheck()
    page.get_by_label("Webhook URL").fill("https://169.254.169.254/latest/meta-data/")
    page.get_by_role("button", name="Save").click()
    page.wait_for_load_state()
    error = page.locator("#webhook-url-error")
    assert "not a public internet address" in error.inner_text()
    assert page.get_by_label("Webhook URL").get_attribute("aria-invalid") == "true"
    assert page.get_by_label("Webhook URL").input_value().endswith("/latest/meta-data/")
    assert not page.get_by_label("A phase closes: e-mail").is_checked()
    fits(page)
    assert_no_axe_violations(page, f"{PAGE} with an error at {width} px")

    watched.allowed.clear()
    # The receiver's URL: saved, and its secret shown this once.
    page.get_by_label("Webhook URL").fill(site.receiver.url(f"/w{width}"))
    page.get_by_role("button", name="Save").click()
    page.wait_for_load_state()
    secret = page.locator("#new-secret").input_value()
    assert len(secret) >= 32
    site.receiver.secret = secret
    assert not page.get_by_label("A phase closes: e-mail").is_checked()
    assert page.get_by_label("A phase closes: webhook").is_checked()

    # A test on both channels: the receiver checks the signature, the sink gets the mail.
    calls, mails = len(site.receiver.calls), len(site.sink.messages)
    page.get_by_role("button", name="Send a test notification").click()
    page.wait_for_load_state()
    flash = page.locator(".flash").inner_text()
    assert "e-mail delivered" in flash
    assert "webhook delivered (HTTP 204)" in flash
    call = site.receiver.calls[calls]
    assert call.path == f"/w{width}"
    assert call.signed
    assert call.json["event"] == "test"
    assert site.sink.messages[mails]["To"] == EMAIL
    log = page.locator("#deliveries")
    assert log.locator("tbody tr").count() >= 2
    assert "delivered" in log.inner_text()
    fits(page)
    assert_no_axe_violations(page, f"{PAGE} with the delivery log at {width} px")
    # Reloaded: the secret is not shown again, the switches are as saved.
    page.reload()
    assert page.locator("#new-secret").count() == 0
    assert not page.get_by_label("A phase closes: e-mail").is_checked()
    watched.close()
