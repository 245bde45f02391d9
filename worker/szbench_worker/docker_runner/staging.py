"""The per-run staging directory on the host: the recording in ``data/``, an ``output/``
the container's uid can write, and the purge of what the worker may not delete itself."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

import docker
import requests
from docker.errors import APIError, NotFound
from docker.types import Mount

from szbench_worker.docker_runner.mounts import mount_tmpfs
from szbench_worker.runner import CONTAINER_OUTPUT_DIR, Limits

log = logging.getLogger(__name__)


def stage_recording(recording: Path, data_dir: Path) -> Path:
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


def numeric_uid(user: str | None) -> tuple[int, int | None] | None:
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


def prepare_output(
    out: Path,
    limits: Limits,
    ids: tuple[int, int | None] | None,
    *,
    userns: tuple[int, int] | None,
    tmpfs: bool,
) -> bool:
    """Make ``out`` (the run's ``/output``) writable by the container's uid ``ids``.

    With ``tmpfs``, a tmpfs capped at the output limits is mounted there. Returns whether
    this host still mounts a tmpfs (``False`` once mounting is refused: the plain folder and
    the watchdog take over for this and later runs).
    """
    host_uid = host_gid = None
    if ids is not None:
        uid, gid = ids
        gid = uid if gid is None else gid
        base = userns or (0, 0)
        host_uid, host_gid = base[0] + uid, base[1] + gid
    out.mkdir()
    if tmpfs:
        try:
            # Slack of one page over the limit so "more than the limit" stays detectable.
            # The root folder is an inode too; one more keeps "too many" detectable.
            mount_tmpfs(
                out, limits.output_bytes + 4096, host_uid, host_gid, limits.output_files + 2
            )
            return True
        except PermissionError:
            log.warning("cannot mount a tmpfs for /output; using a watched directory")
    if host_uid is not None:
        try:
            if host_uid != os.geteuid():
                os.chown(out, host_uid, host_gid)  # type: ignore[arg-type]
            os.chmod(out, 0o700)
            return False
        except PermissionError:
            pass
    # Unknown or foreign uid and no right to chown: open to all, inside a 0711 parent
    # whose random name nobody else can list.
    os.chmod(out, 0o777)  # noqa: S103 (a remapped container uid must traverse or read it)
    return False
