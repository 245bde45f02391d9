"""Who owns a run's container and staging directory: labels, owner tokens, names.

A worker process names itself by pid and start time (unique on a host even after pid reuse),
so the sweep can tell a dead worker's leftovers from a live one's."""

from __future__ import annotations

import os
import re
from pathlib import Path

LABEL_RUNNER = "org.szbench.runner"
LABEL_HOST = "org.szbench.worker-host"
LABEL_OWNER = "org.szbench.owner"


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


def host_tag(host: str) -> str:
    """``host`` made safe for a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)[:64]


def owner_alive(token: str) -> bool:
    pid_s, _, ticks = token.partition(".")
    if not pid_s.isdigit():
        return False
    return _proc_start_ticks(int(pid_s)) == ticks


def container_name(run_dir: Path) -> str:
    """The run container's name: its staging directory's (unique on this host), prefixed."""
    return f"szbench-{run_dir.name}"
