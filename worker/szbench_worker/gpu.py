"""Which GPU this worker process owns: one at a time, passed to the runner per run.

``SZBENCH_RUNNER_GPUS`` lists the GPUs of the host that this worker may use ("0" or
"0,1,2,3", or GPU UUIDs). A worker *process* owns exactly one of them: with a prefork pool
of N processes on N GPUs, pool process i takes GPU i (Celery numbers pool processes from
1; the index wraps around). Runs on the ``cpu`` queue get no GPU. Model and driver are
recorded with each run by the runner (``nvidia-smi`` when present).
"""

from __future__ import annotations

from celery.utils.log import current_process_index

from szbench.config import Settings
from szbench.queue import QUEUE_GPU
from szbench_worker.runner import RunnerError, gpus_from_settings


def worker_gpus(settings: Settings, process_index: int | None = None) -> tuple[str, ...]:
    """The one GPU of this process (empty on a CPU-only worker).

    >>> from szbench.config import Settings
    >>> worker_gpus(Settings(runner_gpus="0,1"), process_index=2)
    ('1',)
    >>> worker_gpus(Settings(runner_gpus=""), process_index=1)
    ()
    """
    gpus = gpus_from_settings(settings)
    if len(gpus) <= 1:
        return gpus
    index = current_process_index() if process_index is None else process_index
    # Pool processes count from 1; the main process (solo pool, embedded) is 0 or None.
    slot = (int(index) - 1) if index else 0
    return (gpus[slot % len(gpus)],)


def gpus_for_queue(queue: str, settings: Settings) -> tuple[str, ...]:
    """The GPUs a run taken from ``queue`` gets; a GPU task on a CPU-only worker is an
    infrastructure fault (retried, so that a GPU worker can take it)."""
    if queue != QUEUE_GPU:
        return ()
    gpus = worker_gpus(settings)
    if not gpus:
        raise RunnerError(
            "a gpu-queue task reached a worker without SZBENCH_RUNNER_GPUS; "
            "only GPU workers should consume the gpu queue"
        )
    return gpus
