"""What the pipeline needs from the worker host: a runner and a way to get images.

Injectable, so that tests (and the CLI's trusted local runner) put their own in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from szbench.config import get_settings
from szbench.models import AlgorithmVersion
from szbench_worker import images
from szbench_worker.runner import Runner
from szbench_worker.runner_backend import make_runner


@dataclass
class Dependencies:
    """What the pipeline needs from the worker host: a runner and a way to get images.

    ``resolve_image(version)`` makes the version's image available to ``runner`` and
    returns the reference to run it by (the digest); it raises :class:`ImageError` when the
    image cannot be had (an unusable upload, a missing tarball).
    """

    runner: Runner
    resolve_image: Callable[[AlgorithmVersion], str]


_deps: Dependencies | None = None


def set_dependencies(deps: Dependencies | None) -> None:
    """Use ``deps`` in this process (tests, the CLI's trusted local runner); None resets."""
    global _deps
    _deps = deps


def get_dependencies() -> Dependencies:
    """The runner of this worker (``SZBENCH_RUNNER_BACKEND``) and its image resolver."""
    global _deps
    if _deps is None:
        settings = get_settings()
        runner = make_runner(settings)
        _deps = Dependencies(runner=runner, resolve_image=images.resolver_for(runner, settings))
    return _deps


def remove_run_leftovers() -> int:
    """Remove what this process's interrupted runs left (containers, staging directories).

    For a task that a cold shutdown interrupted, once the interruption has unwound it (see
    ``PipelineTask.on_failure``). Returns the number of containers removed; 0 when this
    process never made a runner, so none ran here.
    """
    if _deps is None:
        return 0
    return _deps.runner.remove_leftovers()
