"""Issue 30.7: GPU images tested the way they will run, here where there is no GPU.

- ``szbench evaluate --gpus ID`` makes the version a gpu-queue one, and each of its runs gets
  the GPU exactly as a gpu worker's run does (the runner is given ``gpus=(ID,)``, from which
  the Docker runner builds ``DeviceRequest(device_ids=[ID], capabilities=[["gpu"]])``), and
  records the GPU's provenance; on an engine that cannot give a GPU it stops at once and
  says what is missing, instead of retrying every run as a platform fault.
- ``szbench gpu-check``: its CUDA check image, built and run through the real runner without
  a GPU, says that the container saw none and why; with a GPU asked of this engine (no NVIDIA
  runtime here) the check names what to install.

The same check on a real GPU, the gpu queue end to end, is tests/worker/test_gpu_queue.py
(marked ``gpu``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from szbench.cli.main import app
from szbench.db import session_scope
from szbench.models import AlgorithmVersion, Evaluation
from szbench.queue import QUEUE_CPU, QUEUE_GPU

from .fakes import FakeRunner
from .test_evaluate_cli import embedded, synthetic  # noqa: F401 (fixtures)


def _evaluate(source: Any, prepared: Path, *, wants_gpu: bool) -> int:
    from szbench_worker import local_eval

    return local_eval.run_evaluation(
        source,
        prepared=prepared,
        name="gpu-image",
        dataset_slug="gpu-local",
        public_sample=False,
        reuse=False,
        say=lambda _: None,
        on_started=lambda _: None,
        on_progress=lambda *_: None,
        wants_gpu=wants_gpu,
    )


@pytest.mark.slow
def test_evaluate_gpus_gives_every_run_the_gpu_as_a_gpu_worker_does(
    embedded: Path,  # noqa: F811 (the imported fixture)
    synthetic: Path,  # noqa: F811 (the imported fixture)
    settings_env: pytest.MonkeyPatch,
) -> None:
    from szbench_worker import local_eval

    settings_env.setenv("SZBENCH_RUNNER_GPUS", "")  # restored after the test
    data_dir = local_eval.use_embedded_mode(gpus="GPU-0f1e2d3c")
    prepared, _ = local_eval.prepared_dataset(synthetic, data_dir, lambda _: None)
    fake = FakeRunner()
    source = local_eval.Source(fake, fake.image_digest, "my-gpu-image:1", "fake")

    on_gpu = _evaluate(source, prepared, wants_gpu=True)
    assert [call["gpus"] for call in fake.calls] == [("GPU-0f1e2d3c",)] * 2
    # Without --gpus, the same image on the cpu queue: no device, and a version of its own.
    fake.calls.clear()
    on_cpu = _evaluate(source, prepared, wants_gpu=False)
    assert [call["gpus"] for call in fake.calls] == [(), ()]
    with session_scope() as session:
        gpu_ev, cpu_ev = (session.get_one(Evaluation, i) for i in (on_gpu, on_cpu))
        assert (gpu_ev.queue, cpu_ev.queue) == (QUEUE_GPU, QUEUE_CPU)
        assert gpu_ev.status.value == "done"
        # Provenance as a worker records it: nvidia-smi's model and driver where it answers,
        # the device ids otherwise (this machine has no nvidia-smi).
        assert {r.gpu_model for r in gpu_ev.runs} == {"GPU-0f1e2d3c"}
        assert {r.gpu_model for r in cpu_ev.runs} == {None}
        versions = session.query(AlgorithmVersion).order_by(AlgorithmVersion.id).all()
        assert [v.wants_gpu for v in versions] == [True, False]
    report = local_eval.result_of(on_gpu, strip_eeg_prefix=True)
    assert {r.gpu for r in report.recordings} == {"GPU-0f1e2d3c"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--local-process", "python3 detect.py", "--gpus", "0"], "a local process gets no"),
        (["--image", "x:1", "--gpus", "0,1"], "--gpus takes one GPU"),
    ],
)
def test_evaluate_gpus_refuses_what_no_worker_would_run(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, ["evaluate", "--dataset", str(tmp_path), *args])
    assert result.exit_code == 2
    assert expected in " ".join(result.output.split())


def test_the_check_reads_what_the_container_reported() -> None:
    from szbench_worker import gpu_check

    log = (
        "runner header\n"
        "szbench-gpu-check: seen=yes devices=1 name=NVIDIA_H200 cuda_driver_api=13000 "
        "memory_check=ok visible=0\n"
    )
    found = gpu_check.parse_report(log)
    check = gpu_check.GpuCheck(
        gpu="0",
        host=gpu_check.GpuInfo(("0",), "NVIDIA H200", "580.159.04"),
        seen=True,
        found=found,
        outcome="ok",
        log=log,
    )
    assert check.passed
    assert check.lines()[:2] == [
        "GPU 0: NVIDIA H200, driver 580.159.04 (nvidia-smi on this host)",
        "The container saw the GPU: 1 CUDA device(s), NVIDIA H200, CUDA driver API 13000; "
        "device memory check ok.",
    ]
    blind = gpu_check.GpuCheck("0", None, False, {"reason": "cuInit-returned-100"}, "ok", "")
    assert not blind.passed
    assert "did NOT see the GPU: cuInit returned 100" in blind.lines()[1]


@pytest.mark.slow
def test_the_check_image_runs_through_the_runner_and_says_it_saw_no_gpu(
    docker_client: Any, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real check, without a device (a cpu-queue run): the CUDA driver is not there, the
    run is still ok (the contract's output is written), and the report says why."""
    from szbench.config import get_settings
    from szbench_worker import gpu_check

    settings_env.setenv("SZBENCH_RUNNER_WORK_DIR", str(tmp_path / "runs"))
    get_settings.cache_clear()
    check = gpu_check.run_check("", get_settings())
    assert check.outcome == "ok"
    assert check.found.get("seen") == "no"
    assert check.found.get("reason") == "libcuda.so.1-not-mounted"
    assert not check.passed


