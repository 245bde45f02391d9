"""Is this host fit to run containers now? The engine answers, the work directories take files.

A sick host must not spend the algorithms' retries (issue 21): while its engine is away or a
work directory is full, a worker stops taking runs (:class:`~szbench_worker.celery_app`'s
heartbeat cancels its run queues and adds them back when the host recovers), and a run task
that reaches it meanwhile goes back to its queue unclaimed, without counting an attempt or a
retry. The fault is reported with the worker's heartbeat, so the API can say what holds an
evaluation.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from szbench.config import Settings, get_settings


def host_fault(settings: Settings | None = None) -> str | None:
    """Why this host cannot run a container now (a sentence an operator acts on); ``None``
    when it can."""
    settings = settings or get_settings()
    from szbench_worker.pipeline.run import work_dir
    from szbench_worker.runner import work_dir_from_settings

    for label, path in (
        ("SZBENCH_RUNNER_WORK_DIR", work_dir_from_settings(settings)),
        ("SZBENCH_PIPELINE_WORK_DIR", work_dir(settings)),
    ):
        fault = _work_dir_fault(label, path, settings.worker_min_free_bytes)
        if fault is not None:
            return fault
    # Only a worker bound to the engine needs it (`auto` falls back to the local process).
    if settings.runner_backend == "docker":
        from szbench_worker.docker_runner import engine_available

        if not engine_available():
            return "the container engine of this host does not answer"
    return None


def _work_dir_fault(label: str, path: Path, min_free_bytes: int) -> str | None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        if free < min_free_bytes:
            return (
                f"the work directory ({label}) has {free // 2**20} MiB free, "
                f"under SZBENCH_WORKER_MIN_FREE_BYTES"
            )
        # Free blocks say nothing about inodes, a read-only remount or permissions: write.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".health-"):
            pass
    except OSError as exc:
        return f"the work directory ({label}) cannot be written: {exc.strerror or exc}"
    return None
