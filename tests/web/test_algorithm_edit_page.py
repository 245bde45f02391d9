"""The algorithm edit page: fields, links rendered as links, withdrawal and its undoing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import DatasetKind
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in


def test_owner_edits_links_and_withdraws(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    # No freshness window: the leaderboard is read right after each change.
    settings_env.setenv("SZBENCH_LEADERBOARD_FRESH_S", "0")
    get_settings.cache_clear()
    owner = f.user(db_session, email="edit-owner@example.org", password=PASSWORD)
    algo = f.algorithm(db_session, owner, name="edited")
    ds = f.dataset(db_session, DatasetKind.HELD_OUT)
    ev = f.evaluation(db_session, f.version(db_session, algo), f.dataset_version(db_session, ds))
    f.result(db_session, ev, {"01": {"event_f1": 0.5}})
    sign_in(client, "edit-owner@example.org")
    assert 'id="edit-link"' in client.get(f"/algorithms/{algo.id}").text
    edit = f"/algorithms/{algo.id}/edit"
    bad = post_form(client, edit, edit, {"title": "T", "code_url": "javascript:alert(1)"})
    assert bad.status_code == 400
    assert 'id="code-url-error">&#39;javascript:alert(1)&#39; is not an http(s) link' in bad.text
    # The form keeps what was typed.
    assert 'value="T"' in bad.text
    r = post_form(
        client,
        edit,
        edit,
        {
            "title": "Edited",
            "code_url": "https://git.example.org/x",
            "paper_url": "",
            "visibility": "public",
        },
    )
    assert r.status_code == 200  # followed the redirect to the algorithm page
    assert (
        '<a href="https://git.example.org/x" rel="nofollow noopener noreferrer" id="code-link">'
        in r.text
    )
    assert 'id="paper-link"' not in r.text
    assert "<h1><bdi>Edited" in r.text
    entry = f'href="/algorithms/{algo.id}?evaluation={ev.id}"'
    assert entry in client.get(f"/leaderboards/{ds.slug}").text
    r = post_form(client, edit, f"/algorithms/{algo.id}/withdraw")
    assert 'id="withdrawn-note"' in r.text
    assert entry not in client.get(f"/leaderboards/{ds.slug}").text
    r = post_form(client, edit, f"/algorithms/{algo.id}/restore")
    assert 'id="withdrawn-note"' not in r.text
    assert entry in client.get(f"/leaderboards/{ds.slug}").text


def test_someone_else_may_not_edit(client: TestClient, db_session: Session) -> None:
    algo = f.algorithm(db_session, f.user(db_session))
    f.user(db_session, email="edit-other@example.org", password=PASSWORD)
    sign_in(client, "edit-other@example.org")
    page = client.get(f"/algorithms/{algo.id}")
    assert 'id="edit-link"' not in page.text
    assert client.get(f"/algorithms/{algo.id}/edit").status_code == 403
    r = post_form(client, f"/algorithms/{algo.id}", f"/algorithms/{algo.id}/withdraw")
    assert r.status_code == 403
