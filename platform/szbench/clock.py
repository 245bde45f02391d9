"""The one clock that stored times, heartbeats and leases are read from: the database's.

Workers on many hosts write times that other processes compare: a claim's start, a run's
end, a heartbeat. The reconciler judges a worker dead by its heartbeat's age, a page says
"no worker serves this queue" by the same, and a submitter reads start and finish times.
With each host's own clock, a worker whose clock runs an hour ahead and then dies keeps
its runs for that hour (its heartbeat looks fresh), and one ten minutes behind writes
finish times before the start times others wrote and looks dead while it runs (issue 29.3).
The database is the one clock every one of them shares, so every time is taken there.

- PostgreSQL: ``clock_timestamp()``, the wall clock at the call (not ``now()``, the
  transaction's start: a claim that waited for a row lock records when it got it). One
  round trip, on the caller's connection when it passes one.
- SQLite, the embedded default: the database is a library inside this process and its file
  is shared only by processes on this host, so its clock *is* this host's clock: the time is
  taken here, without a query (``datetime.now(UTC)``, as SQLite's own ``'now'`` would be).

Intervals measured inside one process (how long a worker has had a free slot) use the
monotonic clock and are turned into a time here, on the database's clock, when stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

_QUERY = text("SELECT clock_timestamp()")


def _postgres_now(conn: Connection | Session) -> datetime:
    value = conn.execute(_QUERY).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def now(bind: Session | Connection | None = None) -> datetime:
    """The database's time now, timezone-aware UTC.

    ``bind``: the session or connection of the caller's unit of work (no second connection
    is taken); None: a connection of the process's engine (``szbench.db.get_engine``).
    """
    if bind is None:
        from szbench.db import get_engine

        engine = get_engine()
        if engine.dialect.name != "postgresql":
            return datetime.now(UTC)
        with engine.connect() as conn:
            return _postgres_now(conn)
    dialect = (bind.get_bind() if isinstance(bind, Session) else bind).dialect.name
    if dialect != "postgresql":
        return datetime.now(UTC)
    return _postgres_now(bind)


def column_default(context: Any) -> datetime:
    """A column's ``default=``: the database's time, read on the inserting connection."""
    return now(context.connection)
