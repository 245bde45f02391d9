"""Run the Alembic migrations from code (the CLI, the embedded mode and the tests)."""

from __future__ import annotations

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


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None = None, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def check(url: str | None = None) -> None:
    """Raise if the models and the migrations disagree (alembic's autogenerate diff)."""
    command.check(alembic_config(url))
