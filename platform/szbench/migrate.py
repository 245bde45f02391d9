"""Run the Alembic migrations from code (the CLI, the embedded mode and the tests)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config

from szbench.config import get_settings


def migrations_dir() -> Path:
    override = get_settings().migrations_dir
    if override:
        return override
    # Source checkout and the project's images both keep migrations/ next to platform/.
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("path_separator", "os")
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@contextlib.contextmanager
def _one_at_a_time(url: str | None) -> Iterator[None]:
    """Upgrades of one SQLite file, one process at a time (two `szbench evaluate` started
    together on a new data directory would both create the tables); PostgreSQL serialises
    its own DDL."""
    path = url.split("///", 1)[-1] if url and url.startswith("sqlite") else ""
    if not path or path == ":memory:":
        yield
        return
    lock = Path(path + ".migrate-lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def upgrade(url: str | None = None, revision: str = "head") -> None:
    with _one_at_a_time(url):
        command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def check(url: str | None = None) -> None:
    """Raise if the models and the migrations disagree (alembic's autogenerate diff)."""
    command.check(alembic_config(url))
