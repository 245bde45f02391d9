"""Issue 30.6, what a newcomer met on the pages: error pages that named exception classes and
offered no way on; a re-run from an evaluation's page that landed on another page; a
finished held-out evaluation with no way on to its board; an entry named one way on the
board and another on the comparison; the home page's title saying the name twice."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, EvaluationStatus, Role
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in

CLASS_NAMES = ("BadRequest", "NotFound", "Forbidden", "QuotaExceeded", "Conflict", "Error:")


def _next_steps(page: str) -> list[str]:
    box = re.search(r'<ul id="next-steps"[^>]*>(.*?)</ul>', page, re.S)
    assert box, "the error page offers no way on"
    return re.findall(r'<a href="([^"]+)">', box.group(1))


def test_error_pages_say_what_happened_and_where_to_go(
    client: TestClient, db_session: Session
) -> None:
    f.user(db_session, email="lost@example.org", password=PASSWORD)
    # Signed out, an admin page: sign in is offered.
    sign_in(client, "lost@example.org")
    forbidden = client.get("/admin/users", headers={"Referer": "http://testserver/datasets"})
    assert forbidden.status_code == 403
    missing = client.get("/algorithms/999999")
    assert missing.status_code == 404
    bad = client.get("/leaderboards/nothing-here?order=up")
    for page in (forbidden, missing, bad):
        for name in CLASS_NAMES:
            assert f"{name}" not in re.sub(r"<[^>]+>", " ", page.text), (page.url, name)
        steps = _next_steps(page.text)
        assert "/" in steps
    assert "/datasets" in _next_steps(forbidden.text)  # back where the visitor came from
    assert any(s.startswith("/login?next=/admin/users") for s in _next_steps(forbidden.text))
    assert "/submissions" in _next_steps(missing.text)
    assert "Algorithm 999999 does not exist." in missing.text  # a sentence, capital first


def test_a_rerun_from_the_evaluation_page_goes_on_to_the_new_evaluation(
    client: TestClient, db_session: Session, sent: list
) -> None:
    owner = f.user(db_session, email="rerun@example.org", password=PASSWORD)
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT, slug="rr"))
    f.recording(db_session, dv)
    done = f.evaluation(db_session, f.version(db_session, f.algorithm(db_session, owner)), dv)
    sign_in(client, "rerun@example.org")
    page = f"/evaluations/{done.id}"
    r = post_form(client, page, f"{page}/rerun", {"back": "evaluation"}, follow_redirects=False)
    assert r.status_code == 303
    new_id = int(re.search(r"/evaluations/(\d+)\?", r.headers["location"]).group(1))  # type: ignore[union-attr]
    assert new_id != done.id
    assert "Re-run queued as evaluation" in client.get(r.headers["location"]).text
    # From My submissions, back to My submissions.
    r = post_form(client, "/submissions", f"/evaluations/{done.id}/rerun", follow_redirects=False)
    assert r.headers["location"].startswith("/submissions")
    # The evaluation page's own button says where it came from.
    assert 'name="back" value="evaluation"' in client.get(page).text


def test_a_finished_evaluation_links_its_leaderboard(
    client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session, email="board-link@example.org", password=PASSWORD)
    algo = f.algorithm(db_session, owner, name="linked")
    ds = f.dataset(db_session, DatasetKind.HELD_OUT, slug="linked-held")
    dv = f.dataset_version(db_session, ds, version="v2")
    older = f.evaluation(db_session, f.version(db_session, algo, version="1.0"), dv)
    newest = f.evaluation(db_session, f.version(db_session, algo, version="2.0"), dv)
    for done in (older, newest):
        f.result(db_session, done, {"01": {"event_f1": 0.5}})
    running = f.evaluation(
        db_session, f.version(db_session, algo, version="3.0"), dv,
        status=EvaluationStatus.RUNNING,
    )  # fmt: skip
    sign_in(client, "board-link@example.org")

    def link(evaluation_id: int) -> str | None:
        found = re.search(r'<p id="on-the-board"><a href="([^"]+)">', client.get(
            f"/evaluations/{evaluation_id}").text)  # fmt: skip
        return found.group(1).replace("&amp;", "&") if found else None

    # 3.0 is the newest version now, so 2.0 and 1.0 are shown among all versions.
    assert link(newest.id) == "/leaderboards/linked-held?version=v2&versions=all"
    assert link(older.id) == "/leaderboards/linked-held?version=v2&versions=all"
    assert link(running.id) is None  # not on a board yet
    board = client.get("/leaderboards/linked-held?version=v2&versions=all")
    assert f"evaluation={older.id}" in board.text


def test_an_entry_has_one_name_on_the_board_and_the_comparison(
    client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session, email="names@example.org", password=PASSWORD)
    ds = f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE, slug="names-sample")
    dv = f.dataset_version(db_session, ds)
    ids = []
    for name, title in (("bl", "Baseline detector"), ("cnn", "")):
        ev = f.evaluation(
            db_session,
            f.version(
                db_session, f.algorithm(db_session, owner, name=name, title=title), version="1"
            ),
            dv,
        )
        f.result(db_session, ev, {f"0{i}": {"event_f1": 0.1 * i} for i in range(1, 4)})
        ids.append(ev.id)
    sign_in(client, "names@example.org")
    board = client.get("/leaderboards/names-sample").text
    compare = client.get(f"/compare?evaluation={ids[0]}&evaluation={ids[1]}").text
    for page in (board, compare):
        assert "Baseline detector" in page
    assert 'data-label="A">Baseline detector 1<' in compare or (
        'data-label="B">Baseline detector 1<' in compare
    )
    assert ">bl 1<" not in compare


def test_the_home_page_title_says_the_name_once(client: TestClient, db_session: Session) -> None:
    f.user(db_session, Role.ADMIN, email="home@example.org", password=PASSWORD)
    page = client.get("/").text
    title = re.search(r"<title>([^<]*)</title>", page)
    assert title
    assert title.group(1) == "Seizure-detection leaderboards · szbench"
    assert title.group(1).count("szbench") == 1
