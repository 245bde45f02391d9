"""Issue 30.3: teams on the embedded default (``szbench serve`` with SQLite).

SQLite has one writer, and every transaction takes the write lock when it begins (``BEGIN
IMMEDIATE``, :func:`szbench.db.make_engine`). A request that opens a second session while
its first holds the lock waits for itself until the busy timeout (30 s) and answers 503.
The submit route did so for a team member: the caller was resolved in one side session,
the route worked in another, and the first one's lazy load of the member's teams began a
second write transaction. These tests use the app's own session dependencies on a real
SQLite file, as ``szbench serve`` does (the other platform tests override them with one
PostgreSQL session, which hides the bug)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from szbench import db, migrate, queue
from szbench.app import create_app
from szbench.config import get_settings
from tests.platform import factories as f

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def embedded(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The embedded default's database (SQLite under the data dir, migrated), the app on it,
    and a count of the write transactions begun by each thread while another was open."""
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    url = f"sqlite:///{tmp_path / 'embedded.sqlite3'}"
    migrate.upgrade(url)
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    sent: list[tuple[str, str, dict]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    # A request never needs two transactions at once: the second would wait for the first.
    open_now: set[int] = set()
    overlaps: list[int] = []
    engine = db.get_engine()

    @event.listens_for(engine, "begin")
    def began(conn: Any) -> None:
        if open_now:
            overlaps.append(len(open_now))
        open_now.add(id(conn))

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def ended(conn: Any) -> None:
        open_now.discard(id(conn))

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield {"client": client, "sent": sent, "overlaps": overlaps}
    queue.set_sender(None)


def _team_with_member(client: TestClient) -> dict[str, Any]:
    with db.session_scope() as s:
        owner, member = f.user(s), f.user(s)
        owner_h, member_h = f.headers(s, owner), f.headers(s, member)
        member_email = member.email
        algorithm_id = f.algorithm(s, owner, name="shared").id
    r = client.post("/api/v1/teams", json={"name": "Lab"}, headers=owner_h)
    assert r.status_code == 201, r.text
    team_id = r.json()["id"]
    r = client.post(
        f"/api/v1/teams/{team_id}/members", json={"email": member_email}, headers=owner_h
    )
    assert r.status_code == 201, r.text
    r = client.put(f"/api/v1/teams/{team_id}/algorithms/{algorithm_id}", headers=owner_h)
    assert r.status_code == 204, r.text
    return {"algorithm": algorithm_id, "member": member_h, "owner": owner_h}


def test_a_team_member_submits_a_version_of_the_teams_algorithm(
    embedded: dict[str, Any],
) -> None:
    client = embedded["client"]
    team = _team_with_member(client)
    r = client.post(
        f"/api/v1/algorithms/{team['algorithm']}/versions",
        json={"version": "2.0", "image_reference": f"registry.example.org/lab/shared@{DIGEST}"},
        headers=team["member"],
    )
    assert r.status_code == 201, r.text
    assert r.json()["version"] == "2.0"
    assert [name for name, _, _ in embedded["sent"]][-1:] == ["szbench.algorithm.smoke_test"]
    assert embedded["overlaps"] == []


def test_every_team_route_opens_one_transaction_at_a_time(embedded: dict[str, Any]) -> None:
    """The team journey through the API (preflight, submit, the team's page, leaving) never
    holds two transactions at once, whoever calls."""
    client = embedded["client"]
    team = _team_with_member(client)
    r = client.post(
        "/api/v1/algorithms/preflight",
        json={"algorithm_id": team["algorithm"], "version": "3.0"},
        headers=team["member"],
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"/api/v1/algorithms/{team['algorithm']}/versions",
        json={"version": "3.0", "image_reference": f"registry.example.org/lab/shared@{DIGEST}"},
        headers=team["member"],
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/api/v1/uploads",
        json={"filename": "image.tar", "size_bytes": 3},
        headers=team["member"],
    )
    assert r.status_code == 201, r.text
    r = client.put(
        f"/api/v1/uploads/{r.json()['id']}",
        content=b"abc",
        headers={
            **team["member"],
            "Content-Type": "application/octet-stream",
            "Content-Range": "bytes 0-2/3",
        },
    )
    assert r.status_code == 200, r.text
    assert client.get("/api/v1/teams", headers=team["member"]).status_code == 200
    assert embedded["overlaps"] == []
