"""The sandboxed runner: one fresh Docker container per recording.

The only module of the project that imports the docker SDK. What a run looks like (the
SzCORE contract plus the platform's sandbox; ``docs/algorithm-contract.md`` explains each):

- a per-run staging directory ``<work_dir>/run-<owner>-<random>/`` holding ``data/`` (just
  this recording, hard-linked or copied, never the dataset folder) and ``output/``;
- ``data/`` mounted read-only at ``/data``; ``output/`` mounted at ``/output``. When the
  worker can mount (it runs as root), ``output/`` is a tmpfs of ``output_bytes`` and
  ``output_files`` inodes owned by the container's (possibly user-namespace-remapped) uid, so a
  container cannot fill the host disk; otherwise it is a plain directory and a watchdog kills
  a run whose output passes either cap, counting allocated blocks (:func:`output_usage`), and
  what the worker may not delete there is purged as its owner (:func:`purge_output`);
- ``--network none``, read-only root, a bounded tmpfs ``/tmp``, ``--cap-drop ALL``,
  ``no-new-privileges``, a pids limit, memory == memory+swap, a CPU quota, an optional user,
  a size-capped json-file log, GPUs only through an explicit device request;
- a tmpfs as bounded as ``/tmp`` at each path the image declares as a ``VOLUME``: without a
  mount of its own there, the engine would put a writable anonymous volume on the host's
  disk at each such path, outside every limit (:func:`scratch_paths`);
- a wall-clock timeout after which the container is killed; the container (with any
  anonymous volume, ``v=True``) and the staging directory are removed on every path.
  Containers carry labels naming their owning worker process, so :func:`cleanup_orphans`
  can remove what a killed worker left behind.

A cold shutdown (Celery's SIGQUIT) or a Ctrl-C raises from a signal handler, at whatever
line the worker is on: between the engine creating a container and :meth:`DockerRunner.run`
holding it, inside ``Thread.start()`` before the watchdog has run, or inside the cleanup
itself. Each container is therefore named after its staging directory before it exists
(the cleanup removes it by name, created or not, before anything else), the watchdog's
stop copes with a thread that never ran, and :meth:`DockerRunner.remove_leftovers`, called
once the exception has unwound the run, removes whatever this process's runs still left.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from szbench.algorithms.image_check import ArchiveLimits, check_image_archive
from szbench.errors import SzbenchError
from szbench_worker.runner import (
    CONTAINER_DATA_DIR,
    CONTAINER_OUTPUT_DIR,
    ImageError,
    ImageRefused,
    Limits,
    Outcome,
    RunnerError,
    RunResult,
    bounded,
    check_output,
    crashed_message,
    describe_gpus,
    edf_duration_s,
    oom_message,
    output_name_for,
    output_too_big_message,
    timeout_message,
    worker_host,
)

log = logging.getLogger(__name__)

LABEL_RUNNER = "org.szbench.runner"
LABEL_HOST = "org.szbench.worker-host"
LABEL_OWNER = "org.szbench.owner"

_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


# --- the docker client -------------------------------------------------------------------


def connect(timeout_s: float = 60.0) -> docker.DockerClient:
    """A client for the engine in ``DOCKER_HOST`` (default: the local socket), checked alive.

    Raises
    ------
    RunnerError
        If no engine answers (start one with ``scripts/test-services.sh``).
    """
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise RunnerError(f"no Docker engine reachable ({exc})") from exc
    return client


def engine_available() -> bool:
    """Whether a Docker engine answers (the embedded demo falls back to a local process)."""
    try:
        connect(timeout_s=5).close()
    except RunnerError:
        return False
    return True


# --- images ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageInfo:
    """A loaded image. ``digest`` is the image id (``sha256:`` of its config), the same on
    every engine whether it was loaded from a tarball or pulled; ``repo_digests`` are the
    registry manifest digests, when it came from a registry."""

    digest: str
    tags: tuple[str, ...]
    repo_digests: tuple[str, ...]


def _info(image: Any) -> ImageInfo:
    return ImageInfo(
        digest=image.id,
        tags=tuple(image.tags),
        repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
    )


def load_image_tarball(
    path: Path, client: docker.DockerClient | None = None, *, limits: ArchiveLimits | None = None
) -> ImageInfo:
    """Load a ``docker save`` tarball (``.tar``, ``.tar.gz``; streamed from disk).

    With ``limits``, the archive is read and counted first and nothing reaches the engine
    when it is over one (the engine would expand it all to disk before anyone could look).

    Raises
    ------
    ImageRefused
        If the archive is over one of ``limits`` or malformed (the submitter's fault).
    ImageError
        If the file is not an image archive or holds other than exactly one image. The
        message names the file by its base name only.
    """
    client = client or connect()
    if not path.is_file():
        raise ImageError(f"{path.name}: no such image tarball")
    if limits is not None:
        try:
            # Root or not is the platform's decision at upload, not a loading matter.
            check_image_archive(path, allow_root=True, limits=limits)
        except SzbenchError as exc:
            raise ImageRefused(f"{path.name}: {exc.detail}") from exc
    try:
        with open(path, "rb") as f:
            # A file object makes requests stream the body: a multi-GB image never sits in RAM.
            images = client.images.load(f)
    except (APIError, DockerException) as exc:
        log.warning("loading %s failed: %s", path, exc)
        raise ImageError(
            f"{path.name}: not a loadable image archive (expected `docker save` output, "
            ".tar or .tar.gz)"
        ) from exc
    unique = {img.id: img for img in images}
    if len(unique) != 1:
        raise ImageError(f"{path.name}: holds {len(unique)} images; upload exactly one")
    return _info(next(iter(unique.values())))


def pull_image(reference: str, client: docker.DockerClient | None = None) -> ImageInfo:
    """Pull ``repo@sha256:...`` (a digest reference only: tags can change under a result).

    Raises
    ------
    ImageError
        If the reference is not pinned by digest, or the pull fails.
    """
    if not _DIGEST_REF.match(reference):
        raise ImageError(f"{reference!r}: pull images by digest (name@sha256:<64 hex>)")
    client = client or connect()
    try:
        image = client.images.pull(reference)
    except (APIError, DockerException) as exc:
        log.warning("pulling %s failed: %s", reference, exc)
        raise ImageError(
            f"{reference}: the pull failed ({getattr(exc, 'explanation', '') or exc})"
        ) from exc
    info = _info(image)
    wanted = reference.rsplit("@", 1)[1]
    if not any(d.endswith("@" + wanted) for d in info.repo_digests):
        raise ImageError(f"{reference}: the registry served another manifest")
    return info


def inspect_image(reference: str, client: docker.DockerClient | None = None) -> ImageInfo:
    """The image already on this engine under ``reference`` (tag, id or digest reference)."""
    client = client or connect()
    try:
        return _info(client.images.get(reference))
    except ImageNotFound:
        raise ImageError(f"{reference}: image not present on this worker") from None
    except (APIError, requests.RequestException) as exc:
        raise RunnerError(f"inspecting {reference} failed: {exc}") from exc


def build_image(
    context_dir: Path, tag: str, client: docker.DockerClient | None = None
) -> ImageInfo:
    """Build ``context_dir``'s Dockerfile offline (no pull: its base must be local)."""
    client = client or connect()
    try:
        image, _ = client.images.build(path=str(context_dir), tag=tag, rm=True, pull=False)
    except (APIError, DockerException) as exc:
        raise ImageError(f"building {context_dir.name} failed: {exc}") from exc
    return _info(image)


# --- building the container's configuration (pure; unit-tested) --------------------------


def device_requests(gpus: tuple[str, ...]) -> list[DeviceRequest]:
    """Exactly the worker's assigned GPUs (``--gpus device=ID,...``); none for a CPU run."""
    if not gpus:
        return []
    return [DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


#: Paths the kernel and the engine mount in every container: no image volume may go there.
_RUNTIME_PATHS = ("/proc", "/sys", "/dev", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
_TMP_DIR = "/tmp"  # noqa: S108 (the container's /tmp)


class VolumeRefused(ValueError):
    """An image ``VOLUME`` the sandbox cannot mount. The message is submitter-safe."""


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _refusal(path: str) -> str | None:
    """Why a cleaned absolute ``VOLUME`` path cannot be mounted; ``None`` when it can."""
    if path == "/":
        return "the root of the file system"
    if path != CONTAINER_DATA_DIR and _inside(path, CONTAINER_DATA_DIR):
        return f"inside {CONTAINER_DATA_DIR}, where the platform mounts the recording read-only"
    if path != CONTAINER_OUTPUT_DIR and _inside(path, CONTAINER_OUTPUT_DIR):
        return f"inside {CONTAINER_OUTPUT_DIR}, where the platform collects the output"
    if any(_inside(path, top) for top in _RUNTIME_PATHS):
        return "where the container runtime mounts its own files"
    return None


def scratch_paths(declared: Iterable[str]) -> tuple[str, ...]:
    """Where the sandbox mounts a scratch tmpfs for an image's ``VOLUME`` paths.

    ``declared`` is the image's ``Config.Volumes``. The engine gives every such path that has
    no mount of its own a writable anonymous volume on the host's disk, outside every size
    limit and left behind unless the container is removed with it; a tmpfs at the path (as
    bounded as ``/tmp``) is such a mount. Paths are cleaned as the engine cleans them
    (``/scratch/`` is ``/scratch``). ``/data``, ``/output`` and ``/tmp`` themselves need
    nothing: the platform mounts them already.

    Raises
    ------
    VolumeRefused
        For a path the contract or the runtime owns (inside ``/data`` or ``/output``, under
        ``/proc``, ``/sys`` or ``/dev``, ``/``, Docker's ``/etc/hosts`` files) and for a
        relative one (the engine refuses a relative mount point).

    Examples
    --------
    >>> scratch_paths(["/scratch/", "/data", "/tmp", "/home/app/.cache"])
    ('/home/app/.cache', '/scratch')
    >>> scratch_paths(["/data/cache"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    szbench_worker.docker_runner.VolumeRefused: The image declares VOLUME '/data/cache', ...
    """
    paths: set[str] = set()
    for raw in declared:
        if raw.startswith("/"):
            # The engine's filepath.Clean: a leading "//" is "/" there, unlike in posixpath.
            path = "/" + posixpath.normpath(raw).lstrip("/")
            reason = _refusal(path)
        else:
            path, reason = raw, "which is not an absolute path"
        if reason is not None:
            shown = repr(raw if len(raw) <= 100 else raw[:97] + "...")
            raise VolumeRefused(
                f"The image declares VOLUME {shown}, {reason}. Remove it from the image."
            )
        if path not in (CONTAINER_DATA_DIR, CONTAINER_OUTPUT_DIR, _TMP_DIR):
            paths.add(path)
    return tuple(sorted(paths))


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
    >>> config_refusal({"Cmd": ["python3"], "WorkingDir": "/app"}) is None
    True
    """
    command = [*(config.get("Entrypoint") or ()), *(config.get("Cmd") or ())]
    if not any(command):
        return "command", "the image configures neither Entrypoint nor Cmd"
    workdir = config.get("WorkingDir") or ""
    if workdir.startswith("/"):
        cleaned = "/" + posixpath.normpath(workdir).lstrip("/")
        if any(_inside(cleaned, top) for top in ("/proc", "/sys", "/dev")):
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


def container_config(
    *,
    image_id: str,
    data_dir: Path,
    output_dir: Path,
    input_name: str,
    output_name: str,
    limits: Limits,
    gpus: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    name: str | None = None,
    scratch: tuple[str, ...] = (),
    scratch_owner: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create``: the whole sandbox in one place.

    ``scratch``: the image's ``VOLUME`` paths (:func:`scratch_paths`), each a tmpfs like
    ``/tmp``, owned by ``scratch_owner`` (the container's ``uid, gid``) when it is known.
    """
    # Each tmpfs is capped on its own, and all of them count against the memory limit (the
    # kernel charges tmpfs pages to the container that writes them): however many volumes an
    # image declares, it gets no more of the host than its memory limit.
    tmpfs = f"rw,nosuid,nodev,size={limits.tmpfs_bytes},mode=1777"
    # runc gives a tmpfs the mode of the folder it covers in the image, and root as owner: a
    # folder the image made for its own user would otherwise become unwritable to it.
    owned = tmpfs
    if scratch_owner is not None:
        owned += f",uid={scratch_owner[0]},gid={scratch_owner[1]}"
    return {
        "image": image_id,
        "name": name,
        "environment": {"INPUT": input_name, "OUTPUT": output_name},
        "mounts": [
            Mount(target=CONTAINER_DATA_DIR, source=str(data_dir), type="bind", read_only=True),
            Mount(
                target=CONTAINER_OUTPUT_DIR, source=str(output_dir), type="bind", read_only=False
            ),
        ],
        "network_mode": "bridge" if limits.network else "none",
        "read_only": True,
        "tmpfs": {_TMP_DIR: tmpfs, **dict.fromkeys(scratch, owned)},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": limits.pids,
        "mem_limit": limits.memory_bytes,
        # Equal to mem_limit: no swap, so the limit is real and an OOM kill is visible.
        "memswap_limit": limits.memory_bytes,
        "nano_cpus": int(limits.cpus * 1e9),
        "user": limits.user or "",
        "ulimits": [
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=4096, hard=4096),
        ],
        "log_config": LogConfig(
            type=LogConfig.types.JSON,
            # One file capped at log_bytes: docker itself bounds what a chatty container
            # costs on disk; we keep the tail, where the error usually is.
            config={"max-size": str(limits.log_bytes), "max-file": "1", "compress": "false"},
        ),
        "device_requests": device_requests(gpus),
        "labels": labels or {},
        "detach": True,
    }


# --- staging: the per-run directory ------------------------------------------------------


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


def _host_tag(host: str) -> str:
    """``host`` made safe for a directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", host)[:64]


def _owner_alive(token: str) -> bool:
    pid_s, _, ticks = token.partition(".")
    if not pid_s.isdigit():
        return False
    return _proc_start_ticks(int(pid_s)) == ticks


_libc: Any = None


def _libc_call(name: str, *args: Any) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount_tmpfs(
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


def _umount(target: Path) -> None:
    mnt_detach = 2
    try:
        _libc_call("umount2", os.fsencode(target), mnt_detach)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOENT):  # not mounted / gone: fine
            raise


def _shares_mounts_with_dockerd() -> bool:
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


def _output_ok(path: Path, limits: Limits) -> bool:
    cap = OutputUsage(limits.output_bytes, limits.output_files)
    usage = output_usage(path, stop_above=cap)
    return usage is not None and usage.bytes <= cap.bytes and usage.files <= cap.files


def container_name(run_dir: Path) -> str:
    """The run container's name: its staging directory's (unique on this host), prefixed."""
    return f"szbench-{run_dir.name}"


def _stage_recording(recording: Path, data_dir: Path) -> Path:
    """Put the one recording into ``data_dir``: a hard link when possible, else a copy."""
    target = data_dir / recording.name
    st = recording.stat()
    if st.st_mode & 0o004:  # world-readable: a (possibly remapped) container uid can read a link
        try:
            os.link(recording, target)
            return target
        except OSError:
            pass
    shutil.copyfile(recording, target)
    os.chmod(target, 0o444)
    return target


def _numeric_uid(user: str | None) -> tuple[int, int | None] | None:
    """The container uid/gid from ``uid[:gid]``; ``None`` for names (unknown on the host)."""
    if not user:
        return (0, 0)
    uid_s, _, gid_s = user.partition(":")
    if not uid_s.isdigit() or (gid_s and not gid_s.isdigit()):
        return None
    return int(uid_s), int(gid_s) if gid_s else None


#: A purge container only runs ``rm``: it needs no more than this.
_PURGE_MEMORY_BYTES = 64 * 1024**2
_PURGE_TIMEOUT_S = 120


def purge_output(
    client: docker.DockerClient,
    output: Path,
    *,
    image: str,
    userns: tuple[int, int] | None,
    name: str,
    labels: dict[str, str],
) -> None:
    """Empty ``output`` (a run's ``/output`` folder) as the uid that owns what is in it.

    A worker that is not root cannot delete what a container made in a folder that the
    container then closed (mode 0700, no write bit): the files stay on the host's disk after
    the run. The same uid in the same user namespace can, so a short-lived container of
    ``image`` runs ``rm -rf /output`` as each uid that owns an entry at the top of
    ``output`` (the worker can always list that: the folder is its own), sandboxed like a
    run. rm then fails on ``/output`` itself, a mount point, after emptying it.
    """
    base = (userns or (0, 0))[0]
    owners: set[int] = set()
    try:
        with os.scandir(output) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    owners.add(entry.stat(follow_symlinks=False).st_uid - base)
    except OSError:
        return
    for uid in sorted(u for u in owners if u >= 0):
        purger = f"{name}-purge-{uid}"
        try:
            container = client.containers.create(
                image=image,
                name=purger,
                entrypoint=["rm", "-rf", CONTAINER_OUTPUT_DIR],
                command=[],
                user=str(uid),
                mounts=[Mount(target=CONTAINER_OUTPUT_DIR, source=str(output), type="bind")],
                network_mode="none",
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=16,
                mem_limit=_PURGE_MEMORY_BYTES,
                memswap_limit=_PURGE_MEMORY_BYTES,
                labels=labels,
                detach=True,
            )
            container.start()
            container.wait(timeout=_PURGE_TIMEOUT_S)
        except (APIError, requests.RequestException) as exc:
            log.warning("could not purge %s as uid %s: %s", output, uid, exc)
        finally:
            with contextlib.suppress(APIError, NotFound, requests.RequestException):
                client.api.remove_container(purger, force=True, v=True)


# --- the runner --------------------------------------------------------------------------


class DockerRunner:
    """Runs algorithm images in a Docker engine, one fresh sandboxed container per recording.

    ``work_dir`` must be on the engine's host (it is bind-mounted). ``output_tmpfs``:
    ``None`` mounts a size-limited tmpfs at ``/output`` when this process may mount (root)
    and falls back to a plain directory plus a watchdog otherwise; ``True``/``False`` force it.
    """

    #: How often the watchdog samples peak memory (and /output size, without a tmpfs).
    poll_interval_s = 0.25

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        work_dir: Path,
        host: str | None = None,
        output_tmpfs: bool | None = None,
        helper_image: str | None = None,
    ) -> None:
        self.client = client or connect()
        self.helper_image = helper_image or None
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # Traversable (not listable) by a remapped container uid, which Docker needs for binds.
        with contextlib.suppress(PermissionError):  # not ours to change: the operator's setup
            os.chmod(self.work_dir, 0o711)  # noqa: S103
        self.host = host or worker_host()
        self._owner: tuple[int, str] | None = (os.getpid(), owner_token())
        if output_tmpfs is None:
            # Mounting needs root, and the mount must be visible to dockerd: a worker inside a
            # container has its own mount namespace, so there the plain directory is used.
            output_tmpfs = os.geteuid() == 0 and _shares_mounts_with_dockerd()
        self.output_tmpfs = output_tmpfs
        self._userns = _userns_base(self.client)

    @property
    def owner(self) -> str:
        """This process's owner token, computed in the process that runs (a runner built
        before a prefork pool forks must not label its children's containers as its own)."""
        if self._owner is None or self._owner[0] != os.getpid():
            if self._owner is not None:
                # Forked: pooled connections are shared with the parent; start afresh.
                self.client.close()
            self._owner = (os.getpid(), owner_token())
        return self._owner[1]

    @classmethod
    def from_settings(cls, settings: Any) -> DockerRunner:
        """A runner configured by ``SZBENCH_RUNNER_*`` (work dir default: data_dir/runs)."""
        work_dir = settings.runner_work_dir or Path(settings.data_dir) / "runs"
        return cls(
            work_dir=work_dir,
            output_tmpfs=settings.runner_output_tmpfs,
            helper_image=settings.runner_helper_image,
        )

    # The Runner protocol.
    def run(
        self,
        *,
        image: str,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...] = (),
        recording_duration_s: float | None = None,
    ) -> RunResult:
        """Run ``image`` on ``recording``; see the module docstring for the sandbox.

        Raises :class:`ImageError` when the image is not on this engine and
        :class:`RunnerError` for infrastructure faults; every algorithm behaviour (however
        hostile) ends in a :class:`RunResult`.
        """
        recording = Path(recording)
        owner = self.owner  # first, so that a forked process drops its parent's connections
        try:
            image_obj = self.client.images.get(image)
        except ImageNotFound:
            raise ImageError(f"{image}: image not present on this worker") from None
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"inspecting {image} failed: {exc}") from exc
        if recording_duration_s is None:
            try:
                recording_duration_s = edf_duration_s(recording)
            except (OSError, ValueError) as exc:
                raise RunnerError(f"cannot stage recording {recording}: {exc}") from exc
        output_name = output_name_for(recording)
        try:
            scratch = scratch_paths((image_obj.attrs.get("Config") or {}).get("Volumes") or ())
        except VolumeRefused as exc:
            # The image's own configuration, the same on every run: the submitter's to fix
            # (the smoke test shows it), never retried as a platform fault.
            return self._refused(image_obj, recording, gpus, str(exc))
        refusal = config_refusal(image_obj.attrs.get("Config") or {})
        if refusal is not None:
            cause, detail = refusal
            return self._refused(
                image_obj, recording, gpus, CANNOT_START_MESSAGES[cause], detail=detail
            )
        run_dir = Path(
            tempfile.mkdtemp(prefix=f"run-{_host_tag(self.host)}-{owner}-", dir=self.work_dir)
        )
        try:
            return self._run_staged(
                image_obj,
                recording,
                output_dir,
                limits,
                gpus,
                recording_duration_s,
                output_name,
                run_dir,
                scratch,
            )
        finally:
            if self.output_tmpfs:
                _umount(run_dir / "output")
            self._remove_staging(run_dir, image_obj.id)

    def _remove_staging(self, run_dir: Path, image_id: str | None) -> None:
        """Remove a run's staging directory, purging (:func:`purge_output`) what this
        process may not delete itself."""
        shutil.rmtree(run_dir, ignore_errors=True)
        helper = self.helper_image or image_id
        if run_dir.exists() and helper is not None and (run_dir / "output").is_dir():
            labels = {LABEL_RUNNER: "1", LABEL_HOST: self.host, LABEL_OWNER: self.owner}
            purge_output(
                self.client,
                run_dir / "output",
                image=helper,
                userns=self._userns,
                name=container_name(run_dir),
                labels=labels,
            )
            shutil.rmtree(run_dir, ignore_errors=True)
        if run_dir.exists():
            # Left for the next sweep (cleanup_orphans), which purges again.
            log.warning("could not remove all of the staging directory %s", run_dir)

    def _prepare_output(self, out: Path, limits: Limits, image_user: str) -> None:
        ids = _numeric_uid(limits.user if limits.user is not None else image_user)
        host_uid = host_gid = None
        if ids is not None:
            uid, gid = ids
            gid = uid if gid is None else gid
            base = self._userns or (0, 0)
            host_uid, host_gid = base[0] + uid, base[1] + gid
        out.mkdir()
        if self.output_tmpfs:
            try:
                # Slack of one page over the limit so "more than the limit" stays detectable.
                # The root folder is an inode too; one more keeps "too many" detectable.
                _mount_tmpfs(
                    out, limits.output_bytes + 4096, host_uid, host_gid, limits.output_files + 2
                )
                return
            except PermissionError:
                log.warning("cannot mount a tmpfs for /output; using a watched directory")
                self.output_tmpfs = False
        if host_uid is not None:
            try:
                if host_uid != os.geteuid():
                    os.chown(out, host_uid, host_gid)  # type: ignore[arg-type]
                os.chmod(out, 0o700)
                return
            except PermissionError:
                pass
        # Unknown or foreign uid and no right to chown: open to all, inside a 0711 parent
        # whose random name nobody else can list.
        os.chmod(out, 0o777)  # noqa: S103 (a remapped container uid must traverse or read it)

    def _run_staged(
        self,
        image_obj: Any,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...],
        recording_duration_s: float,
        output_name: str,
        run_dir: Path,
        scratch: tuple[str, ...],
    ) -> RunResult:
        os.chmod(run_dir, 0o711)  # noqa: S103 (a remapped container uid must traverse or read it)
        data = run_dir / "data"
        data.mkdir()
        os.chmod(data, 0o755)  # noqa: S103 (a remapped container uid must traverse or read it)
        try:
            _stage_recording(recording, data)
        except OSError as exc:
            raise RunnerError(f"cannot stage recording {recording}: {exc}") from exc
        out = run_dir / "output"
        image_user = (image_obj.attrs.get("Config") or {}).get("User") or ""
        try:
            self._prepare_output(out, limits, image_user)
        except OSError as exc:
            raise RunnerError(f"cannot prepare the output directory: {exc}") from exc

        name = container_name(run_dir)
        ids = _numeric_uid(limits.user if limits.user is not None else image_user)
        config = container_config(
            image_id=image_obj.id,
            data_dir=data,
            output_dir=out,
            input_name=recording.name,
            output_name=output_name,
            limits=limits,
            gpus=gpus,
            labels={LABEL_RUNNER: "1", LABEL_HOST: self.host, LABEL_OWNER: self.owner},
            # Known before the container exists: an exception raised between the engine
            # creating it and ``create`` returning (a cold shutdown's) still finds it below.
            name=name,
            scratch=scratch,
            scratch_owner=None if ids is None else (ids[0], ids[0] if ids[1] is None else ids[1]),
        )
        container = None
        watchdog = _Watchdog(out if not self.output_tmpfs else None, limits, self.poll_interval_s)
        # Mount targets whose failure only the image's own file system explains.
        image_paths = (*scratch, _TMP_DIR, CONTAINER_DATA_DIR, CONTAINER_OUTPUT_DIR)
        own_user = not limits.user
        try:
            try:
                container = self.client.containers.create(**config)
            except APIError as exc:
                cause = cannot_start_cause(
                    str(exc.explanation or ""), image_paths=image_paths, own_user=own_user
                )
                if cause is None:
                    raise RunnerError(f"creating the container failed: {exc}") from exc
                return self._refused(
                    image_obj, recording, gpus, CANNOT_START_MESSAGES[cause], detail=str(exc)
                )
            watchdog.container = container
            started = time.monotonic()
            try:
                container.start()
            except APIError as exc:
                # The same image fails the same way on every host and every retry: the
                # submitter's to fix, so an outcome and never an infrastructure retry.
                cause = cannot_start_cause(
                    str(exc.explanation or ""), image_paths=image_paths, own_user=own_user
                )
                if cause is None:
                    raise RunnerError(f"starting the container failed: {exc}") from exc
                return self._refused(
                    image_obj, recording, gpus, CANNOT_START_MESSAGES[cause], detail=str(exc)
                )
            watchdog.start()
            timed_out = False
            try:
                status = container.wait(timeout=limits.timeout_s)
                exit_code: int | None = int(status.get("StatusCode", -1))
            except requests.RequestException:
                if time.monotonic() - started < limits.timeout_s:
                    raise RunnerError(
                        "lost the Docker engine while waiting for the container"
                    ) from None
                timed_out = True
                with contextlib.suppress(APIError, NotFound):
                    container.kill()
                exit_code = None
                with contextlib.suppress(requests.RequestException, APIError):
                    exit_code = int(container.wait(timeout=30).get("StatusCode", -1))
            duration_s = time.monotonic() - started
            watchdog.stop()
            container.reload()
            state = container.attrs.get("State") or {}
            logs = self._logs(container, limits)
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"Docker engine error during the run: {exc}") from exc
        finally:
            # Removal first: an exception raised into this block (a cold shutdown's) skips
            # what follows it; remove_leftovers() sweeps up after one that lands here.
            self._remove_container(name)
            watchdog.stop()

        result = RunResult(
            outcome=Outcome.OK,
            exit_code=exit_code,
            duration_s=duration_s,
            peak_memory_bytes=watchdog.peak_memory_bytes,
            submitter_message="",
            admin_log="",
            output_tsv=None,
            annotations=None,
            image_digest=image_obj.id,
            worker_host=self.host,
            gpu=describe_gpus(gpus),
        )
        if timed_out:
            result.outcome = Outcome.TIMEOUT
            result.submitter_message = timeout_message(limits)
        elif state.get("OOMKilled") and exit_code != 0:
            result.outcome = Outcome.OUT_OF_MEMORY
            result.submitter_message = oom_message(limits)
        elif watchdog.output_exceeded or not _output_ok(out, limits):
            result.outcome = Outcome.INVALID_OUTPUT
            result.submitter_message = output_too_big_message(limits)
        elif exit_code != 0:
            result.outcome = Outcome.CRASHED
            result.submitter_message = crashed_message(exit_code)
        else:
            tsv = out / output_name
            copied: Path | None = None
            if tsv.is_file() and not tsv.is_symlink():
                output_dir.mkdir(parents=True, exist_ok=True)
                copied = output_dir / output_name
                try:
                    shutil.copyfile(tsv, copied)
                except OSError:  # e.g. mode 0600 for a foreign uid: the check below says so
                    copied.unlink(missing_ok=True)
                    copied = None
            check = check_output(
                copied if copied is not None else tsv,
                contract_name=output_name,
                recording_duration_s=recording_duration_s,
                hide=(run_dir, self.work_dir, output_dir, recording.parent),
            )
            result.outcome = check.outcome
            result.submitter_message = check.message if check.outcome is not Outcome.OK else "ok"
            if check.outcome is Outcome.OK:
                result.output_tsv = copied
                result.annotations = check.annotations
            elif copied is not None:
                copied.unlink(missing_ok=True)
        result.admin_log = bounded(
            "\n".join(
                [
                    f"outcome: {result.outcome.value}  exit code: {exit_code}  "
                    f"duration: {duration_s:.2f} s  oom_killed: {state.get('OOMKilled')}  "
                    f"peak memory: {watchdog.peak_memory_bytes}",
                    f"image: {image_obj.id}  recording: {recording}",
                    f"host: {self.host}  gpus: {gpus}",
                    f"message: {result.submitter_message}",
                    "--- container log (tail) ---",
                    logs,
                ]
            ),
            limits.log_bytes + 4096,
        )
        log.info(
            "run %s on %s: %s (exit %s, %.2f s)",
            image_obj.id[:19],
            recording.name,
            result.outcome,
            exit_code,
            duration_s,
        )
        return result

    def _refused(
        self,
        image_obj: Any,
        recording: Path,
        gpus: tuple[str, ...],
        message: str,
        *,
        detail: str = "",
    ) -> RunResult:
        """The result of an image that cannot run in the sandbox (no process of it ran).

        ``message`` is the submitter's; ``detail`` (the engine's own words) only the admin's.
        """
        log.info("run %s on %s refused: %s %s", image_obj.id[:19], recording.name, message, detail)
        return RunResult(
            outcome=Outcome.CRASHED,
            exit_code=None,
            duration_s=0.0,
            peak_memory_bytes=None,
            submitter_message=message,
            admin_log=(
                f"outcome: {Outcome.CRASHED.value}  (not started: the image cannot run here)\n"
                f"image: {image_obj.id}  recording: {recording}\n"
                f"host: {self.host}  gpus: {gpus}\n"
                f"message: {message}" + (f"\ndetail: {detail[-4000:]}" if detail else "")
            ),
            output_tsv=None,
            annotations=None,
            image_digest=image_obj.id,
            worker_host=self.host,
            gpu=describe_gpus(gpus),
        )

    def _remove_container(self, name: str) -> None:
        try:
            # v=True: with any anonymous volume the engine made for it (an image VOLUME that
            # slipped past scratch_paths), or every such run would leave one on the host.
            self.client.api.remove_container(name, force=True, v=True)
        except NotFound:
            pass  # never created (or already gone)
        except (APIError, requests.RequestException) as exc:
            # Left for remove_leftovers() or the next worker's start-up sweep.
            log.warning("could not remove the run container %s: %s", name, exc)

    def remove_leftovers(self) -> int:
        """Remove every container and staging directory this process's runs left behind.

        For a worker whose run was interrupted (a cold shutdown raises into the run, possibly
        in the middle of its cleanup): call it once the exception has unwound the run, and
        never while this process has a run in progress. Returns the containers removed.
        """
        return cleanup_orphans(
            self.client,
            work_dir=self.work_dir,
            host=self.host,
            owner=self.owner,
            helper_image=self.helper_image or "",
        )

    def _logs(self, container: Any, limits: Limits) -> str:
        try:
            raw: bytes = container.logs(stdout=True, stderr=True)
        except (APIError, requests.RequestException) as exc:
            return f"[logs unavailable: {exc}]"
        # The json-file driver already caps the file; cap again in case the engine does not.
        raw = raw[-limits.log_bytes :]
        return raw.decode("utf-8", errors="replace")


