"""The runner interface: what a runner is given (:class:`Limits`), what it returns
(:class:`RunResult`), what it raises (:class:`RunnerError` and its kinds), and the
:class:`Runner` protocol every implementation follows."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from szbench.models import RunOutcome

if TYPE_CHECKING:
    from szbench.config import Settings
    from szbench_scoring import Annotations


class RunnerError(Exception):
    """An infrastructure fault (engine unreachable, staging failed): retry, not the submitter's."""


class ImageError(RunnerError):
    """The algorithm image cannot be loaded, pulled or found. The message is submitter-safe."""


class ImageRefused(ImageError):
    """The image archive itself is over a limit or malformed: the submitter's fault, never
    retried. The message is submitter-safe (it names the limit and its setting)."""


class HostLacks(RunnerError):
    """Something every run on this host needs is missing now: the platform's transient
    fault, never the algorithm's (:mod:`szbench_worker.faults`). ``need`` names it
    (``registry``, ``platform_api``, ``recording_cache``, ``setting``); ``public`` says so
    in a sentence anyone may read (no address, path or engine's words); the message is the
    operator's detail. The host takes no run until it is back (:mod:`szbench_worker.health`).
    """

    def __init__(self, need: str, public: str, detail: str) -> None:
        super().__init__(detail)
        self.need = need
        self.public = public


#: The container log kept for admins (its tail): 1 MiB holds a crash's traceback many times
#: over and stays small in a database row per run. Not a setting: no operator decision hangs
#: on it.
LOG_BYTES = 1024**2


@dataclass(frozen=True)
class Limits:
    """Resources and sandbox of one run. Built from settings with :meth:`from_settings`.

    ``user`` is ``"uid[:gid]"`` inside the container (``None`` keeps the image's own user).
    ``network`` is ``False`` for every algorithm run; it exists so tests can show that the
    flag is what closes the network.
    """

    memory_bytes: int = 2 * 1024**3
    cpus: float = 1.0
    pids: int = 256
    timeout_s: float = 900.0
    tmpfs_bytes: int = 256 * 1024**2
    output_bytes: int = 16 * 1024**2
    #: The container log kept for admins (its tail), :data:`LOG_BYTES`.
    log_bytes: int = LOG_BYTES
    user: str | None = None
    #: Entries (files, folders, links) a run may leave in /output: each costs an inode.
    output_files: int = 1000
    network: bool = False

    def __post_init__(self) -> None:
        positive = ("memory_bytes", "pids", "tmpfs_bytes", "output_bytes", "log_bytes")
        for name in (*positive, "output_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        for name in ("cpus", "timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.memory_bytes < 6 * 1024**2:
            # Docker refuses less than 6 MiB; say so here, naming the field.
            raise ValueError("Limits.memory_bytes must be at least 6 MiB")
        if self.user is not None and not re.fullmatch(
            r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", self.user
        ):
            raise ValueError(f"Limits.user must look like 'uid[:gid]', got {self.user!r}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The limits configured for this worker (``SZBENCH_RUNNER_*``)."""
        return cls(
            memory_bytes=settings.runner_memory_bytes,
            cpus=settings.runner_cpus,
            pids=settings.runner_pids,
            timeout_s=settings.runner_timeout_s,
            tmpfs_bytes=settings.runner_tmpfs_bytes,
            output_bytes=settings.runner_output_bytes,
            user=settings.runner_user or None,
            output_files=settings.runner_output_files,
        )


@dataclass(frozen=True)
class GpuInfo:
    """Which GPU(s) a run had, for the record next to its results."""

    device_ids: tuple[str, ...]
    model: str | None = None
    driver: str | None = None


@dataclass
class RunResult:
    """What one run produced. ``annotations`` is set exactly when ``outcome`` is OK.

    ``outcome`` is never ``INFRASTRUCTURE_ERROR``: a runner raises :class:`RunnerError` for
    what is not the algorithm's doing, and the pipeline records that.
    """

    outcome: RunOutcome
    exit_code: int | None
    duration_s: float
    peak_memory_bytes: int | None
    submitter_message: str
    admin_log: str
    output_tsv: Path | None
    annotations: Annotations | None
    image_digest: str
    worker_host: str
    gpu: GpuInfo | None = None
    #: ``"docker"`` for a sandboxed container; ``"local-process"`` for a trusted local run.
    sandbox: str = "docker"


class Runner(Protocol):
    """Runs one algorithm image on one recording."""

    def run(
        self,
        *,
        image: str,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...] = (),
    ) -> RunResult:
        """Run ``image`` on ``recording``; the validated TSV is copied into ``output_dir``."""
        ...

    def remove_leftovers(self) -> int:
        """Remove what this process's interrupted runs left behind (containers, staging).

        Called by a worker after a run was interrupted, never during one; returns the number
        of containers removed.
        """
        ...


def log_text(raw: bytes) -> str:
    """What a run printed, as text any database of the platform can store: bytes that are not
    UTF-8 replaced, and NUL (which PostgreSQL's text refuses) shown as U+FFFD like them."""
    return raw.decode("utf-8", errors="replace").replace("\0", "\ufffd")


def bounded(text: str, limit: int) -> str:
    """Keep at most ``limit`` characters: the head and the tail, with a marker between."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 40, 0)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"
