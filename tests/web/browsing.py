"""What the browser tests share: the app under uvicorn on loopback on a seeded database, a
browser context that collects console errors, signing in, and the no-sideways-scroll and
axe-core checks.

Each browser test file seeds its own small site and walks it at a few widths; the set-up
around that (settings, serving, watching the console, the layout checks) is the same for
all of them and lives here, so a file holds only its seed and its journeys."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from fastapi import FastAPI

from szbench import db, queue
from szbench.config import get_settings
from szbench.db import session_scope
from tests.worker._pipeline_factories import truncate_all

from .axe import assert_no_axe_violations
from .conftest import PASSWORD

T = TypeVar("T")


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def seeded_site(
    settings_env: pytest.MonkeyPatch,
    env: dict[str, str],
    seed: Callable[[], T],
    sender: Callable[[str, str, dict], None] = lambda name, q, kwargs: None,
) -> Iterator[tuple[str, T]]:
    """The app on an emptied database that ``seed`` fills (committed), with the settings
    ``env`` and tasks going to ``sender``; yields the base URL and what ``seed`` returned.
    The database is emptied again afterwards."""
    from szbench.app import create_app

    for key, value in env.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    with session_scope() as session:
        truncate_all(session)
    seeded = seed()
    queue.set_sender(sender)
    try:
        with serve(create_app()) as url:
            yield url, seeded
    finally:
        queue.set_sender(None)
        with session_scope() as session:
            truncate_all(session)
        db.reset_engine()


@dataclass
class Site:
    """A seeded site as the browser tests see it: its base URL and what the seed returned."""

    url: str
    ids: dict[str, Any]


@contextmanager
def browser_site(
    settings_env: pytest.MonkeyPatch, database_url: str, seed: Callable[[], Any], **settings: str
) -> Iterator[Site]:
    """``seeded_site`` on the test database (PostgreSQL or SQLite: conftest's
    ``database_url``) with a cheap password hash (every test signs in at each width; the
    default scrypt cost would make that the slowest part) and a fixed secret key;
    ``settings`` add to or override those."""
    env = {
        "SZBENCH_DATABASE_URL": database_url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "browser-test-secret-key",
        **settings,
    }
    with seeded_site(settings_env, env, seed) as (url, ids):
        yield Site(url, ids)


class Watched:
    """A browser context at one width whose pages report console errors."""

    def __init__(self, browser: Any, width: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.allowed: list[str] = []

    def page(self) -> Any:
        page = self.context.new_page()
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        return page

    def _console(self, msg: Any) -> None:
        if msg.type == "error" and not any(a in msg.text for a in self.allowed):
            self.errors.append(f"{msg.text} ({msg.location.get('url', '')})")

    def close(self) -> None:
        self.context.close()
        assert self.errors == []


def fits(page: Any) -> None:
    """The main content needs no sideways scrolling (wide tables and charts scroll inside
    their own boxes)."""
    overflow = page.evaluate(
        "() => { const m = document.querySelector('main'); return m.scrollWidth - m.clientWidth; }"
    )
    assert overflow <= 1, (page.url, overflow)


def fits_and_passes_axe(page: Any, where: str = "") -> None:
    """What a page that a test has just changed must still do at its width: need no
    sideways scrolling and pass axe-core (``where`` names it in a failure; its URL if
    empty)."""
    fits(page)
    assert_no_axe_violations(page, where)


def sign_in(page: Any, base: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    # In the DOM, visible or not: on a phone it sits in the collapsed navigation.
    assert page.locator("form[action='/logout']").count() == 1, page.url