class _Watchdog:
    """Samples the container's peak memory, and (without a tmpfs) the size of /output."""

    def __init__(self, output_dir: Path | None, limits: Limits, interval_s: float) -> None:
        self.output_dir = output_dir
        self.limits = limits
        self.interval_s = interval_s
        self.container: Any = None
        self.peak_memory_bytes: int | None = None
        self.output_exceeded = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="szbench-run-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        # A cold shutdown can raise inside Thread.start(), before the thread has run: such a
        # thread cannot be joined (RuntimeError), and once it runs it sees _stop and ends.
        if thread.is_alive():
            thread.join()
        self._thread = None

    def _loop(self) -> None:
        files = _cgroup_peak_files(self.container.id)
        while True:
            for f in files:
                with contextlib.suppress(OSError, ValueError):
                    value = int(Path(f).read_text())
                    self.peak_memory_bytes = max(self.peak_memory_bytes or 0, value)
                    break
            if (
                self.output_dir is not None
                and not self.output_exceeded
                and not _output_ok(self.output_dir, self.limits)
            ):
                self.output_exceeded = True
                with contextlib.suppress(Exception):
                    self.container.kill()
            if self._stop.wait(self.interval_s):
                return


def _cgroup_peak_files(container_id: str) -> list[str]:
    return [
        f"/sys/fs/cgroup/memory/docker/{container_id}/memory.max_usage_in_bytes",  # v1, cgroupfs
        f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope/memory.max_usage_in_bytes",
        f"/sys/fs/cgroup/docker/{container_id}/memory.peak",  # v2, cgroupfs driver
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.peak",  # v2, systemd
    ]


