"""Request-scoped dependencies shared by every router."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
from anyio.lowlevel import RunVar
from fastapi import Depends
from sqlalchemy.orm import Session

from szbench.db import get_engine, get_sessionmaker

# One slot per pooled database connection, per event loop, held by a request from before
# its first query until its transaction has ended. FastAPI ends a session dependency in a
# worker thread of its own after the route returned; without the slots, requests waiting
# for a connection take every worker thread while the ones holding connections wait for a
# thread to commit: the pool runs dry (tests/platform/test_ops.py, one-connection pool).
_slots: RunVar[anyio.Semaphore] = RunVar("szbench_session_slots")


def _session_slots() -> anyio.Semaphore:
    try:
        return _slots.get()
    except LookupError:
        pool = get_engine().pool
        size = getattr(pool, "size", lambda: 0)() + max(getattr(pool, "_max_overflow", 0), 0)
        slots = anyio.Semaphore(max(size, 1))
        _slots.set(slots)
        return slots


async def get_session() -> AsyncIterator[Session]:
    """The request's unit of work: commit when the route returns, roll back when it raises.

    The blocking calls (commit, rollback, close) run in worker threads; waiting for a slot
    holds none.
    """
    async with _session_slots():
        session = get_sessionmaker()()
        try:
            yield session
            await anyio.to_thread.run_sync(session.commit)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(session.rollback)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(session.close)


def get_side_session() -> Iterator[Session]:
    """A session outside the request slots, for routes that wait for long (uploads, archive
    checks): its user commits as soon as it is done with the database, so the connection
    goes back to the pool while the route goes on.
    """
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# scope="function": the commit happens before the response is sent, so a client that got
# a 2xx can read what it wrote, and a failed commit is reported instead of lost.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SideSessionDep = Annotated[Session, Depends(get_side_session, scope="function")]
