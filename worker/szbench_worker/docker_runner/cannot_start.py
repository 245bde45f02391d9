"""Images that cannot start in the sandbox: which refusals are the image's doing (an outcome
with a fixed text for the submitter) and which are the engine's (an infrastructure fault)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any

from szbench.algorithms.image_config import nul_field
from szbench_worker.docker_runner.sandbox import (
    is_inside,
)

# --- images that cannot start ------------------------------------------------------------

#: What the submitter reads when their image cannot start, by cause. Fixed texts: the
#: engine's refusal quotes host paths and could echo anything the image names, so it goes
#: to the admin log only.
CANNOT_START_MESSAGES = {
    "command": "The container could not start: the image has neither an ENTRYPOINT nor a CMD.",
    "entrypoint": (
        "The container could not start: the image's ENTRYPOINT or CMD names a program that is "
        "missing from the image or cannot be executed."
    ),
    "user": (
        "The container could not start: the image's USER names an account or group that the "
        "image's /etc/passwd or /etc/group lacks."
    ),
    "workdir": (
        "The container could not start: the image's WORKDIR cannot be entered (it must be an "
        "ordinary folder of the image, outside /proc, /sys and /dev)."
    ),
    "mount": (
        "The container could not start: a folder the sandbox mounts (/data, /output, /tmp or "
        "one of the image's VOLUME paths) is a file, a symbolic link or read-only in the image."
    ),
    "nul": (
        "The container could not start: a field of the image's configuration (its WORKDIR, "
        "ENTRYPOINT, CMD, ENV, USER or a label) holds a NUL character."
    ),
}

# Engine and runc wording (checked against Docker 20.10 with runc 1.1, and the runc 1.1.12+
# wording for a working directory outside the container). Only refusals that the image's
# own configuration or file system explains are the submitter's; everything else (an engine
# or runtime in trouble, a host path gone) stays an infrastructure fault and is retried.
# Only runc's words for the container's own process: the engine's own helpers (a shim, runc
# itself) missing from the host's PATH read "exec: ..." too, without this prefix.
_EXEC_FAILED = re.compile(r'unable to start container process: exec: "')
_NO_ACCOUNT = re.compile(
    r"unable to find (?:user|group) |no matching entries in (?:passwd|group) file|"
    r"no users found|no groups found"
)
_BAD_CWD = re.compile(
    r"chdir to cwd|current working directory is outside of container mount namespace root"
)
_MOUNT_FAILED = re.compile(r'error mounting "[^"]*" to rootfs at "(?P<target>[^"]*)"')
# Why runc cannot mount at a path the image's file system decides; an engine's own trouble
# (out of memory, no space, a busy device) reads otherwise.
_LAYOUT_ERRORS = (
    "read-only file system",
    "not a directory",
    "too many levels of symbolic links",
    "file exists",
    "possibly malicious path",
    "is a symlink",
)


def config_refusal(config: dict[str, Any]) -> tuple[str, str] | None:
    """``(cause, admin detail)`` when an image's configuration alone shows that it cannot
    start in the sandbox, before any container exists; ``None`` otherwise.

    Examples
    --------
    >>> config_refusal({"Cmd": [], "Entrypoint": None})[0]
    'command'
    >>> config_refusal({"Cmd": ["python3"], "WorkingDir": "/proc/self/fd/7"})[0]
    'workdir'
    >>> config_refusal({"Cmd": ["python3"], "WorkingDir": "/app\\x00x"})[0]
    'nul'
    >>> config_refusal({"Cmd": ["python3"], "WorkingDir": "/app"}) is None
    True
    """
    field = nul_field(config)
    if field is not None:
        # The engine would quote it back in its refusal (or runc cut a path at it): refused
        # before any container, as the upload check refuses it (images given by reference,
        # or accepted before that check).
        return "nul", f"the image's Config.{field} holds a NUL character"
    command = [*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ())]
    if not any(command):
        return "command", "the image configures neither Entrypoint nor Cmd"
    workdir = config.get("WorkingDir") or ""
    if workdir.startswith("/"):
        cleaned = "/" + posixpath.normpath(workdir).lstrip("/")
        if any(is_inside(cleaned, top) for top in ("/proc", "/sys", "/dev")):
            return "workdir", f"WorkingDir {workdir!r} is inside a runtime file system"
    return None


def cannot_start_cause(
    explanation: str, *, image_paths: Iterable[str], own_user: bool
) -> str | None:
    """The key of :data:`CANNOT_START_MESSAGES` that the engine's refusal to create or start
    a container points to, or ``None`` when the refusal is not the image's doing.

    ``image_paths``: mount targets whose failure only the image's file system explains (its
    ``VOLUME`` tmpfs paths, ``/tmp``, ``/data``, ``/output``). ``own_user``: the container
    runs as the image's ``USER`` (an operator's ``SZBENCH_RUNNER_USER`` that the image lacks
    is the operator's fault).

    Examples
    --------
    >>> cannot_start_cause("unable to find user algo: no matching entries in passwd file",
    ...                    image_paths=(), own_user=True)
    'user'
    >>> cannot_start_cause("failed to create task: cgroup: no space left on device",
    ...                    image_paths=(), own_user=True) is None
    True
    """
    if "No command specified" in explanation:
        return "command"
    if _EXEC_FAILED.search(explanation):
        return "entrypoint"
    if _NO_ACCOUNT.search(explanation):
        return "user" if own_user else None
    if _BAD_CWD.search(explanation):
        return "workdir"
    mount = _MOUNT_FAILED.search(explanation)
    if mount is not None:
        target = "/" + posixpath.normpath(mount["target"]).lstrip("/")
        tail = explanation[mount.end() :].lower()
        if target in set(image_paths) and any(e in tail for e in _LAYOUT_ERRORS):
            return "mount"
    return None
