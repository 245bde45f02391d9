"""This worker host as runs record it: its name, its GPUs, where runs stage their files."""

from __future__ import annotations

import functools
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from szbench_worker.runner.interface import GpuInfo

if TYPE_CHECKING:
    from szbench.config import Settings


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
    from szbench.config import get_settings

    return get_settings().worker_host or socket.gethostname()


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
