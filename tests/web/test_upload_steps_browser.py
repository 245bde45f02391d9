"""Issue 29.11 in Chromium against uvicorn on the real PostgreSQL and a real registry on
loopback: after the last byte the submit page shows what the server does with the archive,
each step (checking, pushing) with its progress, then submits the version.

Each step is held (in the served process, after its first progress report) until the page
has shown it, so that the page is seen mid-step whatever the machine's speed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from szbench.algorithms import intake
from szbench.algorithms import registry as registry_push
from szbench.config import get_settings
from szbench.db import session_scope
from tests.platform import factories as f
from tests.platform.images import docker_save, member
from tests.worker.conftest import registry  # noqa: F401 (the fixture: a registry on loopback)

from .browsing import Site, Watched, fits_and_passes_axe, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ALICE = "steps-alice@example.org"


def seed() -> dict[str, int]:
    with session_scope() as s:
        return {"alice": f.user(s, email=ALICE, password=PASSWORD, name="Alice").id}


class _Held:
    """Holds a step in the served process after its first report of bytes done."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def hold(self, done: int) -> None:
        if done > 0 and not self.go.is_set():
            self.reached.set()
            assert self.go.wait(60)


@pytest.mark.parametrize("width", [1280])
def test_the_submit_page_shows_the_servers_steps_with_progress(
    watched: Watched,
    site: Site,
    width: int,
    registry: str,  # noqa: F811
    tmp_path: Path,
    settings_env: pytest.MonkeyPatch,
) -> None:
    settings_env.setenv("SZBENCH_REGISTRY", registry)
    get_settings.cache_clear()
    checking, pushing = _Held(), _Held()
    real_check, real_push = intake.check_image_archive, registry_push.push_archive

    def check(path: Path, **kw: Any) -> Any:
        told = kw.pop("progress")
        return real_check(path, progress=lambda *a: (told(*a), checking.hold(a[1])), **kw)

    def push(*args: Any, **kw: Any) -> Any:
        told = kw.pop("progress")
        return real_push(*args, progress=lambda d, t: (told(d, t), pushing.hold(d)), **kw)

    settings_env.setattr(intake, "check_image_archive", check)
    settings_env.setattr(registry_push, "push_archive", push)
    archive = tmp_path / "steps.tar"
    docker_save(archive, layers=[[(member("app/weights"), os.urandom(3 * 1024**2))]])

    page = watched.page()
    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/submit")
    page.get_by_label("Short name").fill("stepped")
    page.get_by_label("Version label").fill("1.0")
    page.set_input_files("#file", str(archive))
    page.get_by_role("button", name="Submit").click()
    label = page.locator("label[for=upload-progress]")
    try:
        assert checking.reached.wait(60)
        expect(label).to_have_text("Checking the archive on the server", timeout=30_000)
        expect(page.locator("#progress-text")).to_contain_text("MiB")
        expect(page.locator("#form-status")).to_have_text("Checking the archive on the server…")
        fits_and_passes_axe(page, "/submit while the server checks")
        checking.go.set()
        assert pushing.reached.wait(60)
        expect(label).to_have_text("Pushing the image to the registry", timeout=30_000)
        expect(page.locator("#progress-text")).to_contain_text("%")
    finally:
        checking.go.set()
        pushing.go.set()
    page.wait_for_url(f"{site.url}/submissions*", timeout=60_000)
    assert "submitted" in page.inner_text(".flash")
