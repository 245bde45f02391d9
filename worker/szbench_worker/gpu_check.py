"""The GPU check of a worker host (``szbench gpu-check``): a small CUDA program run through
the real runner, exactly as a run on the gpu queue gets its GPU.

The check image is built here, offline, on a base that has ``python3`` (the local base or the
worker image): a Python script that talks to the CUDA driver itself (``libcuda.so.1``
through ctypes, so the image needs no CUDA toolkit): it initialises CUDA, counts the devices
it was given, names the first, allocates device memory, fills it, copies it back and checks
the bytes. Then it writes the contract's background-only TSV, so that the run ends ``ok``
when the container is sound, whether or not it saw a GPU. What it found is in its log, one
``szbench-gpu-check`` line; the run's provenance (model and driver from ``nvidia-smi`` on
the host, as every gpu-queue run records them) comes with the runner's result.

What a host needs for the container to see its GPU (docs/deployment.md, "Adding a GPU
host"): the NVIDIA driver, and the NVIDIA container toolkit registered with dockerd (the
device request of ``DeviceRequest(device_ids=[ID], capabilities=[["gpu"]])`` then mounts
that one device and ``libcuda``).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from szbench.config import Settings
from szbench_worker import docker_runner
from szbench_worker.docker_runner import build_image, inspect_image
from szbench_worker.eeg.edf_write import EdfStreamWriter
from szbench_worker.eeg.labels import CHANNELS
from szbench_worker.runner import GpuInfo, ImageError, Limits, RunnerError, work_dir_from_settings

#: Where the check's image comes from when none is named: the local base of szbench's own
#: images (python3 and numpy), else the worker image that a GPU host builds (docs).
BASES = ("szbench/python-numpy:bookworm", "szbench/worker:latest")
CHECK_TAG = "szbench/gpu-check"
#: The line the check prints, with what it found.
REPORT = re.compile(r"^szbench-gpu-check: (?P<fields>.*)$", re.MULTILINE)

#: The program in the image: the CUDA driver API through ctypes (no toolkit in the image).
CHECK_SCRIPT = r"""
import ctypes, os, struct, sys

def report(**fields):
    print("szbench-gpu-check: " + " ".join(f"{k}={v}" for k, v in fields.items()),
          file=sys.stderr, flush=True)

def write_output():
    # The contract's output: one bckg row spanning the recording (its length from the header).
    with open(os.path.join("/data", os.environ["INPUT"]), "rb") as f:
        head = f.read(256)
    seconds = int(head[236:244]) * float(head[244:252])
    out = os.path.join("/output", os.environ["OUTPUT"])
    with open(out, "w") as f:
        f.write("onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n")
        f.write(f"0.0\t{seconds:.1f}\tbckg\tn/a\tn/a\t2000-01-01 00:00:00\t{seconds:.1f}\n")

