"""mount(2) and umount2(2) through libc, for the capped tmpfs at a run's ``/output``."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from pathlib import Path
from typing import Any

_libc: Any = None


def _libc_call(name: str, *args: Any) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def mount_tmpfs(
    target: Path, size_bytes: int, uid: int | None, gid: int | None, inodes: int | None = None
) -> None:
    ms_nosuid, ms_nodev, ms_noexec = 2, 4, 8
    opts = f"size={size_bytes},mode={'0700' if uid is not None else '1777'}"
    if inodes is not None:
        opts += f",nr_inodes={inodes}"
    if uid is not None:
        opts += f",uid={uid},gid={gid if gid is not None else uid}"
    _libc_call(
        "mount",
        b"tmpfs",
        os.fsencode(target),
        b"tmpfs",
        ms_nosuid | ms_nodev | ms_noexec,
        opts.encode(),
    )


def umount(target: Path) -> None:
    mnt_detach = 2
    try:
        _libc_call("umount2", os.fsencode(target), mnt_detach)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOENT):  # not mounted / gone: fine
            raise


def shares_mounts_with_dockerd() -> bool:
    """Whether a local dockerd runs in this process's mount namespace (so it sees our mounts)."""
    try:
        own = os.readlink("/proc/self/ns/mnt")
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry.name}/comm", encoding="ascii", errors="replace") as f:
                    if f.read().strip() != "dockerd":
                        continue
                return os.readlink(f"/proc/{entry.name}/ns/mnt") == own
    except OSError:
        pass
    return False
