"""Can this engine give a container a GPU? Asked once before work that needs one
(``szbench evaluate --gpus``), so that a host without the NVIDIA container toolkit is told so
at once, instead of each run failing as a platform fault and waiting for its retries."""

from __future__ import annotations

import contextlib
import uuid

import docker
from docker.errors import APIError, DockerException

from szbench_worker.docker_runner.sandbox import device_requests

#: What the engine says when it has no device driver for the request (no NVIDIA runtime
#: hook), or the driver has no such GPU.
_NO_DEVICE = ("could not select device driver", "unknown device", "nvidia-container-cli")
#: An entrypoint no image has: starting fails after the device was given (at exec), so the
#: probe runs nothing of the image.
_NOTHING = "/szbench-gpu-probe-runs-nothing"


def gpu_refusal(client: docker.DockerClient, image: str, gpus: tuple[str, ...]) -> str | None:
    """Why the engine cannot give a container of ``image`` the GPUs ``gpus`` (its words),
    or None when it can. The container is created with the same device request as a run's
    and removed at once."""
    container = None
    try:
        container = client.containers.create(
            image,
            entrypoint=[_NOTHING],
            network_disabled=True,
            device_requests=device_requests(gpus),
            name=f"szbench-gpu-probe-{uuid.uuid4().hex[:12]}",
        )
        container.start()
    except (APIError, DockerException) as exc:
        text = str(getattr(exc, "explanation", None) or exc)
        if any(words in text for words in _NO_DEVICE):
            return text
        return None  # the device was given; what failed is the entrypoint, as intended
    finally:
        if container is not None:
            with contextlib.suppress(APIError, DockerException):
                container.remove(force=True)
    return None
