"""What the server does with an upload after its last byte, recorded beside its bytes.

Checking a multi-GB archive and pushing it to the registry takes minutes; no request waits
for it. The steps run in the background of one API process (``szbench.algorithms.intake``)
and write their record here, ``<id>.steps.json`` next to ``<id>.part``: the step, the bytes
done of the total, and the outcome. Any API process reads it to answer a poll.

Whoever runs the steps holds an exclusive lock (``flock``) on the upload's ``.part`` for as
long as they run, so the record can tell *running* from *interrupted* (the process died or
restarted: its lock went with it) without any heartbeat, and two processes never run the
steps of one upload at once. The lock is the one :func:`szbench.uploads.service.write_chunk`
takes, so no byte is written meanwhile either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The steps while they run, in order (``checking-user`` only for an image whose ``User``
#: is a name); they end ``done``, ``refused`` or ``failed``. ``interrupted``: a running step
#: whose lock is gone.
RUNNING = ("checking", "checking-user", "pushing")
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Steps:
    """One upload's server-side steps. ``result``: what the check found (and where the
    registry keeps the image), kept once the check has passed, even if a later step failed.
    ``file``: the state of the bytes the record is about (:func:`file_state`)."""

    step: str
    done_bytes: int = 0
    total_bytes: int = 0
    detail: str = ""
    # InvalidSubmission or PayloadTooLarge, for a refusal.
    error: str = ""
    result: dict[str, Any] | None = None
    file: str = ""
    running: bool = field(default=False, compare=False)


def record_path(part: Path) -> Path:
    return part.with_name(part.name.removesuffix(".part") + ".steps.json")


def file_state(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def claim(part: Path) -> int | None:
    """An open descriptor of ``part`` holding the exclusive lock (close it to release);
    ``None`` when another holds it (the steps run, or a chunk is being written)."""
    try:
        fd = os.open(part, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def held(part: Path) -> bool:
    """Whether someone holds ``part``'s lock now."""
    fd = claim(part)
    if fd is None:
        return part.exists()
    os.close(fd)
    return False


def read(part: Path) -> Steps | None:
    """The record of ``part``'s steps; ``None`` when there is none (or it is unreadable)."""
    try:
        data = json.loads(record_path(part).read_text())
        steps = Steps(**data)
    except (OSError, ValueError, TypeError):
        return None
    if steps.step in RUNNING:
        if held(part):
            return Steps(**{**asdict(steps), "running": True})
        return Steps(**{**asdict(steps), "step": INTERRUPTED})
    return steps


def write(part: Path, steps: Steps) -> None:
    """Replace the record, atomically (a reader sees the old one or the new one)."""
    target = record_path(part)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = asdict(steps)
    data.pop("running")
    tmp.write_text(json.dumps(data))
    tmp.replace(target)


def discard(part: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(part).unlink()
