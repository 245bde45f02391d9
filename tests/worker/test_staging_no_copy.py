"""Staging never copies a recording where the engine can find it: a hard link on the same
filesystem, else a read-only bind mount of the recording itself (issue 24.2). Only a worker in
a container, whose recording is off the staging directory's mount, copies: the engine could
not resolve the path it sees."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner, staging
from szbench_worker.docker_runner.staging import stage_recording
from szbench_worker.runner import Limits
from tests.worker.conftest import LIMITS, write_edf

pytestmark = pytest.mark.docker

NAME = "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"


@pytest.fixture
def no_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any copy made while the test runs fails it (only for tests that run no container:
    the runner copies the container's output TSV)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"staging copied a recording: {args}")

    for name in ("copyfile", "copy", "copy2", "copyfileobj"):
        monkeypatch.setattr(shutil, name, refuse)


@pytest.fixture
def other_fs() -> Iterator[Path]:
    """A folder on another filesystem than the test's tmp_path (tmpfs /dev/shm)."""
    if os.stat("/dev/shm").st_dev == os.stat(tempfile.gettempdir()).st_dev:
        pytest.fail("/dev/shm is on the temp dir's filesystem: no cross-device case here")
    path = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="szbench-staging-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_same_filesystem_is_a_hard_link(tmp_path: Path, no_copies: None) -> None:
    (tmp_path / "dataset").mkdir()
    recording = write_edf(tmp_path / "dataset" / NAME)
    data = tmp_path / "run" / "data"
    data.mkdir(parents=True)
    assert stage_recording(recording, data) is None
    staged = data / NAME
    assert staged.stat().st_ino == recording.stat().st_ino
    assert recording.stat().st_nlink == 2


def test_other_filesystem_is_a_placeholder_and_a_bind_source(
    tmp_path: Path, other_fs: Path, no_copies: None
) -> None:
    recording = write_edf(other_fs / NAME)
    data = tmp_path / "data"
    data.mkdir()
    assert stage_recording(recording, data) == recording
    assert (data / NAME).stat().st_size == 0  # nothing of the recording's bytes


def test_a_worker_in_a_container_copies_what_the_engine_could_not_find(
    tmp_path: Path, other_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recording = write_edf(other_fs / NAME)
    second = write_edf(other_fs / NAME.replace("run-00", "run-01"), seed=3)
    data = tmp_path / "data"
    data.mkdir()
    staging._copy_warning.cache_clear()
    with caplog.at_level(logging.WARNING, logger=staging.__name__):
        assert stage_recording(recording, data, may_bind=False) is None
        assert stage_recording(second, data, may_bind=False) is None
    staged = data / NAME
    assert staged.read_bytes() == recording.read_bytes()
    assert staged.stat().st_ino != recording.stat().st_ino
    assert staged.stat().st_mode & 0o777 == 0o444
    # One warning for the folder, not one per run: the operator is told where to move it.
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"staging copies {other_fs}:" in warning


def test_a_worker_in_a_container_still_links_on_one_mount(tmp_path: Path, no_copies: None) -> None:
    (tmp_path / "dataset").mkdir()
    recording = write_edf(tmp_path / "dataset" / NAME)
    data = tmp_path / "data"
    data.mkdir()
    assert stage_recording(recording, data, may_bind=False) is None
    assert (data / NAME).stat().st_ino == recording.stat().st_ino


def test_private_recording_is_made_readable_not_copied(tmp_path: Path, no_copies: None) -> None:
    (tmp_path / "dataset").mkdir()
    recording = write_edf(tmp_path / "dataset" / NAME)
    recording.chmod(0o600)
    data = tmp_path / "data"
    data.mkdir()
    assert stage_recording(recording, data) is None
    assert recording.stat().st_mode & 0o004
    assert (data / NAME).stat().st_ino == recording.stat().st_ino


@pytest.mark.parametrize(
    ("user", "bind"), [(None, True), ("65534:65534", True), ("65534:65534", False)]
)
def test_a_recording_off_the_work_dir_is_read_whole_by_the_container(
    test_images: dict[str, str],
    docker_client: object,
    tmp_path: Path,
    other_fs: Path,
    user: str | None,
    bind: bool,
) -> None:
    """The runs' work dir and the dataset on different filesystems: the container still
    reads the real bytes (the good image parses the header's duration) and nothing else,
    bind-mounted or (a worker in a container) copied."""
    recording = write_edf(other_fs / NAME, duration_s=40)
    write_edf(other_fs / NAME.replace("run-00", "run-01"), duration_s=30, seed=3)
    runner = DockerRunner(
        docker_client,  # type: ignore[arg-type]
        work_dir=tmp_path / "work",
        host="test-host",
        bind_recordings=bind,
    )
    limits = Limits(**{**LIMITS.__dict__, "user": user})
    result = runner.run(
        image=test_images["good"], recording=recording, output_dir=tmp_path / "out", limits=limits
    )
    assert result.outcome is RunOutcome.OK, result.admin_log
    assert f"wrote 1 detection for {NAME} (40.0 s)" in result.admin_log
    assert f"data: ['{NAME}']" in result.admin_log
    assert recording.stat().st_nlink == 1
