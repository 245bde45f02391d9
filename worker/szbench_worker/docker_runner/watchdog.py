"""A thread beside each run: the container's peak memory.

``/output`` needs no watching: it is a filesystem whose caps the kernel holds
(:mod:`.outputfs`)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any


class Watchdog:
    """Samples the container's peak memory."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.container: Any = None
        self.peak_memory_bytes: int | None = None
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
            if self._stop.wait(self.interval_s):
                return


def _cgroup_peak_files(container_id: str) -> list[str]:
    return [
        f"/sys/fs/cgroup/memory/docker/{container_id}/memory.max_usage_in_bytes",  # v1, cgroupfs
        f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope/memory.max_usage_in_bytes",
        f"/sys/fs/cgroup/docker/{container_id}/memory.peak",  # v2, cgroupfs driver
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.peak",  # v2, systemd
    ]
