"""Alembic environment: one set of migrations for PostgreSQL and SQLite."""

from __future__ import annotations

from alembic import context

from szbench.config import get_settings
from szbench.db import make_engine
from szbench.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    # A URL set on the Config (tests, `szbench db upgrade --url`) wins over the settings.
    return config.get_main_option("sqlalchemy.url") or get_settings().effective_database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            # SQLite changes a table by copying it (batch mode) and dropping the old one;
            # with foreign keys on, that drop would cascade into every row that refers to it
            # (a team's memberships). Off for the migration, as SQLite's own procedure for
            # schema changes says, and checked before the end. Set on the driver's
            # connection: a pragma inside a transaction does nothing.
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
        try:
            _run(conn)
            if sqlite:
                broken = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
                if broken:
                    raise RuntimeError(f"the migration left rows without their parent: {broken}")
        finally:
            if sqlite:
                conn.rollback()
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]
    engine.dispose()


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode rebuilds the table instead.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
