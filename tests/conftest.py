"""Fixtures shared by every part of the suite: real PostgreSQL, SQLite, settings."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from szbench import db, migrate
from szbench.config import get_settings

PG_ADMIN_URL = os.environ.get(
    "SZBENCH_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs the Docker engine or a browser by the fixtures a test uses, so the
    fast stage (``-m "not docker and not browser"``, scripts/test.sh --fast) cannot pick up
    an engine or browser test that forgot its marker; and give every test an id of its own,
    which pytest-xdist needs to run each one."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "docker_client" in names:
            item.add_marker(pytest.mark.docker)
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
        # schemathesis 4 under pytest 9 gives all of test_fuzz's items (one per API
        # operation) the one node id "...::test_fuzz"; pytest-xdist's --dist loadfile (the
        # rest stage) keys its work by node id and so ran 1 of 116, reporting success. Each
        # item's name holds its operation: that becomes its id.
        if item.parent is not None and item.nodeid != f"{item.parent.nodeid}::{item.name}":
            item._id = item.parent.id.child(item.name)  # pytest has no public setter
    counted = Counter(item.nodeid for item in items)
    twice = sorted(nodeid for nodeid, n in counted.items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests collected twice under one id (xdist runs one): {twice}")


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    name = f"szbench_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    migrate.upgrade(url)
    try:
        yield url
    finally:
        db.reset_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_engine(pg_url: str) -> Iterator[Engine]:
    engine = db.make_engine(pg_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(pg_engine: Engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test.

    Code under test may commit: with ``create_savepoint`` its commits release savepoints
    of the outer transaction, which the test then rolls back whole.
    """
    conn = pg_engine.connect()
    outer = conn.begin()
    session = Session(bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        conn.close()


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """Point the settings at a temporary data dir; set more SZBENCH_* vars via the patcher."""
    monkeypatch.setenv("SZBENCH_DATA_DIR", str(tmp_path / "data"))
    for var in ("SZBENCH_DATABASE_URL", "SZBENCH_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    db.reset_engine()
    yield monkeypatch
    get_settings.cache_clear()
    db.reset_engine()
