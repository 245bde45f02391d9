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

    # --- Evaluation pipeline (docs/pipeline.md) -------------------------------------------
    # Redis re-delivers a task whose worker vanished without acknowledging it after this
    # long. It must exceed the longest run (runner timeout + image load + scoring), or a
    # healthy long run is delivered twice (harmless thanks to idempotency, but wasteful).
    queue_visibility_timeout_s: int = 7200
    # Retries of infrastructure faults only (engine unreachable, database connection lost),
    # with exponential backoff capped at task_retry_backoff_max_s.
    task_max_retries: int = 8
    task_retry_backoff_max_s: int = 600
    # Tasks at a time in the embedded (in-process, SQLite-backed queue) worker.
    embedded_concurrency: int = 1
    # Slug of the public-sample dataset whose first recording smoke-tests each new algorithm
    # version; empty or absent: versions are activated without a smoke test (logged).
    smoke_test_dataset: str = "public-sample"
    # Staged recordings and run outputs; default data_dir / "work".
    pipeline_work_dir: Path | None = None


@lru_cache
def get_settings() -> Settings:
    return Settings()
