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

    # Logs (szbench.logging): level name, and "text" for a terminal or "json" for collectors.
    log_level: str = "INFO"
    log_format: str = "text"  # text | json
    # Clinical-centre mode: no public sign-up and nothing is pushed off the host (no outbound
    # publishing of results or notifications); see docs/self-hosting.md.
    centre_mode: bool = False
    # Which algorithm images may run, comma-separated; empty allows every image. Each entry is
    # an image digest ("sha256:<64 hex>") or a reference prefix ("localhost:5000/approved/").
    # An image runs when its digest is listed or its reference starts with a listed prefix.
    allowed_images: str = ""

    def image_is_allowed(self, *, digest: str | None = None, reference: str | None = None) -> bool:
        """Whether an algorithm image passes ``allowed_images`` (everything when it is empty).

        Prefixes compare against the reference as written ("registry/name:tag" or
        "registry/name@sha256:..."), digests exactly; a tarball upload has no reference,
        so only a listed digest admits it.
        """
        rules = [r.strip() for r in self.allowed_images.split(",") if r.strip()]
        if not rules:
            return True
        for rule in rules:
            if rule.startswith("sha256:"):
                if digest is not None and digest == rule:
                    return True
            elif reference is not None and reference.startswith(rule):
                return True
        return False

    @property
    def effective_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'szbench.sqlite3'}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
