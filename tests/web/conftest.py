"""The web UI under test: the real app on the real PostgreSQL, each test rolled back."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench import queue
from szbench.api.deps import get_session
from szbench.app import create_app
from szbench.leaderboards import statistics

PASSWORD = "correct-horse-9"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
CHROMIUM = os.environ.get("SZBENCH_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def app(db_session: Session, settings_env: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    application = create_app()

    def session_override() -> Iterator[Session]:
        db_session.commit()
        try:
            yield db_session
            db_session.commit()
        except BaseException:
            db_session.rollback()
            raise

    application.dependency_overrides[get_session] = session_override
    statistics.clear_cache()
    yield application
    statistics.clear_cache()


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict]]]:
    """Tasks sent to the broker (captured after their request's commit)."""
    calls: list[tuple[str, str, dict]] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


@pytest.fixture
def client(app: FastAPI, sent: list) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's chromium under Playwright (Playwright's own browser download is never used)."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install -y chromium "
            "fonts-liberation); Playwright's own browser download is never used",
            pytrace=False,
        )
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


#: The two databases a journey runs on: PostgreSQL (production) and the embedded default
#: (SQLite, as ``szbench serve`` and the README's quick start use it). A journey runs on both
#: with ``@pytest.mark.parametrize("database_url", DATABASES, indirect=True)``.
DATABASES = ("postgresql", "sqlite")


@pytest.fixture
def database_url(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> str:
    """The URL of the database a browser test's site runs on: the test session's
    PostgreSQL (the default), or a migrated SQLite file of its own (``"sqlite"``)."""
    kind = getattr(request, "param", "postgresql")
    if kind == "postgresql":
        return pg_url
    assert kind == "sqlite", kind
    from szbench import migrate

    url = f"sqlite:///{tmp_path / 'embedded' / 'szbench.sqlite3'}"
    (tmp_path / "embedded").mkdir(exist_ok=True)
    migrate.upgrade(url)
    return url


@pytest.fixture
def site(
    request: pytest.FixtureRequest,
    database_url: str,
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[Any]:
    """The browser tests' usual site (a ``browsing.Site``): the requesting module's ``seed()``
    served with live leaderboards. Most browser test files need exactly this, so they only
    write ``seed``; a file that needs other settings defines its own ``site`` fixture."""
    from .browsing import browser_site  # browsing imports this module (PASSWORD)

    # The tests change results and read the boards at once (no leaderboard cache), and an
    # upload lands in the test's own folder.
    live = {
        "SZBENCH_LEADERBOARD_CACHE_S": "0",
        "SZBENCH_LEADERBOARD_FRESH_S": "0",
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
    }
    with browser_site(settings_env, database_url, request.module.seed, **live) as running:
        yield running


@pytest.fixture
def watched(browser: Any, width: int, site: Any) -> Iterator[Any]:
    """The browser tests' usual context: one at the test's parametrized ``width`` on the
    module's ``site``, closed after the test with its console errors asserted, so a test
    body holds only its journey. It asks for ``site`` so that it closes before the server
    stops: a page still polling a stopped server would log errors of its own."""
    from .browsing import Watched

    context = Watched(browser, width)
    yield context
    context.close()


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def sign_in(client: TestClient, email: str, password: str = PASSWORD) -> None:
    page = client.get("/login")
    r = client.post(
        "/login",
        data={"email": email, "password": password, "csrf_token": csrf_of(page.text), "next": "/"},
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text


def post_form(client: TestClient, page: str, action: str, data: dict | None = None, **kw):  # type: ignore[no-untyped-def]
    """Open ``page``, take its CSRF token and POST ``data`` to ``action``."""
    token = csrf_of(client.get(page).text)
    return client.post(action, data={**(data or {}), "csrf_token": token}, **kw)