def _userns_base(client: docker.DockerClient) -> tuple[int, int] | None:
    """``(uid, gid)`` that container root maps to under ``--userns-remap``; None without it."""
    try:
        info = client.info()
    except (APIError, requests.RequestException) as exc:
        raise RunnerError(f"docker info failed: {exc}") from exc
    if not any("userns" in opt for opt in info.get("SecurityOptions") or ()):
        return None
    # dockerd keeps a remapped engine's state in <data-root>/<uid>.<gid>.
    m = re.search(r"/(\d+)\.(\d+)/?$", info.get("DockerRootDir") or "")
    if m is None:
        raise RunnerError("user-namespace remapping is on but its uid base is unknown")
    return int(m.group(1)), int(m.group(2))


# --- orphans of a killed worker ----------------------------------------------------------


def cleanup_orphans(
    client: docker.DockerClient | None = None,
    *,
    work_dir: Path | None = None,
    host: str | None = None,
    everything: bool = False,
    owner: str | None = None,
    helper_image: str | None = None,
) -> int:
    """Remove run containers (and staging dirs) whose worker process is gone.

    Call it when a worker starts. Only containers labelled for this ``host`` are considered;
    with ``everything`` the live ones go too (for an operator's cleanup); with ``owner`` (an
    :func:`owner_token`) exactly that process's, alive or not (a worker's own leftovers,
    :meth:`DockerRunner.remove_leftovers`). What this process may not delete in a staging
    directory is purged with ``helper_image`` (:func:`purge_output`; default
    ``SZBENCH_RUNNER_HELPER_IMAGE``, none when that is empty). Returns the number of
    containers removed.
    """
    client = client or connect()
    host = host or worker_host()
    removed = 0
    if helper_image is None:
        from szbench.config import get_settings

        helper_image = get_settings().runner_helper_image
    helper = helper_image or None

    def ours(token: str) -> bool:
        if owner is not None:
            return token == owner
        return everything or not _owner_alive(token)

    # ignore_removed: a live worker may remove its container between the listing and the
    # inspection the SDK does for each one.
    listed = client.containers.list(
        all=True, filters={"label": f"{LABEL_HOST}={host}"}, ignore_removed=True
    )
    for container in listed:
        labels = container.labels or {}
        if LABEL_RUNNER not in labels:
            continue
        if ours(labels.get(LABEL_OWNER, "")):
            try:
                container.remove(force=True, v=True)  # and its anonymous volumes
                removed += 1
            except NotFound:
                pass
            except APIError as exc:
                log.warning("could not remove the run container %s: %s", container.name, exc)
    if work_dir is not None and Path(work_dir).is_dir():
        for entry in Path(work_dir).iterdir():
            # Workers on other hosts (or in other containers) may share this directory: only
            # this host's staging directories are ours to judge.
            m = re.fullmatch(r"run-(.+)-(\d+\.\d+)-[a-z0-9_]+", entry.name)
            if not (m and m.group(1) == _host_tag(host) and entry.is_dir()):
                continue
            if ours(m.group(2)):
                with contextlib.suppress(OSError):
                    _umount(entry / "output")
                shutil.rmtree(entry, ignore_errors=True)
                if entry.exists() and helper and (entry / "output").is_dir():
                    purge_output(
                        client,
                        entry / "output",
                        image=helper,
                        userns=_userns_base(client),
                        name=container_name(entry),
                        labels={LABEL_RUNNER: "1", LABEL_HOST: host, LABEL_OWNER: owner_token()},
                    )
                    shutil.rmtree(entry, ignore_errors=True)
    if removed:
        log.warning("removed %d orphaned run container(s)", removed)
    return removed
