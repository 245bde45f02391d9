"""This worker host and process as runs record them: the host's name, its GPUs, where runs
stage their files, and which worker process claims a run (its id, its owner token)."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
from pathlib import Path

from szbench.config import Settings, get_settings
from szbench_worker.runner.interface import GpuInfo

_ENV_WORKER_ID = "_SZBENCH_WORKER_ID"


def gpus_from_settings(settings: Settings) -> tuple[str, ...]:
    """The GPU device ids this worker owns (``SZBENCH_RUNNER_GPUS="0"``); empty for CPU."""
    return tuple(g.strip() for g in settings.runner_gpus.split(",") if g.strip())


def work_dir_from_settings(settings: Settings) -> Path:
    """Where runs stage their files on this host: ``SZBENCH_RUNNER_WORK_DIR``, by default
    ``<data_dir>/runs`` (the one default every runner, sweep and worker start-up uses)."""
    return Path(settings.runner_work_dir or Path(settings.data_dir) / "runs")


def worker_host() -> str:
    """The name this worker records with its results (``SZBENCH_WORKER_HOST``, else the
    hostname)."""
    return get_settings().worker_host or socket.gethostname()


# --- this worker process ------------------------------------------------------------------


def _proc_start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            # Field 22 (starttime); the command name (field 2) may contain spaces.
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_token(pid: int | None = None) -> str:
    """``<pid>.<start time>``: names this process uniquely on this host, even after pid reuse."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_proc_start_ticks(pid) or 0}"


def owner_alive(token: str) -> bool:
    """Whether the process that :func:`owner_token` named is still running on this host."""
    pid_s, _, ticks = token.partition(".")
    if not pid_s.isdigit():
        return False
    return _proc_start_ticks(int(pid_s)) == ticks


def make_worker_id(host: str, token: str) -> str:
    """``<host>:<pid>.<start ticks>``: one worker instance (a restart is another one)."""
    return f"{host}:{token}"


def set_worker_id(value: str) -> None:
    """Name this worker; set in its main process before the pool forks (children inherit)."""
    os.environ[_ENV_WORKER_ID] = value


def worker_id() -> str:
    """The id of the worker this process belongs to ("" outside a heartbeating worker)."""
    return os.environ.get(_ENV_WORKER_ID, "")


@functools.lru_cache(maxsize=16)
def describe_gpus(device_ids: tuple[str, ...]) -> GpuInfo | None:
    """Model and driver of the given GPUs from ``nvidia-smi`` (ids only when it is absent)."""
    if not device_ids:
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuInfo(device_ids=device_ids)
    try:
        out = subprocess.run(
            [
                smi,
                "--query-gpu=name,driver_version",
                "--format=csv,noheader",
                "-i",
                ",".join(device_ids),
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return GpuInfo(device_ids=device_ids)
    rows = [line.split(",") for line in out.strip().splitlines() if "," in line]
    models = sorted({r[0].strip() for r in rows})
    drivers = sorted({r[1].strip() for r in rows})
    return GpuInfo(device_ids, ", ".join(models) or None, ", ".join(drivers) or None)
