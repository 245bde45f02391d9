"""All runtime configuration, read from the environment (prefix ``SZBENCH_``).

Every setting an operator may want to change lives here and is documented in
``.env.example``; code reads it through :func:`get_settings`, which tests override with
``get_settings.cache_clear()`` after changing the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SZBENCH_", env_file=".env", extra="ignore")

    # Where the embedded mode keeps its database, uploads, datasets and run outputs.
    data_dir: Path = Path.home() / ".szbench"
    # SQLAlchemy URL; empty means SQLite under data_dir (the embedded default).
    database_url: str = ""
    # Celery broker; empty means the embedded mode (tasks run in-process, no Redis).
    broker_url: str = ""

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'szbench.sqlite3'}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
