"""Fixtures for the worker tests: a real Docker engine, the test images, tiny EDF files."""

from __future__ import annotations

import shutil
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from szbench_worker.runner import Limits

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = Path(__file__).resolve().parent / "images"
BASE_IMAGE = "szbench/python-numpy:bookworm"
TEST_IMAGE_PREFIX = "szbench-test/"

MiB = 1024**2
# What the tests against the real engine run an image under: small, so that a hostile image
# meets its limit within seconds, with a timeout generous enough for an image that ends by
# itself on a busy machine.
LIMITS = Limits(
    memory_bytes=96 * MiB,
    cpus=1.0,
    pids=64,
    timeout_s=120.0,
    tmpfs_bytes=16 * MiB,
    output_bytes=1 * MiB,
    log_bytes=64 * 1024,
)

CHANNELS = ["Fp1", "F3", "C3", "P3", "O1", "F7", "T3", "T5", "Fz", "Cz"]
CHANNELS += ["Pz", "Fp2", "F4", "C4", "P4", "O2", "F8", "T4", "T6"]


def write_edf(path: Path, duration_s: int = 30, fs_hz: int = 256, seed: int = 0) -> Path:
    """Write a small EDF in the contract's layout (19 channels ``<name>-Avg``, 256 Hz).

    Written by hand (1 s data records, 16-bit) so these tests need neither MNE nor the EEG
    module; the recording is random noise, which is all a runner test needs.
    """
    n_ch = len(CHANNELS)
    rng = np.random.default_rng(seed)
    data = rng.integers(-2000, 2000, size=(duration_s, n_ch, fs_hz), dtype=np.int16)
    start = datetime(2020, 1, 1, 0, 0, 0)

    def field(value: object, width: int) -> bytes:
        return str(value).ljust(width)[:width].encode("ascii")

    header = b"".join(
        [
            field(0, 8),
            field("X X X X", 80),
            field("Startdate 01-JAN-2020 X X X", 80),
            field(start.strftime("%d.%m.%y"), 8),
            field(start.strftime("%H.%M.%S"), 8),
            field(256 * (n_ch + 1), 8),
            field("", 44),
            field(duration_s, 8),
            field(1, 8),
            field(n_ch, 4),
        ]
    )
    signals = b"".join(
        [
            b"".join(field(f"{c}-Avg", 16) for c in CHANNELS),
            b"".join(field("AgAgCl electrode", 80) for _ in CHANNELS),
            b"".join(field("uV", 8) for _ in CHANNELS),
            b"".join(field(-3276.8, 8) for _ in CHANNELS),
            b"".join(field(3276.7, 8) for _ in CHANNELS),
            b"".join(field(-32768, 8) for _ in CHANNELS),
            b"".join(field(32767, 8) for _ in CHANNELS),
            b"".join(field("", 80) for _ in CHANNELS),
            b"".join(field(fs_hz, 8) for _ in CHANNELS),
            b"".join(field("", 32) for _ in CHANNELS),
        ]
    )
    assert len(header) == 256
    assert len(signals) == 256 * n_ch
    path.write_bytes(header + signals + data.astype("<i2").tobytes())
    return path


@pytest.fixture(scope="session")
def docker_client() -> Iterator[object]:
    """The real engine. Fails (never skips) when it is down: CI starts it."""
    from szbench_worker.docker_runner import connect
    from szbench_worker.runner import RunnerError

    try:
        client = connect()
    except RunnerError as exc:
        pytest.fail(f"{exc}; start it with scripts/test-services.sh", pytrace=False)
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_images(docker_client: object) -> dict[str, str]:
    """Build every image under tests/worker/images once, offline, from the local base image.

    Returns the image id of each, by directory name.
    """
    from szbench_worker.docker_runner import build_image, inspect_image
    from szbench_worker.runner import ImageError

    try:
        inspect_image(BASE_IMAGE, docker_client)  # type: ignore[arg-type]
    except ImageError:
        subprocess.run([str(REPO / "scripts" / "build-base-images.sh")], check=True)
    images = {}
    for directory in sorted(p for p in IMAGES_DIR.iterdir() if (p / "Dockerfile").is_file()):
        tag = f"{TEST_IMAGE_PREFIX}{directory.name}:latest"
        # Tests run these by image id: a tag is shared with anything else building on this
        # engine (another checkout's test session) and may move under a running session.
        images[directory.name] = build_image(directory, tag, docker_client).digest  # type: ignore[arg-type]
    return images


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """A 30 s contract-shaped EDF in its own dataset-like folder (with a neighbour)."""
    dataset = tmp_path / "dataset" / "sub-01" / "ses-01" / "eeg"
    dataset.mkdir(parents=True)
    write_edf(dataset / "sub-01_ses-01_task-szMonitoring_run-01_eeg.edf", duration_s=30, seed=2)
    return write_edf(dataset / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf", duration_s=30)


# The hostile images' entry points are scripts for inside their containers (one forks without
# end, one prints without end): pytest must never import them, not even for doctests.
collect_ignore_glob = ["images/*"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A real registry (Debian's docker-registry) on loopback, storage under tmp_path."""
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry is not installed; scripts/test-services.sh installs it")
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 0.1
            log: {{level: warn}}
            storage: {{filesystem: {{rootdirectory: {tmp_path / "registry-data"}}}}}
            http: {{addr: "127.0.0.1:{port}"}}
            """
        )
    )
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
