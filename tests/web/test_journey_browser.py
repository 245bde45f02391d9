"""Issue 23.6-23.9 in Chromium at 1280 and 390 px against uvicorn on the real PostgreSQL:
form errors by their field, the evaluation page's live progress, the smoke-test page,
the submit page's preflight and bidirectional text.

Each page is watched for console errors (a script or style blocked by the content security
policy is one), checked for sideways scrolling and, where it changes, for axe violations.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from szbench.db import session_scope
from szbench.models import DatasetKind, Role
from tests.platform import factories as f

from .axe import assert_no_axe_violations
from .browsing import Watched, fits, seeded_site, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
ADMIN = "journey-admin@example.org"
ALICE = "journey-alice@example.org"


@dataclass
class Site:
    url: str
    ids: dict[str, int]


def seed() -> dict[str, int]:
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Ada")
        alice = f.user(s, email=ALICE, password=PASSWORD, name="Alice")
        ds = f.dataset(s, DatasetKind.HELD_OUT, slug="journey-held", title="Held out")
        dv = f.dataset_version(s, ds, version="v1")
        algo = f.algorithm(s, alice, name="journey-algo", title="Journey")
        ev = f.evaluation(s, f.version(s, algo, version="1.0"), dv)
        return {"alice": alice.id, "algo": algo.id, "evaluation": ev.id}


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Site]:
    env = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "journey-test-secret-key",
        "SZBENCH_LEADERBOARD_CACHE_S": "0",
        "SZBENCH_LEADERBOARD_FRESH_S": "0",
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
    }
    with seeded_site(settings_env, env, seed) as (url, ids):
        yield Site(url, ids)


@pytest.mark.parametrize("width", WIDTHS)
def test_form_errors_sit_by_their_field(browser: Any, site: Site, width: int) -> None:
    watched = Watched(browser, width)
    watched.allowed.append("status of 400 (Bad Request)")
    page = watched.page()
    # Sign-up with a password the server refuses: the message is under the password field
    # and the typed name and address stay.
    page.goto(f"{site.url}/signup")
    page.get_by_label("Name").fill("Typed Name")
    page.get_by_label("Email").fill(f"new{width}@example.org")
    page.get_by_label("Password").fill("password1234")
    page.get_by_role("button", name="Create account").click()
    page.wait_for_load_state()
    assert "common" in page.locator("#password-error").inner_text()
    assert page.get_by_label("Password").get_attribute("aria-invalid") == "true"
    assert page.get_by_label("Name").input_value() == "Typed Name"
    assert page.get_by_label("Email").input_value() == f"new{width}@example.org"
    assert "Bad request" not in page.inner_text("main")
    fits(page)
    assert_no_axe_violations(page, f"/signup with an error at {width} px")

    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/tokens")
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Expires after (days, empty: never)").fill("ten")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_load_state()
    assert page.locator("#expires-in-days-error").inner_text().endswith("Give a whole number.")
    assert page.get_by_label("Name").input_value() == "laptop"
    fits(page)
    assert_no_axe_violations(page, f"/tokens with an error at {width} px")
    watched.close()
