"""Engine and session handling.

The request's session dependency commits or rolls back; services only flush. Worker tasks
and CLI commands open their own scope with :func:`session_scope`.

Every text is made storable once, on its way to the database (:func:`storable_parameters`,
on every engine this module makes): a NUL character, which PostgreSQL's text refuses and
which an engine's error, an algorithm's log or output, an image's configuration or a
webhook's answer may carry, becomes U+FFFD, as undecodable bytes do. So nothing an outside
party says can make a row unstorable (issue 29 item 5).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from szbench.config import get_settings


def _storable(value: Any) -> Any:
    if isinstance(value, str) and "\0" in value:
        return value.replace("\0", "\ufffd")
    if isinstance(value, dict):
        return {key: _storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_storable(item) for item in value)
    return value


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, dict):
        return any(_has_nul(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nul(item) for item in value)
    return False


def storable_parameters(
    _conn: Any, _cursor: Any, statement: str, parameters: Any, *_context: Any
) -> tuple[str, Any]:
    """A statement's parameters with every NUL in a text made U+FFFD (see the module
    docstring); the same object when none holds one (nearly always: one pass, no copy)."""
    if _has_nul(parameters):
        parameters = _storable(parameters)
    return statement, parameters


def make_engine(url: str, **kwargs: Any) -> Engine:
    engine = _make_engine(url, **kwargs)
    event.listen(engine, "before_cursor_execute", storable_parameters, retval=True)
    return engine


def _make_engine(url: str, **kwargs: Any) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # The embedded worker writes from threads other than the one that opened the file.
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            # Transactions are begun below, not by the driver.
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin_immediate(conn: Any) -> None:
            # Every transaction takes the write lock when it begins (waiting up to the busy
            # timeout), so that the state it reads is still the state when it writes: the
            # row locks of PostgreSQL (lock_run) on a file that several processes share (two
            # `szbench evaluate` on one data directory). A deferred transaction that read
            # before another process wrote would fail at its first write, without waiting.
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    return create_engine(url, **kwargs)


@lru_cache
def get_engine() -> Engine:
    return make_engine(get_settings().effective_database_url)


@lru_cache
def get_sessionmaker() -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


def reset_engine() -> None:
    """Forget the cached engine (after settings change, in tests and at process fork)."""
    if get_engine.cache_info().currsize:
        get_engine().dispose()
    get_engine.cache_clear()
    get_sessionmaker.cache_clear()


def end_unit_of_work(session: Session, *, failed: bool = False) -> None:
    """End a unit of work: commit it (roll it back when it failed, or when the commit
    fails), then close the session, which returns its connection to the pool.

    The one ending of every unit of work: :func:`session_scope` and the request's session
    dependencies (``szbench.api.deps``, which run it in a worker thread).
    """
    try:
        if failed:
            session.rollback()
            return
        try:
            session.commit()
        except BaseException:
            session.rollback()
            raise
    finally:
        session.close()


@contextmanager
def session_scope(maker: sessionmaker[Session] | None = None) -> Iterator[Session]:
    """A unit of work outside a request: commit on success, roll back on error.

    ``maker``: where the session comes from (default: :func:`get_sessionmaker`).
    """
    session = (maker or get_sessionmaker())()
    try:
        yield session
    except BaseException:
        end_unit_of_work(session, failed=True)
        raise
    end_unit_of_work(session)
