"""Run the Alembic migrations from code (the CLI, the embedded mode and the tests)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from szbench.config import get_settings

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported only when there is something to do: loading it and every migration
# costs a `szbench evaluate` about a second, on a database that is nearly always up to date.
_REVISION = re.compile(r"^revision\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


def migrations_dir() -> Path:
    override = get_settings().migrations_dir
    if override:
        return override
    # Source checkout and the project's images both keep migrations/ next to platform/.
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

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
    path = _sqlite_path(url)
    if not path:
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


def head_revision() -> str | None:
    """The newest migration's revision, read from the migration files' text; None unless
    exactly one revision is no other's ``down_revision`` (then Alembic decides)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (migrations_dir() / "versions").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        found = _REVISION.search(text)
        if found is None:
            return None
        revisions.add(found[1])
        parent = _DOWN_REVISION.search(text)
        if parent is not None:
            parents.add(parent[1])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _sqlite_path(url: str | None) -> str:
    path = url.split("///", 1)[-1] if url and url.startswith("sqlite") else ""
    return "" if path == ":memory:" else path


def _sqlite_at_head(path: str) -> bool:
    """Whether the SQLite file at ``path`` is already at the newest migration."""
    if not path or not Path(path).is_file():
        return False
    head = head_revision()
    if head is None:
        return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return rows == [(head,)]


def upgrade(url: str | None = None, revision: str = "head") -> None:
    if revision == "head" and _sqlite_at_head(_sqlite_path(url)):
        return
    from alembic import command

    with _one_at_a_time(url):
        command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def check(url: str | None = None) -> None:
    """Raise if the models and the migrations disagree (alembic's autogenerate diff)."""
    from alembic import command

    command.check(alembic_config(url))
