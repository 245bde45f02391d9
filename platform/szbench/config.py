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

    # --- Platform API (auth, uploads, leaderboards) ---
    # Signs the web session cookie; empty means a random key kept in data_dir/secret_key.
    secret_key: str = ""
    # scrypt cost for password hashes (N, a power of two); stored with each hash.
    password_scrypt_n: int = 2**14
    # Lifetime of the bearer token that POST /api/v1/auth/login returns (seconds).
    login_token_ttl_s: int = 7 * 86400
    session_cookie_name: str = "szbench_session"
    # Set true behind TLS so browsers send the session cookie over HTTPS only.
    session_cookie_secure: bool = False
    # Anyone may create a researcher account (off in centre mode).
    allow_signup: bool = True
    # Signed-out visitors may read public leaderboards, algorithms and datasets.
    anonymous_read: bool = True
    # Uploaded image tarballs and resumable upload sessions; empty means data_dir/uploads.
    uploads_dir: Path | None = None
    max_upload_bytes: int = 20 * 1024**3
    # Unfinished upload sessions older than this are refused and may be deleted.
    upload_session_ttl_s: int = 2 * 86400
    # Accept images whose configured user is root (the worker still drops capabilities).
    allow_root_images: bool = False
    # Algorithm versions a user may submit per rolling 24 h across phases (empty: no limit).
    submissions_per_day: int | None = None
    # Leaderboard statistics (bootstrap CIs, rank stability) are cached this long (seconds).
    leaderboard_cache_s: float = 60.0
    bootstrap_resamples: int = 1000
    bootstrap_seed: int = 0
    confidence_level: float = 0.95

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'szbench.sqlite3'}"

    @property
    def effective_uploads_dir(self) -> Path:
        return self.uploads_dir or self.data_dir / "uploads"


@lru_cache
def get_settings() -> Settings:
    return Settings()
