"""Which cores a run is pinned to, so that concurrent runs on one host do not share them.

Every worker process on a host draws from one pool of cores (``SZBENCH_RUNNER_CPU_POOL``;
by default the cores this process may run on). A run claims a core by holding an exclusive
``flock`` on the core's lock file in the work directory, which every worker of the host
shares already (the engine bind-mounts it). The kernel drops a lock when its holder closes
it or dies, so a killed worker never leaves a core claimed. When fewer cores are free than a
run needs, it shares some with another run rather than waiting: the CPU quota still bounds
what each run takes.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: The folder of the lock files, inside the work directory; it stays there between runs.
CPU_LOCK_DIR = "cpu-locks"

#: ``SZBENCH_RUNNER_CPU_POOL`` values that turn pinning off.
NO_PINNING = ("none", "off")


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


@dataclass
class CpuClaim:
    """Cores held for one run; :meth:`release` them when the run's container is gone."""

    cores: tuple[int, ...]
    _locks: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        while self._locks:
            with contextlib.suppress(OSError):
                os.close(self._locks.pop())


class CpuPool:
    """The cores runs on this host may be pinned to, shared through lock files."""

    def __init__(self, cores: tuple[int, ...], lock_dir: Path) -> None:
        if not cores:
            raise ValueError("a CPU pool needs at least one core")
        self.cores = cores
        self.lock_dir = Path(lock_dir)

    @classmethod
    def from_setting(cls, value: str, lock_dir: Path) -> CpuPool | None:
        """The pool ``SZBENCH_RUNNER_CPU_POOL`` names: a core list, empty for this process's
        own cores, ``none`` for no pinning (``None``)."""
        value = value.strip()
        if value.lower() in NO_PINNING:
            return None
        cores = parse_cpu_list(value) if value else tuple(sorted(os.sched_getaffinity(0)))
        return cls(cores, lock_dir)

    def claim(self, n: int) -> CpuClaim:
        """``n`` cores (at most the pool's), free ones first, each locked until released."""
        n = min(max(n, 1), len(self.cores))
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        claim = CpuClaim(cores=())
        taken: list[int] = []
        for core in self.cores:
            if len(taken) == n:
                break
            fd = os.open(self.lock_dir / f"cpu{core}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                claim.release()
                raise
            claim._locks.append(fd)
            taken.append(core)
        # Not enough free cores: share the first busy ones (unlocked: their runs own them).
        taken += [core for core in self.cores if core not in taken][: n - len(taken)]
        claim.cores = tuple(sorted(taken))
        return claim