@pytest.mark.slow
def test_a_gpu_asked_of_an_engine_without_the_nvidia_runtime_is_named(
    docker_client: Any,
    embedded: Path,  # noqa: F811 (the imported fixture)
    synthetic: Path,  # noqa: F811 (the imported fixture)
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """This engine has no GPU device driver: ``gpu-check`` and ``evaluate --gpus`` say so at
    once (each of its runs would otherwise fail as a platform fault and be retried)."""
    if "nvidia" in str(docker_client.info().get("Runtimes", {})):
        pytest.fail("this engine has the NVIDIA runtime: run tests/worker/test_gpu_queue.py")
    settings_env.setenv("SZBENCH_RUNNER_GPUS", "")
    check = CliRunner().invoke(app, ["gpu-check", "--gpu", "0"])
    assert check.exit_code == 2, check.output
    assert "install the NVIDIA container toolkit" in " ".join(check.output.split())
    result = CliRunner().invoke(
        app,
        ["evaluate", "--image", "szbench/python-numpy:bookworm", "--dataset", str(synthetic),
         "--gpus", "0"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    words = " ".join(result.output.split())
    assert "cannot give a container GPU 0" in words
    assert "NVIDIA container toolkit" in words
    assert docker_client.containers.list(all=True, filters={"name": "szbench-gpu-probe"}) == []


#: The CUDA driver API the check calls, as a stand-in library: the check's ctypes calls
#: (argument types, pointers, sizes) are exercised for real, on no GPU.
FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext; typedef uint64_t CUdeviceptr;
CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    strncpy(name, d == 0 ? "Fake GPU 9000" : "wrong device", len); return 0; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (void *)0x1; return d; }
CUresult cuCtxSetCurrent(CUcontext c) { return c == (void *)0x1 ? 0 : 201; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    *p = (CUdeviceptr)malloc(n); return *p ? 0 : 2; }
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned int v, size_t n) {
    uint32_t *q = (uint32_t *)p; for (size_t i = 0; i < n; i++) q[i] = v; return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    memcpy(dst, (void *)src, n); return 0; }
"""


@pytest.mark.slow
def test_the_cuda_check_speaks_the_driver_api(docker_client: Any, tmp_path: Path) -> None:
    """The check image with a stand-in ``libcuda.so.1`` where the NVIDIA runtime would mount
    the real one: it initialises, names the device, and checks the bytes it wrote to
    device memory."""
    import os
    import shutil
    import subprocess

    from szbench_worker import gpu_check

    gcc = shutil.which("gcc")
    assert gcc, "gcc is installed by scripts/setup.sh"
    lib = tmp_path / "lib"
    lib.mkdir()
    (tmp_path / "fake.c").write_text(FAKE_LIBCUDA)
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(lib / "libcuda.so.1"), str(tmp_path / "fake.c")],
        check=True,
    )
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    out.mkdir()
    out.chmod(0o777)  # the image's unprivileged user writes here (user namespaces too)
    gpu_check.write_recording(data / "rec_eeg.edf")
    for path in (tmp_path, lib, data):
        path.chmod(0o755)
    os.chmod(lib / "libcuda.so.1", 0o755)
    image = gpu_check.build_check_image(docker_client)
    log = docker_client.containers.run(
        image,
        remove=True,
        network_mode="none",
        stdout=False,
        stderr=True,
        environment={"INPUT": "rec_eeg.edf", "OUTPUT": "rec.tsv", "LD_LIBRARY_PATH": "/opt/cuda"},
        volumes={
            str(lib): {"bind": "/opt/cuda", "mode": "ro"},
            str(data): {"bind": "/data", "mode": "ro"},
            str(out): {"bind": "/output", "mode": "rw"},
        },
    ).decode()
    found = gpu_check.parse_report(log)
    assert found == {
        "seen": "yes",
        "devices": "1",
        "name": "Fake_GPU_9000",
        "cuda_driver_api": "13000",
        "memory_check": "ok",
        "visible": "unset",
    }, log
    rows = (out / "rec.tsv").read_text().splitlines()
    assert rows[1].split("\t")[2] == "bckg"
    assert rows[1].split("\t")[-1] == "60.0"
