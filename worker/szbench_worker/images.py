"""Getting an algorithm version's image onto this worker, and the reference to run it by.

Uploaded tarballs are pulled from the deployment's registry (``SZBENCH_REGISTRY``) by the
manifest digest the platform recorded when it pushed them, so that a worker on any host
needs no uploads volume; without a registry (or for a version uploaded before one was
set) they are loaded from the uploads volume (``SZBENCH_UPLOADS_DIR``, default
``data_dir/uploads``). Image references (``name@sha256:...``) are used when present on the
engine and pulled by digest otherwise. The result is the image id (``sha256:...``), checked
against the digest recorded for the version (the image id for tarballs, the registry's
manifest digest for references): the digest is part of every result's idempotency key, so
an image that changed under its name must not run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from szbench.algorithms import registry
from szbench.algorithms.image_check import ArchiveLimits
from szbench.config import Settings
from szbench.models import AlgorithmVersion
from szbench_worker.runner import ImageError, Runner

#: How a trusted local command's identity begins (:mod:`szbench_worker.local_runner`).
LOCAL_PROCESS_PREFIX = "local-process:"


def uploads_dir(settings: Settings) -> Path:
    """Where uploaded image tarballs are kept (relative ``tarball_path`` values resolve here)."""
    return Path(settings.effective_uploads_dir)


def _matches(recorded: str, info: Any) -> bool:
    # Tarballs record the image id; references record the registry's manifest digest.
    return recorded == info.digest or any(d.endswith("@" + recorded) for d in info.repo_digests)


def resolve_docker_image(version: AlgorithmVersion, *, client: Any, settings: Settings) -> str:
    """Make ``version``'s image present on the engine; return its id (``sha256:...``).

    Raises
    ------
    ImageError
        The image cannot be had, or its digest differs from the recorded one. The message
        is safe for the submitter (base names only).
    """
    # Deferred here and below: a worker of the local runner never loads the docker SDK.
    from szbench_worker.docker_runner import inspect_image, load_image_tarball, pull_image

    recorded = version.image_digest
    if recorded and recorded.startswith(LOCAL_PROCESS_PREFIX):
        # A trusted local command's results (szbench evaluate --local-process): no image
        # stands in for it (the pipeline's attribution rule).
        raise ImageError(
            "the algorithm version is a trusted local command, not an image: only "
            "`szbench evaluate --local-process` with that command runs it"
        )
    if recorded:
        try:
            return inspect_image(recorded, client).digest
        except ImageError:
            pass  # not on this worker yet: load or pull it below
    if version.registry_digest and settings.registry:
        info = pull_image(f"{registry.repository(settings)}@{version.registry_digest}", client)
        if recorded and info.digest != recorded:
            # The registry's manifest names other content than the upload that was checked.
            raise ImageError(
                f"the image's digest {info.digest} differs from the recorded {recorded}"
            )
    elif version.tarball_path:
        info = load_image_tarball(
            uploads_dir(settings) / version.tarball_path,
            client,
            limits=ArchiveLimits.from_settings(settings),
        )
    elif version.image_reference:
        try:
            info = inspect_image(version.image_reference, client)
        except ImageError:
            info = pull_image(version.image_reference, client)
    else:
        raise ImageError("the algorithm version has neither an image tarball nor a reference")
    if recorded and not _matches(recorded, info):
        raise ImageError(f"the image's digest {info.digest} differs from the recorded {recorded}")
    return info.digest


def _recorded_reference(version: AlgorithmVersion) -> str:
    reference = version.image_digest or version.image_reference
    if not reference:
        raise ImageError("the algorithm version has no image")
    return reference


def resolver_for(runner: Runner, settings: Settings) -> Callable[[AlgorithmVersion], str]:
    """The image resolver that fits ``runner`` (Docker: load/pull; others: the digest)."""
    from szbench_worker.docker_runner import DockerRunner

    if isinstance(runner, DockerRunner):
        return functools.partial(resolve_docker_image, client=runner.client, settings=settings)
    return _recorded_reference
