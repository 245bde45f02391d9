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

    # Container runner: the limits every algorithm run gets (see docs/algorithm-contract.md).
    # The challenge's reference per 1 h recording is 10 cores, 40 GB, 1 GPU, 15 min.
    runner_backend: str = "auto"  # auto | docker | local (trusted local process, demo only)
    runner_memory_bytes: int = 8 * 1024**3  # RAM, and RAM+swap (no swap)
    runner_cpus: float = 2.0
    runner_pids: int = 512  # processes and threads inside the container
    runner_timeout_s: float = 900.0  # wall clock per recording, then the container is killed
    runner_tmpfs_bytes: int = 512 * 1024**2  # /tmp (counts against the memory limit)
    runner_output_bytes: int = 16 * 1024**2  # everything the run writes to /output
    runner_log_bytes: int = 1024**2  # container logs kept for admins (the tail)
    runner_user: str = ""  # uid[:gid] inside the container; empty keeps the image's user
    runner_gpus: str = ""  # comma-separated GPU ids this worker owns, e.g. "0" or "GPU-uuid"
    runner_work_dir: Path | None = None  # per-run staging; default data_dir / "runs"
    runner_output_tmpfs: bool | None = None  # /output as a size-capped tmpfs; None: when root
    runner_local_command: str = "python3 examples/baseline/detect.py"  # for runner_backend=local

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'szbench.sqlite3'}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
