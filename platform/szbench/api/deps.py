"""Request-scoped dependencies shared by every router."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import anyio
from anyio.lowlevel import RunVar
from fastapi import Depends
from sqlalchemy.orm import Session

from szbench.db import end_unit_of_work, get_engine, get_sessionmaker, session_scope

# One slot per pooled database connection, per event loop, held by a request from before
# its session exists until its transaction has ended.
#
# Why they stay (reconsidered once the read path became plain sync routes, issue 25): FastAPI
# runs sync routes and the end of a session in worker threads (40 by default). With more
# requests than connections, requests waiting for a connection block every worker thread
# while the requests holding the connections wait for a thread to commit and give theirs
# back: nothing moves until the pool's timeout answers 503. Measured with the plain session
# (session_scope as the dependency, no slots): tests/platform/test_ops.py::
# test_requests_queue_for_a_one_connection_pool_without_deadlock fails, its requests
# answered "QueuePool limit of size 1 overflow 0 reached, connection timed out". A request
# waiting for a slot holds no thread (it awaits), so a thread always finds a connection.
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

    It ends (:func:`~szbench.db.end_unit_of_work`) in a worker thread, shielded so that a
    cancelled request still returns its connection; waiting for a slot holds no thread.
    """
    async with _session_slots():
        session = get_sessionmaker()()
        failed = False
        try:
            yield session
        except BaseException:
            failed = True
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(
                    functools.partial(end_unit_of_work, session, failed=failed)
                )


def get_side_session() -> Iterator[Session]:
    """A session outside the request slots, for routes that wait for long (uploads, archive
    checks): its user commits as soon as it is done with the database, so the connection
    goes back to the pool while the route goes on.
    """
    # The same sessionmaker as the request's sessions (one engine, one pool).
    with session_scope(get_sessionmaker()) as session:
        yield session


# scope="function": the commit happens before the response is sent, so a client that got
# a 2xx can read what it wrote, and a failed commit is reported instead of lost.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
SideSessionDep = Annotated[Session, Depends(get_side_session, scope="function")]
