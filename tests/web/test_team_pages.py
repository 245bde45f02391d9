"""Team pages (issue 23.2): start a team, add a member by e-mail (the error next to the field,
what was typed kept), put an algorithm in it, the member sees it, submits a version of it on
the submit page and re-runs its evaluation, leaves; the admins' list of every team. Forms
through the test client, then the whole round in Chromium at 1280 and 390 px against uvicorn,
on PostgreSQL and on the embedded default, SQLite (issue 30.3: there a member's submit
waited 30 s for its own write lock and answered 503)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.db import session_scope
from szbench.models import Algorithm, DatasetKind, Role, Team, Visibility
from tests.platform import factories as f
from tests.platform.images import docker_save

from .axe import assert_no_axe_violations
from .browsing import Watched, fits, seeded_site, sign_in
from .conftest import DATABASES, PASSWORD, post_form
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
def site(database_url: str, settings_env: pytest.MonkeyPatch) -> Any:
    env = {
        "SZBENCH_DATABASE_URL": database_url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "team-pages-test-secret-key-0123456789",
    }

    def seed() -> dict[str, int]:
        with session_scope() as s:
            owner = f.user(s, email=OWNER, password=PASSWORD, name="Olga")
            f.user(s, email=MEMBER, password=PASSWORD, name="Mika")
            f.user(s, email="admin@example.org", password=PASSWORD, role=Role.ADMIN)
            algo = f.algorithm(
                s, owner, name="private-net", title="Private Net", visibility=Visibility.PRIVATE
            )
            # A finished held-out evaluation of the owner's version, for the member's re-run.
            dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT, slug="team-held"))
            f.recording(s, dv)
            done = f.evaluation(s, f.version(s, algo, version="1.0"), dv)
            return {"evaluation": done.id}

    with seeded_site(settings_env, env, seed) as (url, ids):
        yield url, ids


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("width", [1280, 390])
def test_team_pages_in_the_browser(
    browser: Any, site: tuple[str, dict[str, int]], width: int, tmp_path: Path
) -> None:
    url, ids = site
    watched = Watched(browser, width)
    page = watched.page()
    sign_in(page, url, OWNER)
    page.goto(f"{url}/account")
    page.locator("#teams-link").click()
    page.wait_for_url(f"{url}/teams")
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
    sign_in(mpage, url, MEMBER)
    mpage.goto(f"{url}/teams")
    mpage.get_by_role("link", name=f"Lab {width}").click()
    mpage.wait_for_load_state()
    assert "Private Net" in mpage.locator("#team-algorithms").inner_text()
    assert mpage.locator("#add-member-form").count() == 0  # members do not manage
    mpage.get_by_role("link", name="Private Net").click()
    mpage.wait_for_load_state()
    assert "Private Net" in mpage.locator("h1").inner_text()
    mpage.goto(f"{url}/submit")
    options = mpage.locator("#algorithm-id option").all_inner_texts()
    assert f"Private Net (private-net, team Lab {width})" in options
    # ... and submits a version of it: upload, archive check, version, smoke test queued.
    mpage.get_by_label("Algorithm", exact=True).select_option(
        label=f"Private Net (private-net, team Lab {width})"
    )
    mpage.get_by_label("Version label").fill("2.0")
    archive = tmp_path / "member-image.tar"
    docker_save(archive)
    mpage.set_input_files("#file", str(archive))
    mpage.get_by_role("button", name="Submit").click()
    mpage.wait_for_url(f"{url}/submissions*", timeout=20_000)
    assert "Version 2.0 submitted" in mpage.locator(".flash").inner_text()
    assert "2.0" in mpage.locator("main").inner_text()
    # A re-run of the team's finished evaluation, from its page, goes on to the new one.
    mpage.goto(f"{url}/evaluations/{ids['evaluation']}")
    mpage.get_by_role("button", name="Re-run").click()
    mpage.wait_for_load_state()
    assert "Re-run queued as evaluation" in mpage.locator(".flash").inner_text()
    new_id = int(mpage.url.split("/evaluations/")[1].split("?")[0])
    assert new_id != ids["evaluation"]
    fits(mpage)
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
    sign_in(apage, url, "admin@example.org")
    apage.goto(f"{url}/admin")
    apage.get_by_role("link", name="Teams").first.click()
    apage.wait_for_url(f"{url}/admin/teams")
    row = apage.locator("#admin-teams tr", has_text=f"Lab {width}")
    assert OWNER in row.inner_text()
    fits(apage)
    assert_no_axe_violations(apage, f"/admin/teams at {width} px")
    admin.close()
    watched.close()
