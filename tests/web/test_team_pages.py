"""Team pages (issue 23.2): start a team, add a member by e-mail (the error next to the field,
what was typed kept), put an algorithm in it, the member sees it and can pick it on the submit
page, leave; the admins' list of every team. Forms through the test client, then the whole
round in Chromium at 1280 and 390 px against uvicorn."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.db import session_scope
from szbench.models import Algorithm, Role, Team, Visibility
from tests.platform import factories as f

from .axe import assert_no_axe_violations
from .browsing import Watched, fits, seeded_site, sign_in
from .conftest import PASSWORD, post_form
from .conftest import sign_in as sign_in_client


def test_team_forms_keep_what_was_typed_and_say_what_is_wrong(
    client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session, email="own@example.org", password=PASSWORD)
    f.user(db_session, email="mem@example.org", password=PASSWORD)
    algo = f.algorithm(db_session, owner, name="spike-net", visibility=Visibility.PRIVATE)
    sign_in_client(client, "own@example.org")
    assert 'id="teams-link"' in client.get("/account").text
    assert 'id="no-teams"' in client.get("/teams").text

    r = post_form(client, "/teams", "/teams", {"name": "  "}, follow_redirects=True)
    assert r.status_code == 400
    assert 'id="team-name-error">A team needs a name' in r.text
    r = post_form(client, "/teams", "/teams", {"name": "Lab Web"}, follow_redirects=True)
    assert r.status_code == 200
    assert "Team Lab Web created" in r.text
    team = db_session.query(Team).filter_by(name="Lab Web").one()
    page = f"/teams/{team.id}"

    r = post_form(client, page, f"{page}/members", {"email": "nobody@example.org"})
    assert r.status_code == 404
    assert 'id="member-email-error">No active account' in r.text
    assert 'value="nobody@example.org"' in r.text
    assert 'aria-describedby="member-email-error"' in r.text
    r = post_form(
        client, page, f"{page}/members", {"email": "mem@example.org"}, follow_redirects=True
    )
    assert "is now a member of Lab Web" in r.text
    assert "mem@example.org" in r.text

    r = post_form(
        client, page, f"{page}/algorithms", {"algorithm_id": str(algo.id)}, follow_redirects=True
    )
    assert "spike-net is now in Lab Web" in r.text
    db_session.expire_all()
    assert db_session.get_one(Algorithm, algo.id).team_id == team.id

    r = post_form(client, page, f"{page}/delete", {"confirm": "Lab"})
    assert r.status_code == 400
    assert 'id="delete-confirm-error">Type the team\'s name' in r.text.replace("&#39;", "'")
    assert db_session.get(Team, team.id) is not None


def test_admins_see_every_team_with_its_owners(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="adm@example.org", password=PASSWORD, role=Role.ADMIN)
    for email, name in (("a1@example.org", "Lab One"), ("a2@example.org", "Lab Two")):
        f.user(db_session, email=email, password=PASSWORD)
        sign_in_client(client, email)
        post_form(client, "/teams", "/teams", {"name": name})
        client.post("/logout", data={"csrf_token": ""})
        client.cookies.clear()
    sign_in_client(client, "adm@example.org")
    html = client.get("/admin/teams").text
    table = html[html.index('id="admin-teams"') :]
    assert "Lab One" in table
    assert "a1@example.org" in table
    assert "Lab Two" in table
    assert "a2@example.org" in table
    assert 'href="/admin/teams"' in html
    # Researchers do not.
    client.cookies.clear()
    sign_in_client(client, "a1@example.org")
    assert client.get("/admin/teams").status_code == 403


# --- in the browser ------------------------------------------------------------------------

OWNER, MEMBER = "owner@example.org", "member@example.org"


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch) -> Any:
    env = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "team-pages-test-secret-key-0123456789",
    }

    def seed() -> None:
        with session_scope() as s:
            owner = f.user(s, email=OWNER, password=PASSWORD, name="Olga")
            f.user(s, email=MEMBER, password=PASSWORD, name="Mika")
            f.user(s, email="admin@example.org", password=PASSWORD, role=Role.ADMIN)
            f.algorithm(
                s, owner, name="private-net", title="Private Net", visibility=Visibility.PRIVATE
            )

    with seeded_site(settings_env, env, seed) as (url, _):
        yield url


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("width", [1280, 390])
def test_team_pages_in_the_browser(browser: Any, site: str, width: int) -> None:
    watched = Watched(browser, width)
    page = watched.page()
    sign_in(page, site, OWNER)
    page.goto(f"{site}/account")
    page.locator("#teams-link").click()
    page.wait_for_url(f"{site}/teams")
    fits(page)
    assert_no_axe_violations(page, f"/teams at {width} px")
    page.get_by_label("Name").fill(f"Lab {width}")
    page.get_by_role("button", name="Start the team").click()
    page.wait_for_load_state()
    assert f"Team Lab {width} created" in page.locator(".flash").inner_text()

    # An address with no account: refused next to the field, what was typed kept.
    watched.allowed.append("status of 404 (Not Found)")
    page.get_by_label("E-mail address of their account").fill("nobody@example.org")
    page.get_by_role("button", name="Add", exact=True).click()
    page.wait_for_load_state()
    field = page.get_by_label("E-mail address of their account")
    assert "No active account" in page.locator("#member-email-error").inner_text()
    assert field.get_attribute("aria-invalid") == "true"
    assert field.input_value() == "nobody@example.org"
    fits(page)
    assert_no_axe_violations(page, f"team page with an error at {width} px")
    watched.allowed.clear()

    field.fill(MEMBER)
    page.get_by_role("button", name="Add", exact=True).click()
    page.wait_for_load_state()
    assert "Mika is now a member" in page.locator(".flash").inner_text()
    page.get_by_label("Put one of your algorithms in this team").select_option(
        label="Private Net (private-net)"
    )
    page.get_by_role("button", name="Put it in the team").click()
    page.wait_for_load_state()
    assert "private-net is now in" in page.locator(".flash").inner_text()
    assert "Private Net" in page.locator("#team-algorithms").inner_text()
    fits(page)
    assert_no_axe_violations(page, f"team page at {width} px")
    team_url = page.url.split("?")[0]

    # The member: sees the private algorithm, may pick it on the submit page, leaves.
    other = Watched(browser, width)
    mpage = other.page()
    sign_in(mpage, site, MEMBER)
    mpage.goto(f"{site}/teams")
    mpage.get_by_role("link", name=f"Lab {width}").click()
    mpage.wait_for_load_state()
    assert "Private Net" in mpage.locator("#team-algorithms").inner_text()
    assert mpage.locator("#add-member-form").count() == 0  # members do not manage
    mpage.get_by_role("link", name="Private Net").click()
    mpage.wait_for_load_state()
    assert "Private Net" in mpage.locator("h1").inner_text()
    mpage.goto(f"{site}/submit")
    options = mpage.locator("#algorithm-id option").all_inner_texts()
    assert f"Private Net (private-net, team Lab {width})" in options
    mpage.goto(team_url)
    mpage.get_by_role("button", name=f"Leave Lab {width}").click()
    mpage.wait_for_load_state()
    assert f"You left Lab {width}" in mpage.locator(".flash").inner_text()
    fits(mpage)
    other.allowed.append("status of 404 (Not Found)")
    # Not a member any more: for them the team does not exist.
    assert mpage.goto(team_url).status == 404
    other.close()

    # The admins' list.
    admin = Watched(browser, width)
    apage = admin.page()
    sign_in(apage, site, "admin@example.org")
    apage.goto(f"{site}/admin")
    apage.get_by_role("link", name="Teams").first.click()
    apage.wait_for_url(f"{site}/admin/teams")
    row = apage.locator("#admin-teams tr", has_text=f"Lab {width}")
    assert OWNER in row.inner_text()
    fits(apage)
    assert_no_axe_violations(apage, f"/admin/teams at {width} px")
    admin.close()
    watched.close()
