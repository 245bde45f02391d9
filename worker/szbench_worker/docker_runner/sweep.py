"""The orphan sweep: containers and staging directories of worker processes that are gone."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from szbench_worker.docker_runner.client import connect
from szbench_worker.docker_runner.mounts import umount
from szbench_worker.docker_runner.ownership import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUNNER,
    host_tag,
)
from szbench_worker.runner import owner_alive, worker_host

log = logging.getLogger(__name__)

# --- orphans of a killed worker ----------------------------------------------------------


def cleanup_orphans(
    client: docker.DockerClient | None = None,
    *,
    work_dir: Path | None = None,
    host: str | None = None,
    everything: bool = False,
    owner: str | None = None,
) -> int:
    """Remove run containers (keepers included), output volumes and staging dirs whose
    worker process is gone.

    Call it when a worker starts. Only containers and volumes labelled for this ``host`` are
    considered; with ``everything`` the live ones go too (for an operator's cleanup); with
    ``owner`` (an :func:`owner_token`) exactly that process's, alive or not (a worker's own
    leftovers, :meth:`DockerRunner.remove_leftovers`). A staging directory holds only what
    the worker itself wrote (``/output`` is a filesystem of the run's own, unmounted here
    first), so removing it needs no other uid. Returns the number of containers removed.
    """
    client = client or connect()
    host = host or worker_host()
    removed = 0

    def ours(token: str) -> bool:
        if owner is not None:
            return token == owner
        return everything or not owner_alive(token)

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
    # The runs' /output volumes (:class:`EngineTmpfs`), once their containers are gone.
    for volume in client.volumes.list(filters={"label": f"{LABEL_HOST}={host}"}):
        labels = volume.attrs.get("Labels") or {}
        if LABEL_RUNNER in labels and ours(labels.get(LABEL_OWNER, "")):
            try:
                volume.remove(force=True)
            except NotFound:
                pass
            except APIError as exc:
                log.warning("could not remove the output volume %s: %s", volume.name, exc)
    if work_dir is not None and Path(work_dir).is_dir():
        for entry in Path(work_dir).iterdir():
            # Workers on other hosts (or in other containers) may share this directory: only
            # this host's staging directories are ours to judge.
            m = re.fullmatch(r"run-(.+)-(\d+\.\d+)-[a-z0-9_]+", entry.name)
            if not (m and m.group(1) == host_tag(host) and entry.is_dir()):
                continue
            if ours(m.group(2)):
                with contextlib.suppress(OSError):
                    umount(entry / "output")
                shutil.rmtree(entry, ignore_errors=True)
    if removed:
        log.warning("removed %d orphaned run container(s)", removed)
    return removed


# --- containers that ended and were never removed ----------------------------------------

#: Container states that will never run again by themselves.
_ENDED = ("exited", "dead", "created")


def remove_ended(client: docker.DockerClient, *, host: str, older_than_s: float) -> int:
    """Remove this ``host``'s run containers that ended more than ``older_than_s`` ago.

    A run container is removed by its runner the moment it ends; one still there long after
    is one its runner could not remove: the engine was away at that moment (an engine
    restart ends every container, and the runner's removal fails while the engine is down).
    Without this its owner, alive, would leave it ``Exited`` until the next worker start on
    the host. Containers that ended within ``older_than_s`` may still be read by their
    runner (state, logs) and are left alone; a container never started counts from its
    creation. Returns the number removed.
    """
    # The engine's own clock, which wrote FinishedAt: this process's may differ (a worker in
    # a container, or under a faked clock), and then a container that ended a second ago
    # would look old enough to remove from under its runner.
    now = _timestamp(client.info().get("SystemTime")) or datetime.now(UTC)
    removed = 0
    listed = client.containers.list(
        all=True,
        filters={"label": [f"{LABEL_HOST}={host}", LABEL_RUNNER], "status": list(_ENDED)},
        ignore_removed=True,
    )
    for container in listed:
        state = container.attrs.get("State") or {}
        ended = _timestamp(state.get("FinishedAt")) or _timestamp(container.attrs.get("Created"))
        if ended is None or (now - ended).total_seconds() < older_than_s:
            continue
        try:
            container.remove(force=True, v=True)
            removed += 1
        except NotFound:
            pass
        except APIError as exc:
            log.warning("could not remove the ended run container %s: %s", container.name, exc)
    if removed:
        log.warning("removed %d run container(s) that had ended and were never removed", removed)
    return removed


def _timestamp(value: object) -> datetime | None:
    """The engine's RFC 3339 time (nanoseconds, ``Z``); ``None`` for its zero time or junk."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)", value)
    if match is None:
        return None
    zone = "+00:00" if match.group(2) == "Z" else match.group(2)
    return datetime.fromisoformat(match.group(1) + zone)
