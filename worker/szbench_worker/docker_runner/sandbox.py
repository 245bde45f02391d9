"""The container's configuration: the whole sandbox as arguments to ``containers.create``,
its environment (the contract's variables, thread counts, a home), and where it mounts
scratch space for the image's ``VOLUME`` paths. Pure; unit-tested."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from szbench_worker.docker_runner.cpus import cores_for
from szbench_worker.runner import (
    CONTAINER_DATA_DIR,
    CONTAINER_OUTPUT_DIR,
    Limits,
)

# --- building the container's configuration (pure; unit-tested) --------------------------


def device_requests(gpus: tuple[str, ...]) -> list[DeviceRequest]:
    """Exactly the worker's assigned GPUs (``--gpus device=ID,...``); none for a CPU run."""
    if not gpus:
        return []
    return [DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


#: Paths the kernel and the engine mount in every container: no image volume may go there.
_RUNTIME_PATHS = ("/proc", "/sys", "/dev", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
TMP_DIR = "/tmp"  # noqa: S108 (the container's /tmp)


#: Every run's ``$HOME``: a tmpfs of its own inside ``/tmp``'s, empty, writable and capped.
HOME_DIR = "/tmp/home"  # noqa: S108 (inside the container)

#: What the common runtimes read for the size of their thread pools. Without them a run
#: limited to 2 CPUs on a 64-core host starts dozens of threads that throttle each other.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",  # OpenMP: PyTorch, scikit-learn, OpenBLAS/MKL built with OpenMP
    "OPENBLAS_NUM_THREADS",  # OpenBLAS (numpy and scipy wheels)
    "MKL_NUM_THREADS",  # Intel MKL (PyTorch, conda's numpy)
    "BLIS_NUM_THREADS",  # BLIS (AMD's BLAS)
    "VECLIB_MAXIMUM_THREADS",  # Apple Accelerate
    "NUMEXPR_NUM_THREADS",  # numexpr (pandas)
    "NUMEXPR_MAX_THREADS",  # numexpr's ceiling, which it otherwise sets from the host
    "NUMBA_NUM_THREADS",  # Numba's parallel loops
    "TF_NUM_INTRAOP_THREADS",  # TensorFlow
    "TF_NUM_INTEROP_THREADS",
    "RAYON_NUM_THREADS",  # Rust's rayon (polars, Hugging Face tokenizers)
    "POLARS_MAX_THREADS",
)


def run_environment(
    *, input_name: str, output_name: str, threads: int, image_env: Iterable[str] = ()
) -> dict[str, str]:
    """The run's environment on top of the image's own.

    ``INPUT`` and ``OUTPUT`` are the contract's and always the platform's. ``$HOME`` and the
    thread variables are set only where the image's configuration (``image_env``, its
    ``Config.Env``: ``NAME=value`` items) leaves them unset: an image that sets them chose
    them, and the CPU quota and the pinned cores bound its run whatever it chose.

    Examples
    --------
    >>> env = run_environment(input_name="r.edf", output_name="r.tsv", threads=2,
    ...                       image_env=["OMP_NUM_THREADS=1", "PATH=/usr/bin"])
    >>> "OMP_NUM_THREADS" in env, env["MKL_NUM_THREADS"], env["HOME"]
    (False, '2', '/tmp/home')
    """
    own = {item.partition("=")[0] for item in image_env}
    env = {"INPUT": input_name, "OUTPUT": output_name}
    env |= {name: str(threads) for name in THREAD_VARIABLES if name not in own}
    if "HOME" not in own:
        env["HOME"] = HOME_DIR
    return env


class VolumeRefused(ValueError):
    """An image ``VOLUME`` the sandbox cannot mount. The message is submitter-safe."""


def is_inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _refusal(path: str) -> str | None:
    """Why a cleaned absolute ``VOLUME`` path cannot be mounted; ``None`` when it can."""
    if path == "/":
        return "the root of the file system"
    if path != CONTAINER_DATA_DIR and is_inside(path, CONTAINER_DATA_DIR):
        return f"inside {CONTAINER_DATA_DIR}, where the platform mounts the recording read-only"
    if path != CONTAINER_OUTPUT_DIR and is_inside(path, CONTAINER_OUTPUT_DIR):
        return f"inside {CONTAINER_OUTPUT_DIR}, where the platform collects the output"
    if any(is_inside(path, top) for top in _RUNTIME_PATHS):
        return "where the container runtime mounts its own files"
    return None


def scratch_paths(declared: Iterable[str]) -> tuple[str, ...]:
    """Where the sandbox mounts a scratch tmpfs for an image's ``VOLUME`` paths.

    ``declared`` is the image's ``Config.Volumes``. The engine gives every such path that has
    no mount of its own a writable anonymous volume on the host's disk, outside every size
    limit and left behind unless the container is removed with it; a tmpfs at the path (as
    bounded as ``/tmp``) is such a mount. Paths are cleaned as the engine cleans them
    (``/scratch/`` is ``/scratch``). ``/data``, ``/output`` and ``/tmp`` themselves need
    nothing: the platform mounts them already.

    Raises
    ------
    VolumeRefused
        For a path the contract or the runtime owns (inside ``/data`` or ``/output``, under
        ``/proc``, ``/sys`` or ``/dev``, ``/``, Docker's ``/etc/hosts`` files) and for a
        relative one (the engine refuses a relative mount point).

    Examples
    --------
    >>> scratch_paths(["/scratch/", "/data", "/tmp", "/home/app/.cache"])
    ('/home/app/.cache', '/scratch')
    >>> scratch_paths(["/data/cache"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    szbench_worker.docker_runner.sandbox.VolumeRefused: The image declares VOLUME '/data/cache', ...
    """
    paths: set[str] = set()
    for raw in declared:
        if raw.startswith("/"):
            # The engine's filepath.Clean: a leading "//" is "/" there, unlike in posixpath.
            path = "/" + posixpath.normpath(raw).lstrip("/")
            reason = _refusal(path)
        else:
            path, reason = raw, "which is not an absolute path"
        if reason is not None:
            shown = repr(raw if len(raw) <= 100 else raw[:97] + "...")
            raise VolumeRefused(
                f"The image declares VOLUME {shown}, {reason}. Remove it from the image."
            )
        if path not in (CONTAINER_DATA_DIR, CONTAINER_OUTPUT_DIR, TMP_DIR):
            paths.add(path)
    return tuple(sorted(paths))


def container_config(
    *,
    image_id: str,
    data_dir: Path,
    output_dir: Path | None = None,
    output: Mount | None = None,
    input_name: str,
    recording_mount: Path | None = None,
    output_name: str,
    limits: Limits,
    gpus: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    name: str | None = None,
    scratch: tuple[str, ...] = (),
    scratch_owner: tuple[int, int] | None = None,
    image_env: Iterable[str] = (),
    cpuset: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Keyword arguments for ``client.containers.create``: the whole sandbox in one place.

    ``scratch``: the image's ``VOLUME`` paths (:func:`scratch_paths`), each a tmpfs like
    ``/tmp``, owned by ``scratch_owner`` (the container's ``uid, gid``) when it is known; the
    home (:data:`HOME_DIR`) is one more. ``cpuset``: the cores the run is pinned to (none: not
    pinned); the thread variables count them, or the CPU limit rounded up without them.
    ``image_env``: the image's ``Config.Env`` (:func:`run_environment`). ``output``: the
    mount of the run's ``/output`` filesystem (:mod:`.outputfs`); ``output_dir``, a folder
    bind-mounted there instead.
    ``recording_mount``: the recording, bind-mounted read-only at ``/data/<input_name>``
    over its placeholder when staging could not hard-link it (never a copy).
    """
    if output is None:
        if output_dir is None:
            raise ValueError("container_config needs output or output_dir")
        output = Mount(
            target=CONTAINER_OUTPUT_DIR, source=str(output_dir), type="bind", read_only=False
        )
    # Each tmpfs is capped on its own, and all of them count against the memory limit (the
    # kernel charges tmpfs pages to the container that writes them): however many volumes an
    # image declares, it gets no more of the host than its memory limit.
    tmpfs = f"rw,nosuid,nodev,size={limits.tmpfs_bytes},mode=1777"
    # runc gives a tmpfs the mode of the folder it covers in the image, and root as owner: a
    # folder the image made for its own user would otherwise become unwritable to it.
    owned = tmpfs
    if scratch_owner is not None:
        owned += f",uid={scratch_owner[0]},gid={scratch_owner[1]}"
    return {
        "image": image_id,
        "name": name,
        "environment": run_environment(
            input_name=input_name,
            output_name=output_name,
            threads=len(cpuset) or cores_for(limits.cpus),
            image_env=image_env,
        ),
        "mounts": [
            Mount(target=CONTAINER_DATA_DIR, source=str(data_dir), type="bind", read_only=True),
            output,
            *(
                [
                    Mount(
                        target=f"{CONTAINER_DATA_DIR}/{input_name}",
                        source=str(recording_mount),
                        type="bind",
                        read_only=True,
                    )
                ]
                if recording_mount is not None
                else []
            ),
        ],
        "network_mode": "bridge" if limits.network else "none",
        "read_only": True,
        # The engine mounts the shallower path first: the home lands inside /tmp's tmpfs.
        "tmpfs": {TMP_DIR: tmpfs, HOME_DIR: owned, **dict.fromkeys(scratch, owned)},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": limits.pids,
        "mem_limit": limits.memory_bytes,
        # Equal to mem_limit: no swap, so the limit is real and an OOM kill is visible.
        "memswap_limit": limits.memory_bytes,
        "nano_cpus": int(limits.cpus * 1e9),
        **({"cpuset_cpus": ",".join(map(str, cpuset))} if cpuset else {}),
        "user": limits.user or "",
        "ulimits": [
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=4096, hard=4096),
        ],
        "log_config": LogConfig(
            type=LogConfig.types.JSON,
            # One file capped at log_bytes: docker itself bounds what a chatty container
            # costs on disk; we keep the tail, where the error usually is.
            config={"max-size": str(limits.log_bytes), "max-file": "1", "compress": "false"},
        ),
        "device_requests": device_requests(gpus),
        "labels": labels or {},
        "detach": True,
    }
