"""How the pipeline changes rows so that a task may run twice: locks and idempotent inserts."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench import clock
from szbench.models import AlgorithmVersion, Evaluation, RecordingRun


def now(session: Session) -> datetime:
    """The database's time (:mod:`szbench.clock`): every time the pipeline stores is read
    there, never from this host's clock, which may be off by hours."""
    return clock.now(session)


_Row = TypeVar("_Row", Evaluation, RecordingRun, AlgorithmVersion)


def lock(session: Session, model: type[_Row], row_id: int) -> _Row | None:
    """The row, locked for this transaction (FOR UPDATE on PostgreSQL; SQLite serialises
    writers) and re-read, so a concurrent task's change is never overwritten."""
    return session.execute(
        select(model)
        .where(model.id == row_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def lock_evaluation(session: Session, evaluation_id: int) -> Evaluation | None:
    return lock(session, Evaluation, evaluation_id)


def lock_run(session: Session, run_id: int) -> RecordingRun | None:
    return lock(session, RecordingRun, run_id)


def insert_ignoring_conflicts(session: Session, table: Any) -> Any:
    """``INSERT`` for the session's database, on which ``.on_conflict_do_nothing`` exists."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise RuntimeError(f"unsupported database {dialect!r}")
