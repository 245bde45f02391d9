"""Who owns a run's container and staging directory: labels and names.

The owner label holds the worker process's owner token
(:func:`szbench_worker.runner.owner_token`: pid and start time, unique on a host even after
pid reuse), so the sweep can tell a dead worker's leftovers from a live one's."""

from __future__ import annotations

import re
from pathlib import Path

LABEL_RUNNER = "org.szbench.runner"
LABEL_HOST = "org.szbench.worker-host"
LABEL_OWNER = "org.szbench.owner"


def host_tag(host: str) -> str:
    """``host`` made safe for a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)[:64]


def container_name(run_dir: Path) -> str:
    """The run container's name: its staging directory's (unique on this host), prefixed."""
    return f"szbench-{run_dir.name}"
