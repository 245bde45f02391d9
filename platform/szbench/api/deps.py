"""Request-scoped dependencies shared by every router."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Annotated, TypeVar

import anyio
from anyio.lowlevel import RunVar
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from szbench.db import get_engine, get_sessionmaker

T = TypeVar("T")

# One slot per pooled database connection, per event loop. Whoever uses a connection holds
# a slot from before its first query until its transaction has ended, and one slot covers at
# most one connection at a time. So a worker thread never waits for a pooled connection:
# without this, requests whose route has returned but whose commit has not run yet keep
# their connection while waiting for a thread, the threads are all waiting for connections,
# and the pool runs dry (a 30 s wait, then an error). Requests that never touch the database
# (an anonymous caller, a cached answer) take no slot at all.
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


@asynccontextmanager
async def db_slot() -> AsyncIterator[None]:
    """Hold a connection slot (for database work outside any request, e.g. a cache refresh)."""
    async with _session_slots():
        yield


async def get_session() -> AsyncIterator[Session]:
    """The request's session, without a connection slot (see :func:`run_in_slot`).

    Routes that use the database declare :data:`SessionDep`, which adds the slot and the
    unit of work. A session nothing used costs nothing.
    """
    session = get_sessionmaker()()
    try:
        yield session
    finally:
        if session.in_transaction():
            # Only when something left its transaction open: give the connection back.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(session.close)
        else:
            session.close()  # no transaction: no I/O, no thread


BareSessionDep = Annotated[Session, Depends(get_session, scope="function")]
"""The request's session with no slot: only for :func:`run_in_slot`."""


async def get_session_in_slot(request: Request, session: BareSessionDep) -> AsyncIterator[Session]:
    """The request's unit of work: commit when the route returns, roll back when it raises.

    Holds a connection slot from before the route runs until the transaction has ended. The
    blocking database calls (commit, rollback) run in worker threads; waiting for a slot
    does not hold a thread.
    """
    async with _session_slots():
        request.state.db_slot_held = True
        try:
            yield session
            if session.in_transaction():
                await anyio.to_thread.run_sync(session.commit)
        except BaseException:
            if session.in_transaction():
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(session.rollback)
            raise
        finally:
            request.state.db_slot_held = False


async def run_in_slot(request: Request, session: Session, work: Callable[[], T]) -> T:
    """Run ``work`` (blocking database work on ``session``) in a worker thread, holding a
    connection slot unless the request already holds one, and end the transaction in that
    thread (commit, or roll back when ``work`` raises): the connection is back in the pool
    before the request waits for anything else."""

    def run() -> T:
        try:
            result = work()
            session.commit()
        except BaseException:
            session.rollback()
            raise
        return result

    if getattr(request.state, "db_slot_held", False):
        return await anyio.to_thread.run_sync(run)
    async with _session_slots():
        return await anyio.to_thread.run_sync(run)


def get_side_session() -> Iterator[Session]:
    """A session outside the request slots, for routes that stream for long (uploads).

    Its user commits as soon as it is done with the database: the connection goes back to
    the pool then, while the route goes on streaming.
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
SessionDep = Annotated[Session, Depends(get_session_in_slot, scope="function")]
