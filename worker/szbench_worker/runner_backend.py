"""The runner this worker is configured for (``SZBENCH_RUNNER_BACKEND``): the one module that
knows both runners, above them (the runner interface, :mod:`szbench_worker.runner`, knows
neither)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from szbench_worker.local_runner import LocalProcessRunner
from szbench_worker.runner import Runner, work_dir_from_settings

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
        # Deferred: a worker configured for the local runner never loads the docker SDK.
        from szbench_worker.docker_runner import DockerRunner, engine_available

        if backend == "docker" or engine_available():
            return DockerRunner.from_settings(settings)
    return LocalProcessRunner(
        settings.runner_local_command, work_dir=work_dir_from_settings(settings)
    )