def check():
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "unset")
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return report(seen="no", visible=visible, reason="libcuda.so.1-not-mounted")
    rc = cuda.cuInit(0)
    if rc != 0:
        return report(seen="no", visible=visible, reason=f"cuInit-returned-{rc}")
    count, version = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    cuda.cuDriverGetVersion(ctypes.byref(version))
    if count.value < 1:
        return report(seen="no", visible=visible, reason="no-cuda-device")
    device, name = ctypes.c_int(), ctypes.create_string_buffer(256)
    cuda.cuDeviceGet(ctypes.byref(device), 0)
    cuda.cuDeviceGetName(name, 256, device)
    context, memory = ctypes.c_void_p(), ctypes.c_uint64()
    size = 1 << 20
    # The device's primary context (the API every CUDA release since 7 keeps as it is).
    ok = (
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
        and cuda.cuCtxSetCurrent(context) == 0
        and cuda.cuMemAlloc_v2(ctypes.byref(memory), ctypes.c_size_t(size)) == 0
        and cuda.cuMemsetD32_v2(memory, ctypes.c_uint(0x5A17C0DE), ctypes.c_size_t(size // 4)) == 0
    )
    back = (ctypes.c_char * size)()
    ok = ok and cuda.cuMemcpyDtoH_v2(back, memory, ctypes.c_size_t(size)) == 0
    ok = ok and bytes(back) == struct.pack("<I", 0x5A17C0DE) * (size // 4)
    report(seen="yes", devices=count.value, name=name.value.decode().replace(" ", "_"),
           cuda_driver_api=version.value, memory_check="ok" if ok else "failed",
           visible=visible)

try:
    check()
finally:
    write_output()
"""

DOCKERFILE = """FROM {base}
COPY check.py /opt/gpu-check/check.py
# compute: libcuda; utility: nvidia-smi (the NVIDIA runtime mounts what these name).
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility PYTHONDONTWRITEBYTECODE=1
USER 65534:65534
ENTRYPOINT ["python3", "/opt/gpu-check/check.py"]
"""


class GpuCheckError(Exception):
    """The check could not run (no engine, no base image, the engine refused the device)."""


@dataclass(frozen=True)
class GpuCheck:
    """What the check found: the host's view (provenance) and the container's."""

    gpu: str
    host: GpuInfo | None
    seen: bool
    found: dict[str, str]
    outcome: str
    log: str

    def lines(self) -> list[str]:
        """The check as the command prints it."""
        host = self.host
        model = (host.model if host else None) or "unknown (no nvidia-smi on this host)"
        driver = (host.driver if host else None) or "unknown"
        out = [f"GPU {self.gpu}: {model}, driver {driver} (nvidia-smi on this host)"]
        if self.seen:
            name = self.found.get("name", "?").replace("_", " ")
            memory = self.found.get("memory_check", "?")
            api = self.found.get("cuda_driver_api", "?")
            out.append(
                f"The container saw the GPU: {self.found.get('devices', '?')} CUDA device(s), "
                f"{name}, CUDA driver API {api}; device memory check {memory}."
            )
        else:
            reason = self.found.get("reason", "no report from the container").replace("-", " ")
            out.append(f"The container did NOT see the GPU: {reason}.")
            out.append(
                "Check the NVIDIA container toolkit (nvidia-ctk runtime configure "
                "--runtime=docker, then restart dockerd) and that the image's "
                "NVIDIA_DRIVER_CAPABILITIES include compute (docs/deployment.md)."
            )
        out.append(f"Run outcome: {self.outcome}.")
        return out

    @property
    def passed(self) -> bool:
        return self.seen and self.found.get("memory_check") == "ok" and self.outcome == "ok"


def parse_report(log: str) -> dict[str, str]:
    """The fields of the check's ``szbench-gpu-check`` line in a run's log (the last one).

    >>> parse_report("x\\nszbench-gpu-check: seen=yes devices=1 name=NVIDIA_H200\\n")
    {'seen': 'yes', 'devices': '1', 'name': 'NVIDIA_H200'}
    """
    found = REPORT.findall(log)
    if not found:
        return {}
    return dict(part.split("=", 1) for part in found[-1].split() if "=" in part)


def _base(client: Any, base: str | None) -> str:
    for name in (base,) if base else BASES:
        try:
            inspect_image(name, client)
            return name
        except ImageError:
            continue
    raise GpuCheckError(
        f"no base image with python3 on this engine ({base or ', '.join(BASES)}): build one "
        "with scripts/build-base-images.sh or scripts/build-project-images.sh, or name one "
        "with --base"
    )


def build_check_image(client: Any, base: str | None = None) -> str:
    """The check's image, built offline on ``base``; its id."""
    chosen = _base(client, base)
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        (context / "check.py").write_text(CHECK_SCRIPT)
        (context / "Dockerfile").write_text(DOCKERFILE.format(base=chosen))
        tag = f"{CHECK_TAG}:{chosen.replace('/', '-').replace(':', '-')}"
        return build_image(context, tag, client).digest


def write_recording(path: Path, minutes: int = 1) -> Path:
    """A small recording in the contract's form (19 channels, 256 Hz EDF, flat)."""
    labels = [f"{c}-Avg" for c in CHANNELS]
    writer = EdfStreamWriter(
        path,
        labels=labels,
        physical_min=[-500.0] * len(labels),
        physical_max=[500.0] * len(labels),
        n_records=60 * minutes,
    )
    writer.write(np.zeros((len(labels), 256 * 60 * minutes)))
    writer.close()
    return path


def run_check(gpu: str, settings: Settings, *, base: str | None = None) -> GpuCheck:
    """Build the check image and run it through the real runner with ``gpu``, as a worker
    of the gpu queue runs a recording (the runner's default limits); ``gpu`` empty: with no
    device, as a cpu-queue run (what the check says without a GPU)."""
    if not docker_runner.engine_available():
        raise GpuCheckError("no Docker engine answers on this host")
    runner = docker_runner.DockerRunner.from_settings(settings)
    image = build_check_image(runner.client, base)
    # In the runners' work folder: in a worker container that is a host path mounted at the
    # same path (docs/deployment.md), which the engine can bind-mount into the run.
    staging = work_dir_from_settings(settings)
    staging.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=staging) as tmp:
        folder = Path(tmp)
        recording = write_recording(
            folder / f"sub-gpu_ses-01_task-check_run-{uuid.uuid4().hex[:6]}_eeg.edf"
        )
        try:
            result = runner.run(
                image=image,
                recording=recording,
                output_dir=folder / "out",
                limits=Limits.from_settings(settings),
                gpus=(gpu,) if gpu else (),
            )
        except RunnerError as exc:
            hint = ""
            if "could not select device driver" in str(exc):
                hint = (
                    "; this engine has no GPU device driver: install the NVIDIA container "
                    "toolkit and register it (nvidia-ctk runtime configure --runtime=docker, "
                    "then restart dockerd)"
                )
            raise GpuCheckError(
                f"the engine did not run the check with GPU {gpu}: {exc}{hint}"
            ) from exc
        finally:
            shutil.rmtree(folder / "out", ignore_errors=True)
    found = parse_report(result.admin_log)
    return GpuCheck(
        gpu=gpu,
        host=result.gpu,
        seen=found.get("seen") == "yes",
        found=found,
        outcome=result.outcome.value,
        log=result.admin_log,
    )
