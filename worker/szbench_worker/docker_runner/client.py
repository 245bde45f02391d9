"""The connection to the Docker engine, and the facts about it that runs depend on."""

from __future__ import annotations

import re

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
