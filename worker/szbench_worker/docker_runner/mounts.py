"""mount(2) and umount2(2) through libc, for the capped tmpfs at a run's ``/output``."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path
from typing import Any

from szbench_worker.docker_runner.client import engine_pid

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


def shares_mounts_with_engine(client: Any) -> bool:
    """Whether the engine behind ``client`` runs in this process's mount namespace, so that
    a tmpfs this process mounts is what the engine bind-mounts into a container.

    The engine is the process answering on ``DOCKER_HOST`` (:func:`.client.engine_pid`),
    whatever other engines run on the host. False when that cannot be shown (an engine over
    TCP, outside this pid namespace, or a namespace this process may not read).
    """
    pid = engine_pid(client)
    if pid is None:
        return False
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False
