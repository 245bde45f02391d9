"""The embedded mode's broker transport: kombu's SQLAlchemy transport, on SQLite, polled often.

kombu's SQLAlchemy transport polls an empty queue once a second, and Celery's blocking
consumer loop (the only one for this transport) asks it for events two seconds at a time,
noticing a requested shutdown only in between. A ``szbench evaluate`` therefore waited up
to a second for its first task and up to three more for its worker to stop after the last
one. Here the queue is polled every :data:`POLL_S` and a drain returns after at most
:data:`DRAIN_S`; one poll is a query on a small local file.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import sqlalchemy as kombu_sqlalchemy

#: Seconds between two polls of an empty queue.
POLL_S = 0.05
#: The longest one drain of the consumer loop waits for a message before it returns.
DRAIN_S = 0.2


class Transport(kombu_sqlalchemy.Transport):
    """kombu's SQLAlchemy transport, polled every :data:`POLL_S`."""

    polling_interval = POLL_S

    def drain_events(self, connection: Any, timeout: Any = None) -> Any:  # type: ignore[override]
        # Celery's loop checks for a requested shutdown between two drains.
        if timeout is not None:
            timeout = min(timeout, DRAIN_S)
        return super().drain_events(connection, timeout=timeout)  # type: ignore[no-untyped-call]
