"""The runner this worker is configured for (``SZBENCH_RUNNER_BACKEND``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from szbench_worker.runner.host import work_dir_from_settings
from szbench_worker.runner.interface import Runner

if TYPE_CHECKING:
    from szbench.config import Settings


def make_runner(settings: Settings) -> Runner:
    """The runner this worker is configured for (``SZBENCH_RUNNER_BACKEND``).

    ``docker``: the sandboxed :class:`~szbench_worker.docker_runner.DockerRunner` (an error
    when no engine answers). ``local``: the trusted
    :class:`~szbench_worker.local_runner.LocalProcessRunner` running
    ``runner_local_command`` (the embedded demo only). ``auto``: docker when an engine
    answers, else local.
    """
    backend = settings.runner_backend
    if backend not in ("auto", "docker", "local"):
        raise ValueError(f"SZBENCH_RUNNER_BACKEND must be auto, docker or local, not {backend!r}")
    if backend != "local":
        from szbench_worker.docker_runner.client import engine_available
        from szbench_worker.docker_runner.run import DockerRunner

        if backend == "docker" or engine_available():
            return DockerRunner.from_settings(settings)
    from szbench_worker.local_runner import LocalProcessRunner

    return LocalProcessRunner(
        settings.runner_local_command, work_dir=work_dir_from_settings(settings)
    )
