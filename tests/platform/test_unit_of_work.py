"""How every unit of work ends (``szbench.db.end_unit_of_work``): the request's session,
a side session and ``session_scope`` commit on success, roll back on an error or a failed
commit, and always give their connection back (a pool of one connection, real SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import db, migrate
from szbench.api.deps import SessionDep, SideSessionDep
from szbench.config import get_settings
from szbench.models import Role, User
from tests.platform.helpers import single_connection_pool


@pytest.fixture
def pool(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, int]]:
    """The app's sessions on a pool of one connection; ``now``: connections checked out."""
    url = f"sqlite:///{tmp_path / 'uow.sqlite3'}"
    migrate.upgrade(url)
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    engine, out = single_connection_pool(settings_env, url)
    yield out
    engine.dispose()


def _emails() -> set[str]:
    with db.session_scope() as session:
        return set(session.scalars(select(User.email)))


def _add(session: Session, email: str, fail: bool) -> dict[str, str]:
    # Added, not flushed: a duplicate email fails at the commit, after the route returned.
    session.add(User(email=email, name="x", role=Role.RESEARCHER))
    if fail:
        raise RuntimeError("the route failed after its write")
    return {"ok": email}


def _app() -> FastAPI:
    app = FastAPI()

    @app.post("/request/{email}")
    def in_request(email: str, session: SessionDep, fail: bool = False) -> dict[str, str]:
        """Adds a user in the request's session."""
        return _add(session, email, fail)

    @app.post("/side/{email}")
    def in_side(email: str, session: SideSessionDep, fail: bool = False) -> dict[str, str]:
        """Adds a user in a side session."""
        return _add(session, email, fail)

    return app


@pytest.mark.parametrize("kind", ["request", "side"])
def test_a_route_commits_on_success_and_rolls_back_when_it_raises(
    pool: dict[str, int], kind: str
) -> None:
    client = TestClient(_app(), raise_server_exceptions=False)
    assert client.post(f"/{kind}/kept@example.org").status_code == 200
    assert client.post(f"/{kind}/dropped@example.org?fail=true").status_code == 500
    assert _emails() == {"kept@example.org"}
    assert pool["now"] == 0  # every connection back in the pool


@pytest.mark.parametrize("kind", ["request", "side"])
def test_a_failed_commit_rolls_back_and_gives_the_connection_back(
    pool: dict[str, int], kind: str
) -> None:
    """The second row of one email fails at the commit: nothing of it stays, and the one
    connection serves the next request."""
    client = TestClient(_app(), raise_server_exceptions=False)
    assert client.post(f"/{kind}/once@example.org").status_code == 200
    assert client.post(f"/{kind}/once@example.org").status_code == 500
    assert client.post(f"/{kind}/after@example.org").status_code == 200
    assert _emails() == {"once@example.org", "after@example.org"}
    assert pool["now"] == 0


def _failing_scope(email: str) -> None:
    with db.session_scope() as session:
        _add(session, email, fail=True)


def test_session_scope_commits_or_rolls_back(pool: dict[str, int]) -> None:
    with db.session_scope() as session:
        _add(session, "scoped@example.org", fail=False)
    with pytest.raises(RuntimeError, match="failed after its write"):
        _failing_scope("undone@example.org")
    assert _emails() == {"scoped@example.org"}
