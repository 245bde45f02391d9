"""Small helpers shared by the platform tests: recorded SQL, waiting on the event loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
from sqlalchemy import event
from sqlalchemy.orm import Session


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
