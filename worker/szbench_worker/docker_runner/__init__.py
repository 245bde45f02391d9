"""The Docker runner: one fresh, sandboxed container per recording.

The only package of the project that imports the docker SDK (an import-linter contract in
``pyproject.toml`` holds it to that). One idea per module:

- :mod:`.client`: the engine connection; :mod:`.images`: load, pull, inspect, build;
- :mod:`.sandbox`: the container's configuration and environment; :mod:`.cpus`: the cores
  a run is pinned to; :mod:`.cannot_start`: refusals that are the image's doing;
- :mod:`.ownership`: labels and owner tokens; :mod:`.mounts`: mount(2) for the ``/output``
  tmpfs; :mod:`.outputfs`: ``/output``, a capped filesystem per run (mounted by the worker
  or by the engine); :mod:`.staging`: the per-run directory; :mod:`.output`: what a
  mounted ``/output`` holds;
- :mod:`.run`: :class:`DockerRunner` itself; :mod:`.watchdog`: the thread beside each run;
- :mod:`.sweep`: what dead workers left behind.

The names below are the package's public interface; the rest of the project imports them
from here.
"""

from szbench_worker.docker_runner.cannot_start import (
    CANNOT_START_MESSAGES,
    cannot_start_cause,
    config_refusal,
)
from szbench_worker.docker_runner.client import connect, engine_available
from szbench_worker.docker_runner.gpu_probe import gpu_refusal
from szbench_worker.docker_runner.images import (
    ImageInfo,
    TarballIdCache,
    build_image,
    inspect_image,
    load_image_tarball,
    pull_image,
    registry_answers,
)
from szbench_worker.docker_runner.output import OutputUsage, output_usage
from szbench_worker.docker_runner.ownership import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUNNER,
    container_name,
)
from szbench_worker.docker_runner.run import DockerRunner
from szbench_worker.docker_runner.sandbox import (
    VolumeRefused,
    container_config,
    device_requests,
    scratch_paths,
)
from szbench_worker.docker_runner.sweep import cleanup_orphans, remove_ended

__all__ = [
    "CANNOT_START_MESSAGES",
    "LABEL_HOST",
    "LABEL_OWNER",
    "LABEL_RUNNER",
    "DockerRunner",
    "ImageInfo",
    "OutputUsage",
    "TarballIdCache",
    "VolumeRefused",
    "build_image",
    "cannot_start_cause",
    "cleanup_orphans",
    "config_refusal",
    "connect",
    "container_config",
    "container_name",
    "device_requests",
    "engine_available",
    "gpu_refusal",
    "inspect_image",
    "load_image_tarball",
    "output_usage",
    "pull_image",
    "registry_answers",
    "remove_ended",
    "scratch_paths",
]
