"""A run's ``/output``: a filesystem of its own, capped by the kernel in bytes and inodes.

Two ways to get one, both a tmpfs of ``output_bytes`` (plus one page, so that "more than the
limit" stays visible) and ``output_files`` inodes (plus the root folder and one more),
discarded as a whole when the run ends, so nothing the run wrote can outlive it and no file
has to be deleted one by one (a folder the run made read-only would refuse that):

- :class:`HostTmpfs`: the worker mounts it on the run's staging folder. Needs root in the
  engine's mount namespace (``szbench evaluate`` on the host, a root worker on the host).
- :class:`EngineTmpfs`: every other worker (compose's, not root and in a container of its
  own). The engine mounts it: a volume of the local driver with tmpfs options, made for this
  run. The engine unmounts such a volume (and its files are gone) when the last container
  using it stops, so a *keeper* container of ``SZBENCH_RUNNER_HELPER_IMAGE`` (any image with
  ``sleep`` and ``stat``) holds it from before the run starts until the worker has measured
  it (``stat -f`` in the keeper) and copied the TSV out (the engine's archive of that one
  file, its size known before a byte is read).
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import tarfile
from pathlib import Path
from typing import Any, Literal

import docker
import requests
from docker.errors import APIError, NotFound
from docker.types import Mount

from szbench_worker.docker_runner.mounts import mount_tmpfs, umount
from szbench_worker.docker_runner.output import output_ok
from szbench_worker.runner import CONTAINER_OUTPUT_DIR, Limits, RunnerError

log = logging.getLogger(__name__)

#: What fetching the TSV found: copied to the destination, absent, not a regular file, or
#: bigger than the output cap (a sparse file costs no block but its size once copied).
Fetched = tuple[Literal["copied", "missing", "irregular", "too_big"], Path | None]

#: One page over the byte cap, two inodes over the file cap (the root folder, and one so that
#: "too many" stays detectable).
_SLACK_BYTES = 4096
_SLACK_INODES = 2


def _owner_opts(host_ids: tuple[int, int] | None) -> str:
    if host_ids is None:
        # Unknown uid (a user name): open to all, inside a filesystem only this run mounts.
        return "mode=1777"
    return f"mode=0700,uid={host_ids[0]},gid={host_ids[1]}"


class HostTmpfs:
    """The tmpfs the worker mounts itself on ``path`` (root, dockerd's mount namespace)."""

    def __init__(self, path: Path, limits: Limits, host_ids: tuple[int, int] | None) -> None:
        self.path = path
        self.limits = limits
        self.host_ids = host_ids

    def prepare(self) -> None:
        self.path.mkdir()
        uid, gid = self.host_ids if self.host_ids is not None else (None, None)
        try:
            mount_tmpfs(
                self.path,
                self.limits.output_bytes + _SLACK_BYTES,
                uid,
                gid,
                self.limits.output_files + _SLACK_INODES,
            )
        except OSError as exc:
            raise RunnerError(f"cannot mount the tmpfs for /output: {exc}") from exc

    def mount(self) -> Mount:
        return Mount(target=CONTAINER_OUTPUT_DIR, source=str(self.path), type="bind")

    def over_limit(self) -> bool:
        return not output_ok(self.path, self.limits)

    def fetch(self, name: str, dest: Path) -> Fetched:
        tsv = self.path / name
        if tsv.is_symlink() or (tsv.exists() and not tsv.is_file()):
            return "irregular", None
        if not tsv.is_file():
            return "missing", None
        if tsv.stat().st_size > self.limits.output_bytes:
            return "too_big", None
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tsv, dest)
        return "copied", dest

    def release(self) -> None:
        umount(self.path)


