"""Accounting of what a run's ``/output`` costs the host: bytes and inodes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from szbench_worker.runner import (
    Limits,
)


@dataclass(frozen=True)
class OutputUsage:
    """What a run's ``/output`` holds: bytes it costs the disk, and entries (inodes)."""

    bytes: int
    files: int


def output_usage(path: Path, *, stop_above: OutputUsage | None = None) -> OutputUsage | None:
    """Disk bytes and entries under ``path``; ``None`` when part of it cannot be listed.

    Each entry counts ``max(allocated, apparent)`` bytes: allocated blocks
    (``st_blocks * 512``) include what ``fallocate(FALLOC_FL_KEEP_SIZE)`` reserves beyond
    the end of a file, which its size never shows; the apparent size covers a sparse file,
    which costs nothing until something copies it. Hard links count once. Every entry
    (files, folders, links) counts against the file cap: an empty file still costs an inode.

    A worker that is not root sees the container's files through ordinary permissions: a
    folder the container made unlistable would hide what is inside, so it counts as a
    violation rather than as zero. ``stop_above``: stop counting (and return what was
    counted) once either figure exceeds it, so that a run that made millions of files costs
    one bounded pass, not a walk over all of them.
    """
    total = files = 0
    hidden = False
    seen: set[tuple[int, int]] = set()

    def unreadable(_: OSError) -> None:
        nonlocal hidden
        hidden = True

    for root, dirs, names in os.walk(path, onerror=unreadable, followlinks=False):
        for name in names + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                hidden = True
                continue
            files += 1
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += max(st.st_blocks * 512, st.st_size)
            if stop_above is not None and (total > stop_above.bytes or files > stop_above.files):
                return OutputUsage(total, files)
    return None if hidden else OutputUsage(total, files)


def output_ok(path: Path, limits: Limits) -> bool:
    cap = OutputUsage(limits.output_bytes, limits.output_files)
    usage = output_usage(path, stop_above=cap)
    return usage is not None and usage.bytes <= cap.bytes and usage.files <= cap.files
