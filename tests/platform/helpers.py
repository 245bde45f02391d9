"""Small helpers shared by the platform tests: recorded SQL, waiting on the event loop, a
one-connection pool."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


@contextmanager
def recorded_statements(session: Session) -> Iterator[list[str]]:
    """The SQL statements sent on ``session``'s connection meanwhile (savepoints left out)."""
    statements: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "SAVEPOINT" not in statement:
            statements.append(statement)

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


async def in_thread(work: Callable[[], Any]) -> Any:
    """What ``run_in_slot`` does, without a session: the blocking work in a worker thread."""
    return await anyio.to_thread.run_sync(work)


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Wait on the event loop until ``condition()`` holds (fail after ``timeout_s``)."""
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.001)


def single_connection_pool(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> tuple[Engine, dict[str, int]]:
    """Make the app's requests use an engine with one pooled connection and no overflow,
    failing after 10 s of waiting for it (a request that held it while waiting for
    something else would end there, in errors). Returns the engine and a count of the
    connections checked out: ``now`` and ``most``."""
    from szbench.api import deps

    engine = create_engine(
        url,
        pool_size=1,
        max_overflow=0,
        pool_timeout=10,
        connect_args={"check_same_thread": False} if url.startswith("sqlite") else {},
    )
    out = {"now": 0, "most": 0}

    @event.listens_for(engine, "checkout")
    def checkout(*_: object) -> None:
        out["now"] += 1
        out["most"] = max(out["most"], out["now"])

    @event.listens_for(engine, "checkin")
    def checkin(*_: object) -> None:
        out["now"] -= 1

    maker = sessionmaker(bind=engine, expire_on_commit=False)
    monkeypatch.setattr(deps, "get_sessionmaker", lambda: maker)
    monkeypatch.setattr(deps, "get_engine", lambda: engine)
    return engine, out