class EngineTmpfs:
    """A per-run tmpfs volume that the engine mounts, held by a keeper container."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        name: str,
        limits: Limits,
        host_ids: tuple[int, int] | None,
        helper_image: str,
        labels: dict[str, str],
    ) -> None:
        self.client = client
        self.name = name
        self.keeper_name = f"{name}-keeper"
        self.limits = limits
        self.host_ids = host_ids
        self.helper_image = helper_image
        self.labels = labels
        self._keeper: Any = None

    def prepare(self) -> None:
        opts = (
            f"size={self.limits.output_bytes + _SLACK_BYTES},"
            f"nr_inodes={self.limits.output_files + _SLACK_INODES},"
            f"{_owner_opts(self.host_ids)},nosuid,nodev,noexec"
        )
        # The keeper outlives the run by far, never by forever: should every clean-up of
        # this run fail, its sleep still ends and the sweep removes what is left.
        keep_s = int(self.limits.timeout_s) + 3600
        try:
            self.client.volumes.create(
                name=self.name,
                driver="local",
                driver_opts={"type": "tmpfs", "device": "tmpfs", "o": opts},
                labels=self.labels,
            )
            self._keeper = self.client.containers.create(
                image=self.helper_image,
                name=self.keeper_name,
                entrypoint=["sleep", str(keep_s)],
                command=[],
                user="65534:65534",
                mounts=[
                    Mount(
                        target=CONTAINER_OUTPUT_DIR,
                        source=self.name,
                        type="volume",
                        read_only=True,
                    )
                ],
                network_mode="none",
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=8,
                mem_limit=32 * 1024**2,
                memswap_limit=32 * 1024**2,
                labels=self.labels,
                detach=True,
            )
            self._keeper.start()
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"cannot make the /output volume of the run: {exc}") from exc

    def mount(self) -> Mount:
        return Mount(target=CONTAINER_OUTPUT_DIR, source=self.name, type="volume")

    def over_limit(self) -> bool:
        """The filesystem's own count (``statfs``), reserved blocks included."""
        try:
            code, out = self._keeper.exec_run(
                ["stat", "-f", "-c", "%S %b %f %c %d", CONTAINER_OUTPUT_DIR], user="65534:65534"
            )
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"cannot measure the run's /output: {exc}") from exc
        try:
            if code != 0:
                raise ValueError(out)
            bsize, blocks, bfree, inodes, ifree = (int(v) for v in out.split())
        except ValueError:
            raise RunnerError(
                f"cannot measure the run's /output with `stat -f` in "
                f"SZBENCH_RUNNER_HELPER_IMAGE: {out[-500:]!r}"
            ) from None
        used_bytes = (blocks - bfree) * bsize
        used_files = inodes - ifree - 1  # the root folder is the filesystem's, not the run's
        return used_bytes > self.limits.output_bytes or used_files > self.limits.output_files

    def fetch(self, name: str, dest: Path) -> Fetched:
        """``name`` copied out of the volume through the engine's archive of that one file."""
        try:
            stream, stat = self._keeper.get_archive(f"{CONTAINER_OUTPUT_DIR}/{name}")
        except NotFound:
            return "missing", None
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"cannot read the run's /output: {exc}") from exc
        # Go's FileMode type bits: directory, symlink, device, pipe, socket, char device,
        # irregular. A regular file has none.
        type_bits = (
            (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
        )
        if int(stat.get("mode", 0)) & type_bits or stat.get("linkTarget"):
            return "irregular", None
        if int(stat.get("size", 0)) > self.limits.output_bytes:
            return "too_big", None
        # Bounded: one file of at most output_bytes, plus its tar headers.
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers() if m.name == name), None)
            if member is None or not member.isreg() or member.size > self.limits.output_bytes:
                return "irregular", None
            content = tar.extractfile(member)
            if content is None:
                return "irregular", None
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(content.read())
        return "copied", dest

    def release(self) -> None:
        """The keeper, then the volume: its tmpfs, with everything in it, goes at once."""
        release(self.client, self.keeper_name, self.name)


def release(client: docker.DockerClient, keeper: str, volume: str) -> None:
    """Remove a run's keeper container and output volume (either may be absent)."""
    with contextlib.suppress(NotFound):
        try:
            client.api.remove_container(keeper, force=True, v=True)
        except (APIError, requests.RequestException) as exc:
            log.warning("could not remove the keeper %s: %s", keeper, exc)
    with contextlib.suppress(NotFound):
        try:
            client.api.remove_volume(volume, force=True)
        except (APIError, requests.RequestException) as exc:
            # Left for the sweep (cleanup_orphans), which removes labelled volumes too.
            log.warning("could not remove the output volume %s: %s", volume, exc)
