"""Issue 16's points 7-10 in Chromium, at 1280 px and at 390 px wide: comparing algorithms,
phases in the admin and on the submit page, password reset and the account page, editing
and withdrawing an algorithm.

The app runs under uvicorn on loopback on a small seeded site (the real PostgreSQL, no
worker); every page is watched for console errors (a blocked script or style under the
content security policy is one), and the pages' main content must not need sideways
scrolling at either width.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from szbench.db import session_scope
from szbench.models import DatasetKind, Disclosure, Role
from tests.platform import factories as f

from .browsing import Site, Watched, fits, sign_in
from .conftest import DATABASES, PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
ADMIN = "ada@example.org"
ALICE = "alice@example.org"
BOB = "bob@example.org"
NEW_PASSWORD = "reset-by-link-81"


def seed() -> dict[str, int]:
    """The site the tests walk (conftest's ``site`` serves it)."""
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Ada Admin")
        alice = f.user(s, email=ALICE, password=PASSWORD, name="Alice")
        bob = f.user(s, email=BOB, password=PASSWORD, name="Bob")
        ds = f.dataset(
            s, DatasetKind.HELD_OUT, slug="held-out", title="Held out",
            disclosure=Disclosure.SUBJECT,
        )  # fmt: skip
        dv = f.dataset_version(s, ds, version="v1")
        ids: dict[str, int] = {"alice": alice.id}
        for owner, name, values in (
            (alice, "alpha", (0.9, 0.8, 0.7, 0.75)),
            (bob, "beta", (0.5, 0.6, 0.2, 0.45)),
        ):
            algo = f.algorithm(s, owner, name=name, title=name.title())
            ev = f.evaluation(s, f.version(s, algo, version="1.0"), dv)
            subjects = {f"0{i}": {"event_f1": v} for i, v in enumerate(values, 1)}
            f.result(s, ev, subjects)
            ids[name] = algo.id
            ids[f"{name}-evaluation"] = ev.id
        return ids


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_two_algorithms(watched: Watched, site: Site) -> None:
    page = watched.page()
    page.goto(f"{site.url}/leaderboards/held-out")
    page.get_by_role("link", name="Compare algorithms").click()
    page.wait_for_load_state()
    page.get_by_label("Alpha 1.0").check()
    page.get_by_label("Beta 1.0").check()
    page.get_by_role("button", name="Compare").click()
    page.wait_for_load_state()
    tests = page.locator("#paired-tests tbody tr")
    assert tests.count() == 1
    cells = tests.first.locator("td").all_inner_texts()
    assert cells[:2] == ["Alpha 1.0", "Beta 1.0"]  # as the board names them
    assert cells[2] == "0.350"  # mean of 0.4, 0.2, 0.5, 0.3
    assert cells[4].startswith("0.1250")  # 2 of 16 sign flips
    assert page.locator("#subject-table tbody tr").count() == 4
    chart = page.locator("svg.grouped")
    assert chart.get_attribute("role") == "img"
    assert chart.locator("rect.bar").count() == 8
    fits(page)


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_phase_admin_and_the_submit_page(browser: Any, site: Site, width: int) -> None:
    admin = Watched(browser, width)
    page = admin.page()
    sign_in(page, site.url, ADMIN)
    page.goto(f"{site.url}/admin/phases")
    deadline = (datetime.now(UTC) + timedelta(days=10)).replace(second=0, microsecond=0)
    page.get_by_label("Short name").fill("spring")
    page.get_by_label("Title").fill("Spring round")
    page.get_by_label("Deadline (UTC; empty: none)").fill(deadline.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_label("Submissions per researcher").fill("2")
    page.get_by_label("Non-admins see of its held-out results").select_option("subject")
    page.get_by_role("button", name="Create phase").click()
    page.wait_for_load_state()
    assert "Phase spring created." in page.inner_text(".flash")
    card = page.locator("#phase-spring")
    assert "taking submissions" in card.inner_text()
    assert f"Open until {deadline:%Y-%m-%d %H:%M} UTC." in card.inner_text()
    fits(page)

    researcher = Watched(browser, width)
    rpage = researcher.page()
    sign_in(rpage, site.url, ALICE)
    rpage.goto(f"{site.url}/submit")
    deadlines = rpage.locator("#phase-deadlines")
    assert f"deadline {deadline:%Y-%m-%d %H:%M} UTC; 2 of 2 submissions left for you" in (
        deadlines.inner_text()
    )
    fits(rpage)

    card.get_by_role("button", name="Close phase spring").click()
    page.wait_for_load_state()
    assert "Phase spring is closed for submissions." in page.inner_text(".flash")
    page.locator("#phase-spring").get_by_role(
        "button", name="Publish every result of phase spring"
    ).click()
    page.wait_for_load_state()
    assert "Phase spring: 0 evaluations published." in page.inner_text(".flash")
    rpage.reload()
    assert rpage.locator("#phase-deadlines").count() == 0
    admin.close()
    researcher.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_reset_link_account_page_and_existing_email_sign_up(
    browser: Any, site: Site, width: int
) -> None:
    admin = Watched(browser, width)
    page = admin.page()
    sign_in(page, site.url, ADMIN)
    page.goto(f"{site.url}/admin/users")
    page.get_by_role("button", name=f"Password reset link for {ALICE}").click()
    page.wait_for_load_state()
    # No SZBENCH_PUBLIC_URL here (no SMTP): the link is a path, never the request's Host.
    shown = page.get_by_role("textbox", name="Reset link").input_value()
    assert shown.startswith("/password/reset?token=")
    url = site.url + shown
    fits(page)
    admin.close()

    # Alice is signed in elsewhere; the reset ends that session.
    elsewhere = Watched(browser, width)
    old = elsewhere.page()
    sign_in(old, site.url, ALICE)

    visitor = Watched(browser, width)
    vpage = visitor.page()
    vpage.goto(f"{site.url}/signup")
    vpage.get_by_label("Email").fill(ALICE)
    vpage.get_by_label("Password").fill("another-password-4")
    visitor.allowed.append("409")  # the page itself answers 409 Conflict
    vpage.get_by_role("button", name="Create account").click()
    vpage.wait_for_load_state()
    notice = vpage.locator("#signup-exists")
    assert "exists already" in notice.inner_text()
    notice.get_by_role("link", name="reset its password").click()
    vpage.wait_for_load_state()
    assert vpage.locator("#ask-admin").is_visible()  # no SMTP here: an admin's link

    vpage.goto(url)
    assert ALICE in vpage.inner_text("main")
    vpage.get_by_label("New password").fill(NEW_PASSWORD)
    vpage.get_by_role("button", name="Set the password").click()
    vpage.wait_for_load_state()
    assert "Your new password is set" in vpage.inner_text(".flash")
    assert vpage.locator("h1").inner_text() == "Your account"
    sessions = vpage.locator("#web-sessions tbody tr")
    assert sessions.count() == 1
    assert "this browser" in sessions.first.inner_text()
    fits(vpage)
    # The old session is over.
    old.goto(f"{site.url}/account")
    assert "/login" in old.url
    # The link is spent.
    visitor.allowed.append("400")
    vpage.goto(url)
    assert "this reset link is not valid" in vpage.inner_text("main")
    elsewhere.close()
    visitor.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_edit_links_and_withdraw_an_algorithm(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/algorithms/{site.ids['alpha']}")
    page.get_by_role("link", name="Edit or withdraw this algorithm").click()
    page.wait_for_load_state()
    page.get_by_label("Code").fill("javascript:alert(1)")
    watched.allowed.append("400")
    page.get_by_role("button", name="Save").click()
    page.wait_for_load_state()
    assert "is not an http(s) link" in page.inner_text("#code-url-error")
    page.get_by_label("Code").fill("https://git.example.org/alice/alpha")
    page.get_by_label("Paper").fill("https://doi.org/10.1000/alpha")
    page.get_by_role("button", name="Save").click()
    page.wait_for_load_state()
    assert "alpha saved." in page.inner_text(".flash")
    code = page.get_by_role("link", name="https://git.example.org/alice/alpha")
    assert code.get_attribute("href") == "https://git.example.org/alice/alpha"
    assert page.get_by_role("link", name="https://doi.org/10.1000/alpha").is_visible()
    fits(page)
    page.get_by_role("link", name="Edit or withdraw this algorithm").click()
    page.wait_for_load_state()
    page.get_by_role("button", name="Withdraw from the leaderboards").click()
    page.wait_for_load_state()
    assert page.locator("#withdrawn-note").is_visible()
    page.goto(f"{site.url}/leaderboards/held-out")
    assert page.locator(f"a[href^='/algorithms/{site.ids['alpha']}?']").count() == 0
    assert page.locator(f"a[href^='/algorithms/{site.ids['beta']}?']").count() == 1
