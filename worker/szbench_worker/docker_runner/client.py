"""The connection to the Docker engine, and the facts about it that runs depend on."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import struct

import docker
import requests
from docker.errors import APIError, DockerException

from szbench_worker.runner import (
    RunnerError,
)

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


def userns_base(client: docker.DockerClient) -> tuple[int, int] | None:
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


def cpuset_supported(client: docker.DockerClient) -> bool:
    """Whether the engine can pin a container to cores (``--cpuset-cpus``)."""
    try:
        return bool(client.info().get("CPUSet"))
    except (APIError, requests.RequestException) as exc:
        raise RunnerError(f"docker info failed: {exc}") from exc


# --- which process the engine is ---------------------------------------------------------


def unix_socket_path(client: docker.DockerClient) -> str | None:
    """The unix socket ``client`` talks to (``DOCKER_HOST=unix://...``, the default); None
    for an engine over TCP or SSH."""
    adapter = client.api.get_adapter(client.api.base_url)
    path = getattr(adapter, "socket_path", None)
    return path if isinstance(path, str) and path else None


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm", encoding="ascii", errors="replace") as f:
        return f.read().strip()


def _peer_pid(path: str) -> int | None:
    """The pid (in this pid namespace) of the process that listens on the unix socket
    ``path``, from a connection's peer credentials (SO_PEERCRED); None when it is unknown
    (no such socket, or the peer is outside this pid namespace: the kernel says 0)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(path)
            cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    pid = struct.unpack("3i", cred)[0]
    return pid if pid > 0 else None


def _listening_inodes(path: str) -> set[str]:
    """Inodes of the listening unix sockets bound at ``path`` (``/proc/net/unix``)."""
    accepting = 0x00010000  # __SO_ACCEPTCON: a listening socket, not an accepted one
    found = set()
    with contextlib.suppress(OSError), open("/proc/net/unix", encoding="ascii") as f:
        next(f, None)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and int(fields[3], 16) & accepting:
                found.add(fields[6])
    return found


def _holders(inodes: set[str]) -> list[int]:
    """Processes that hold one of the sockets ``inodes`` open."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd.path) in wanted for fd in os.scandir(f"{entry.path}/fd")):
                pids.append(int(entry.name))
    return pids


def engine_pid(client: docker.DockerClient) -> int | None:
    """The process id of the engine behind ``client``, in this process's pid namespace.

    The engine is the process that answers on ``DOCKER_HOST``'s unix socket: the peer of a
    connection to it (its credentials, SO_PEERCRED), never merely the first process named
    ``dockerd`` on the host (a second engine, rootless or a test's, may run beside it).
    When the socket was made by a service manager that handed it to the engine (systemd's
    socket activation: the peer is the manager), the engine is the process named
    ``dockerd`` among those holding that listening socket. None for an engine over TCP or
    SSH, or outside this pid namespace (a worker in a container of its own).
    """
    path = unix_socket_path(client)
    if path is None:
        return None
    peer = _peer_pid(path)
    if peer is None:
        return None
    if _is_dockerd(peer):
        return peer
    # Handed over by a service manager: found once (a scan of every process's descriptors),
    # then trusted while that process lives (the health check asks every heartbeat).
    known = _HANDED_OVER.get((path, peer))
    if known is not None and _is_dockerd(known):
        return known
    inodes = _listening_inodes(os.path.realpath(path)) | _listening_inodes(path)
    for pid in _holders(inodes) if inodes else ():
        if pid != peer and _is_dockerd(pid):
            _HANDED_OVER[path, peer] = pid
            return pid
    return peer


#: Engines found behind a socket a service manager made: (socket path, manager) -> engine.
_HANDED_OVER: dict[tuple[str, int], int] = {}


def _is_dockerd(pid: int) -> bool:
    try:
        return _comm(pid) == "dockerd"
    except OSError:
        return False
