"""examples/onnx: a model image with ONNX Runtime, built offline and run in the sandbox.

The wheels come from examples/onnx/download-wheels.sh (a package index, or pip's cache,
must answer once; the build itself never reaches the network), the image is built from
the local base image, and the real runner runs it on a synthetic recording. The GPU
variant (Dockerfile.gpu) is not built here: its CUDA wheels are gigabytes and no GPU is
lent to the test machines to run it on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner, build_image, inspect_image
from szbench_worker.runner import ImageError, Limits
from tests.worker.conftest import BASE_IMAGE, REPO, write_edf

EXAMPLE = REPO / "examples" / "onnx"
MiB = 1024**2
LIMITS = Limits(
    memory_bytes=512 * MiB,
    cpus=1.0,
    pids=64,
    timeout_s=180.0,
    tmpfs_bytes=16 * MiB,
    output_bytes=1 * MiB,
    log_bytes=64 * 1024,
)


def pinned_wheels() -> dict[str, str]:
    """{normalised project name: version} of every pin in requirements.txt."""
    pins = {}
    for line in (EXAMPLE / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "_", name).lower()] = version
    return pins


def wheels_present() -> bool:
    names = {
        p.name.split("-")[0].lower(): p.name.split("-")[1] for p in EXAMPLE.glob("wheels/*.whl")
    }
    return "pip" in names and all(names.get(n) == v for n, v in pinned_wheels().items())


@pytest.fixture(scope="module")
def wheels() -> Path:
    """examples/onnx/wheels, filled by the example's own download script when incomplete."""
    if not wheels_present():
        done = subprocess.run(
            [str(EXAMPLE / "download-wheels.sh")],
            # The caller's pip configuration (index, proxy, cache) applies as it is.
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, (
            f"examples/onnx/download-wheels.sh could not fetch the wheels (it needs a package "
            f"index or pip's cache once):\n{done.stderr[-2000:]}"
        )
    assert wheels_present(), sorted(p.name for p in EXAMPLE.glob("wheels/*"))
    return EXAMPLE / "wheels"


@pytest.fixture(scope="module")
def onnx_image(docker_client: object, wheels: Path) -> str:
    """The example's image id, built offline from the local base image."""
    try:
        inspect_image(BASE_IMAGE, docker_client)  # type: ignore[arg-type]
    except ImageError:
        subprocess.run([str(REPO / "scripts" / "build-base-images.sh")], check=True)
    return build_image(EXAMPLE, "szbench-test/onnx-example:latest", docker_client).digest  # type: ignore[arg-type]


@pytest.mark.slow
def test_committed_model_is_what_make_model_writes(tmp_path: Path) -> None:
    """model.onnx is reproducible from the script: no weights of unknown origin in the repo."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "make_model.py"), str(tmp_path / "model.onnx")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "model.onnx").read_bytes() == (EXAMPLE / "model.onnx").read_bytes()


@pytest.mark.docker
def test_wheels_suit_the_base_image(docker_client: object, onnx_image: str, wheels: Path) -> None:
    """The wheels' cp tag is the base image's Python; its glibc runs their manylinux tag."""
    probe = docker_client.containers.run(  # type: ignore[attr-defined]
        BASE_IMAGE,
        [
            "python3",
            "-c",
            "import platform, sys; print(*sys.version_info[:2], platform.libc_ver()[1])",
        ],
        remove=True,
        network_disabled=True,
    )
    major, minor, libc = probe.decode().split()
    glibc = tuple(int(x) for x in libc.split("."))
    for wheel in wheels.glob("*.whl"):
        python_tag, _, platform_tag = wheel.name.removesuffix(".whl").split("-")[-3:]
        if python_tag.startswith("cp3") and "abi3" not in wheel.name:
            assert python_tag == f"cp{major}{minor}", wheel.name
        for tag in platform_tag.split("."):
            legacy = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
            if m := re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", tag):
                assert glibc >= (int(m[1]), int(m[2])), (wheel.name, libc)
            elif (base := tag.removesuffix("_x86_64")) in legacy:
                assert glibc >= legacy[base], (wheel.name, libc)
            else:
                assert tag == "any", wheel.name


@pytest.mark.docker
def test_onnx_example_runs_in_the_sandbox(
    docker_client: object, onnx_image: str, tmp_path: Path
) -> None:
    """The example detects a 30 s burst through onnxruntime, under the runner's sandbox."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    rec = write_edf(dataset / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf", duration_s=600)
    burst = np.sin(2 * np.pi * 6 * np.arange(256) / 256) * 20000  # 6 Hz, far above the noise
    with open(rec, "r+b") as f:  # 30 s of it from 300 s
        for second in range(300, 330):
            f.seek(256 * 20 + second * 19 * 256 * 2)
            f.write(np.tile(burst, 19).astype("<i2").tobytes())
    runner = DockerRunner(docker_client, work_dir=tmp_path / "work", host="test-host")  # type: ignore[arg-type]

    result = runner.run(image=onnx_image, recording=rec, output_dir=tmp_path / "o", limits=LIMITS)

    assert result.outcome is RunOutcome.OK, result.admin_log[-3000:]
    assert "providers ['CPUExecutionProvider']" in result.admin_log
    assert result.annotations is not None
    assert result.annotations.events.tolist() == [[300.0, 330.0]]
    assert result.annotations.recording_duration_s == 600.0
    assert result.output_tsv is not None
    rows = result.output_tsv.read_text().splitlines()
    assert rows[1].split("\t")[2:4] == ["sz", "1.000"], rows


def test_contract_page_shows_the_example_files() -> None:
    """The ONNX section of docs/algorithm-contract.md quotes the example's files verbatim."""
    doc = (REPO / "docs" / "algorithm-contract.md").read_text()
    quoted = re.findall(r"<!-- example file: (\S+) -->\n```\w*\n(.*?)```", doc, flags=re.S)
    assert [name for name, _ in quoted] == [
        "examples/onnx/Dockerfile",
        "examples/onnx/requirements.txt",
    ]
    for name, text in quoted:
        assert text == (REPO / name).read_text(), name
