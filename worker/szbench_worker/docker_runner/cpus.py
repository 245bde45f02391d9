"""Which cores a run is pinned to, so that concurrent runs on one host do not share them.

Every runner on a host draws from one pool of cores (``SZBENCH_RUNNER_CPU_POOL``; by default
the cores this process may run on), whatever its work or data directory.

The engine is the record of which cores are taken: a run's container is created with its
cores (``HostConfig.CpusetCpus``) and a label naming the pool's lock directory, so the cores
in use are those of the pool's containers that exist and may run (created, running, paused,
restarting). A core is free again when its container is gone or has exited, never when the
process that started it dies: a worker killed with ``kill -9`` leaves its container running,
and its cores stay taken until the sweep removes it.

Claims are serialised per host by an exclusive ``flock`` on the lock directory
(``SZBENCH_RUNNER_CPU_LOCK_DIR``, by default ``/run/lock/szbench-cpus``, outside every work and
data directory), held from reading the engine's record until the run's container is in it;
the kernel drops the lock of a process that dies. Only opening the directory is needed, so a
directory made by another user (or by the engine, for a bind mount) serves every runner that
can read it. When fewer cores are free than a run needs, it shares the least used ones
rather than waiting: the CPU quota still bounds what each run takes.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from szbench_worker.runner import RunnerError

#: The label that ties a run container to the pool (its lock directory) it was pinned from.
LABEL_CPU_POOL = "org.szbench.cpu-pool"

#: ``SZBENCH_RUNNER_CPU_POOL`` values that turn pinning off.
NO_PINNING = ("none", "off")

#: Container states in which a container may run on its cores (now or once started).
_LIVE_STATES = ["created", "running", "paused", "restarting"]


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Cores from the kernel's list syntax (``0-3,8``), sorted and without repeats.

    Examples
    --------
    >>> parse_cpu_list("4,0-2, 2")
    (0, 1, 2, 4)
    >>> parse_cpu_list("3-1")
    Traceback (most recent call last):
    ...
    ValueError: SZBENCH_RUNNER_CPU_POOL: '3-1' is not a core or a range of cores (like 0-3,8)
    """
    cores: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None or (m[2] is not None and int(m[2]) < int(m[1])):
            raise ValueError(
                f"SZBENCH_RUNNER_CPU_POOL: {part!r} is not a core or a range of cores (like 0-3,8)"
            )
        cores.update(range(int(m[1]), int(m[2] or m[1]) + 1))
    return tuple(sorted(cores))


def cores_for(cpus: float) -> int:
    """Cores a run with a CPU limit of ``cpus`` is pinned to: rounded up, at least one.

    >>> cores_for(0.5), cores_for(2), cores_for(2.1)
    (1, 2, 3)
    """
    return max(1, math.ceil(cpus))


class CpuPool:
    """The cores runs on this host may be pinned to, shared through the engine's record and
    a host-wide claim lock (see the module docstring)."""

    def __init__(self, cores: tuple[int, ...], lock_dir: Path, client: Any) -> None:
        if not cores:
            raise ValueError("a CPU pool needs at least one core")
        self.cores = cores
        self.lock_dir = Path(lock_dir).absolute()
        self.client = client

    @classmethod
    def from_setting(cls, value: str, lock_dir: Path, client: Any) -> CpuPool | None:
        """The pool ``SZBENCH_RUNNER_CPU_POOL`` names: a core list, empty for this process's
        own cores, ``none`` for no pinning (``None``)."""
        value = value.strip()
        if value.lower() in NO_PINNING:
            return None
        cores = parse_cpu_list(value) if value else tuple(sorted(os.sched_getaffinity(0)))
        return cls(cores, lock_dir, client)

    @property
    def labels(self) -> dict[str, str]:
        """The labels a container pinned from this pool carries (its entry in the record)."""
        return {LABEL_CPU_POOL: str(self.lock_dir)}

    def in_use(self) -> dict[int, list[str]]:
        """The names of the pool's live containers pinned to each core, from the engine."""
        listed = self.client.containers.list(
            all=True,
            filters={"label": f"{LABEL_CPU_POOL}={self.lock_dir}", "status": _LIVE_STATES},
            ignore_removed=True,
        )
        used: dict[int, list[str]] = {}
        for container in listed:
            cpuset = (container.attrs.get("HostConfig") or {}).get("CpusetCpus") or ""
            with contextlib.suppress(ValueError):  # not pinned (or not by a runner)
                for core in parse_cpu_list(cpuset):
                    used.setdefault(core, []).append(container.name)
        return used

    @contextlib.contextmanager
    def claim(self, n: int) -> Iterator[tuple[int, ...]]:
        """``n`` cores (at most the pool's), the least used first, for one container.

        Create the container inside the block, pinned to the cores given and labelled
        with :attr:`labels`: the host's claim lock is held until the block ends, so no
        other claim reads the record before that container is in it. Raises
        :class:`RunnerError` when the lock directory cannot be made, opened or locked.
        """
        n = min(max(n, 1), len(self.cores))
        try:
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise RunnerError(
                f"cannot claim CPU cores: SZBENCH_RUNNER_CPU_LOCK_DIR {self.lock_dir}: {exc}"
            ) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                raise RunnerError(f"cannot lock {self.lock_dir} to claim CPU cores: {exc}") from exc
            used = self.in_use()
            order = sorted(self.cores, key=lambda core: (len(used.get(core, ())), core))
            yield tuple(sorted(order[:n]))
        finally:
            os.close(fd)  # and with it the lock
