"""Every stored moment comes back timezone-aware UTC, on SQLite (the embedded default, which
keeps no time zone) as on PostgreSQL: pages compare stored times with the clock, and on
SQLite alone that comparison raised "can't compare offset-naive and offset-aware datetimes"
(the evaluation page of a team's submission, in `szbench serve`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from szbench import db, migrate
from szbench.models import User


def _round_trip(session: Session) -> None:
    eastern = timezone(timedelta(hours=-5))
    user = User(email="utc@example.org", name="utc")
    user.password_changed_at = datetime(2026, 1, 1, 7, 0, tzinfo=eastern)  # 12:00 UTC
    user.email_verified_at = datetime(2026, 1, 1, 12, 30)  # naive: taken as UTC
    session.add(user)
    session.flush()
    session.expire_all()
    again = session.get_one(User, user.id)
    for moment in (again.created_at, again.password_changed_at, again.email_verified_at):
        assert moment.tzinfo is not None
        assert moment.utcoffset() == timedelta(0)
    assert again.password_changed_at == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert again.email_verified_at == datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    assert again.created_at <= datetime.now(UTC)  # comparable with the clock


def test_sqlite_gives_back_aware_utc_moments(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'utc.sqlite3'}"
    migrate.upgrade(url)
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            _round_trip(session)
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_postgresql_gives_back_aware_utc_moments(db_session: Session) -> None:
    _round_trip(db_session)
