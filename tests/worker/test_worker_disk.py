"""A run's /output is a filesystem of its own whose caps the kernel holds, in every mode a
worker may run in: mounted by the worker (root, next to the engine) or by the engine (a
volume per run held by a keeper container: compose's non-root workers). A burst past
either cap ends the run as invalid output, and nothing a run wrote outlives it, even for a
worker that is not root and an image that has no `rm`.

The hostile images run only through the runner, with its limits.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from szbench.config import Settings
from szbench.datasets.service import RUN_LIMIT_KEYS
from szbench.models import Dataset, RunOutcome
from szbench_worker.docker_runner import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUNNER,
    DockerRunner,
    OutputUsage,
    cleanup_orphans,
    connect,
    output_usage,
)
from szbench_worker.docker_runner.outputfs import EngineTmpfs
from szbench_worker.pipeline import run_limits
from szbench_worker.runner import Limits, RunnerError
from tests.worker.conftest import BASE_IMAGE, write_edf

MiB = 1024**2
LIMITS = Limits(
    memory_bytes=96 * MiB,
    cpus=1.0,
    pids=64,
    timeout_s=60.0,
    tmpfs_bytes=16 * MiB,
    output_bytes=1 * MiB,
    output_files=100,
    log_bytes=64 * 1024,
)


# --- counting, without an engine -----------------------------------------------------------


def test_reserved_blocks_count_though_the_size_stays_zero(tmp_path: Path) -> None:
    reserved = tmp_path / "reserved"
    reserved.touch()
    # fallocate(1) -n is FALLOC_FL_KEEP_SIZE: blocks on the disk, size 0.
    subprocess.run(["fallocate", "-n", "-l", "4MiB", str(reserved)], check=True)
    assert reserved.stat().st_size == 0
    usage = output_usage(tmp_path)
    assert usage is not None
    assert usage.bytes >= 4 * MiB
    assert usage.files == 1


def test_sparse_files_count_their_apparent_size_and_links_count_once(tmp_path: Path) -> None:
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(8 * MiB)  # no block, but 8 MiB to whoever copies it
    (tmp_path / "sub").mkdir()
    os.link(tmp_path / "sparse", tmp_path / "sub" / "again")
    usage = output_usage(tmp_path)
    assert usage is not None
    assert 8 * MiB <= usage.bytes < 9 * MiB
    assert usage.files == 3  # the file, the folder, the second name


def test_every_entry_counts_and_counting_stops_past_the_cap(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"{i}").touch()
    full = output_usage(tmp_path)
    assert full == OutputUsage(bytes=0, files=50)
    capped = output_usage(tmp_path, stop_above=OutputUsage(bytes=MiB, files=10))
    assert capped is not None
    assert capped.files == 11


# --- a burst past either cap, in every mode ----------------------------------------------------


def _assert_left_nothing(docker_client: object, owner: str, work_dir: Path) -> None:
    """No staging directory, no container (run or keeper), no output volume of ``owner``."""
    assert list(work_dir.iterdir()) == []
    label = f"{LABEL_OWNER}={owner}"
    assert docker_client.containers.list(all=True, filters={"label": label}) == []  # type: ignore[attr-defined]
    assert docker_client.volumes.list(filters={"label": label}) == []  # type: ignore[attr-defined]
    assert str(work_dir) not in Path("/proc/mounts").read_text()


@pytest.mark.docker
@pytest.mark.parametrize("name", ["burster", "fileburst"])
@pytest.mark.parametrize("mounts", ["worker", "engine"])
def test_a_burst_past_either_cap_ends_invalid_output(
    docker_client: object,
    test_images: dict[str, str],
    recording: Path,
    tmp_path: Path,
    name: str,
    mounts: str,
) -> None:
    """Root workers, both ways of mounting: the kernel refuses past the cap (the 2 GiB
    reservation is never granted, not even for a moment), and what the run kept at the cap
    ends it as invalid output, every time: nothing depends on a sample's timing."""
    runner = DockerRunner(
        docker_client,  # type: ignore[arg-type]
        work_dir=tmp_path / "work",
        host="test-host",
        output_tmpfs=mounts == "worker",
        helper_image=BASE_IMAGE,
    )
    result = runner.run(
        image=test_images[name], recording=recording, output_dir=tmp_path / "out", limits=LIMITS
    )
    assert result.outcome is RunOutcome.INVALID_OUTPUT, result.admin_log[-2000:]
    assert "more than 1 MiB to /output, or more than 100 files" in result.submitter_message
    assert result.exit_code == 0  # the image went on after the refusal; the cap judged it
    if name == "burster":
        assert "reserving 2 GiB: No space left on device" in result.admin_log
        found = re.search(r"writing stopped after (\d+) bytes: No space left", result.admin_log)
        assert found is not None, result.admin_log[-2000:]
        assert int(found.group(1)) <= LIMITS.output_bytes + 4096
    else:
        found = re.search(r"making files stopped after (\d+): No space left", result.admin_log)
        assert found is not None, result.admin_log[-2000:]
        assert int(found.group(1)) <= LIMITS.output_files
    assert result.output_tsv is None
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    _assert_left_nothing(docker_client, runner.owner, runner.work_dir)


@pytest.mark.docker
def test_the_sweep_removes_a_dead_workers_keeper_and_output_volume(
    docker_client: object, tmp_path: Path
) -> None:
    """A worker killed mid-run leaves its keeper running and its volume mounted: the next
    start's sweep removes both (the tmpfs, with what is in it, goes with them)."""
    dead = "999999999.1"  # no such process: an owner that is gone
    labels = {LABEL_RUNNER: "1", LABEL_HOST: "sweep-host", LABEL_OWNER: dead}
    output = EngineTmpfs(
        docker_client,  # type: ignore[arg-type]
        name=f"szbench-sweep-test-{os.getpid()}-output",
        limits=LIMITS,
        host_ids=None,
        helper_image=docker_client.images.get(BASE_IMAGE).id,  # type: ignore[attr-defined]
        labels=labels,
    )
    output.prepare()
    label = f"{LABEL_OWNER}={dead}"
    assert docker_client.volumes.list(filters={"label": label})  # type: ignore[attr-defined]
    assert cleanup_orphans(docker_client, host="sweep-host", work_dir=tmp_path) == 1  # type: ignore[arg-type]
    _assert_left_nothing(docker_client, dead, tmp_path)


# --- a worker that is not root (as in compose) ---------------------------------------------

WORKER_UID = 10001


def _run_unprivileged(
    image: str, recording: Path, base: Path, helper: str | None
) -> dict[str, str]:
    """Run ``image`` through a runner in a forked process with the worker's uid and the
    socket's group only, as a compose worker runs; its result as a dict."""
    socket_gid = os.stat("/var/run/docker.sock").st_gid
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            client = connect()  # imports and connects while it may still read everything
            for codec in ("ascii", "latin-1", "idna", "utf-8"):
                codecs.lookup(codec)  # codecs load lazily, from where the worker uid cannot read
            os.setgroups([socket_gid])
            os.setgid(WORKER_UID)
            os.setuid(WORKER_UID)
            try:
                runner = DockerRunner(
                    client, work_dir=base / "work", host="test-host", helper_image=helper
                )
            except RunnerError as exc:
                os.write(write_end, json.dumps({"refused": str(exc)}).encode())
                status = 0
                return
            result = runner.run(
                image=image, recording=recording, output_dir=base / "out", limits=LIMITS
            )
            answer = {
                "outcome": result.outcome.value,
                "message": result.submitter_message,
                "log": result.admin_log[-2000:],
                "owner": runner.owner,
            }
            os.write(write_end, json.dumps(answer).encode())
            status = 0
        except BaseException as exc:  # reported to the parent, which fails the test
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = json.loads(pipe.read() or b"{}")
    os.waitpid(pid, 0)
    assert "error" not in answer, answer
    return answer


@pytest.fixture
def unprivileged_dir() -> Iterator[Path]:
    """A folder the unprivileged worker owns, outside pytest's root-only temporary tree."""
    base = Path(tempfile.mkdtemp(prefix="szbench-worker-disk-"))
    os.chmod(base, 0o755)
    for sub in ("work", "out"):
        (base / sub).mkdir()
        os.chown(base / sub, WORKER_UID, WORKER_UID)
    yield base
    shutil.rmtree(base)


@pytest.mark.docker
@pytest.mark.parametrize(
    "name",
    [
        "burster",  # a 2 GiB reservation, then writes to the cap
        "fileburst",  # files to the cap, in a folder made 0555: no rm could delete them
        "hideout",  # a folder the worker may not even list
        "scratchfiller",  # FROM scratch: no rm, no sleep; a 0700 and a 0555 folder
    ],
)
def test_a_non_root_worker_leaves_nothing_behind(
    docker_client: object,
    test_images: dict[str, str],
    unprivileged_dir: Path,
    name: str,
) -> None:
    """As compose runs it (uid 10001, the socket's group, the helper image set): the engine
    mounts /output, the kernel holds both caps, and the whole filesystem goes after the
    run, so no file has to be deleted one by one (a purge that could lose to a 0555 folder
    made while the machine was loaded)."""
    recording = write_edf(unprivileged_dir / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf")
    os.chmod(recording, 0o644)
    result = _run_unprivileged(test_images[name], recording, unprivileged_dir, BASE_IMAGE)
    assert result["outcome"] == RunOutcome.INVALID_OUTPUT.value, result["log"]
    assert "more than 1 MiB to /output" in result["message"]
    if name == "burster":  # the kernel refused the reservation: it never reached the disk
        assert "reserving 2 GiB: No space left on device" in result["log"]
    assert list((unprivileged_dir / "out").iterdir()) == []
    _assert_left_nothing(docker_client, result["owner"], unprivileged_dir / "work")


@pytest.mark.docker
def test_a_non_root_worker_without_a_helper_image_refuses_to_start(
    docker_client: object, test_images: dict[str, str], unprivileged_dir: Path
) -> None:
    """Without a keeper nothing but a watch could bound /output: no such worker starts (it
    once left 401 MB of a FROM-scratch image's output behind)."""
    recording = write_edf(unprivileged_dir / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf")
    result = _run_unprivileged(test_images["scratchfiller"], recording, unprivileged_dir, None)
    assert "SZBENCH_RUNNER_HELPER_IMAGE" in result["refused"]
    assert list((unprivileged_dir / "work").iterdir()) == []


# --- a root worker with the capped tmpfs -----------------------------------------------------


@pytest.mark.docker
def test_the_tmpfs_refuses_past_either_cap(
    docker_client: object, test_images: dict[str, str], recording: Path, tmp_path: Path
) -> None:
    """The hard caps: the kernel refuses the reservation and the inode past the limits (the
    images then wait, so these runs end by their short time limit)."""
    runner = DockerRunner(
        docker_client,  # type: ignore[arg-type]
        work_dir=tmp_path / "work",
        host="test-host",
        output_tmpfs=True,
    )
    short = Limits(**{**LIMITS.__dict__, "timeout_s": 5.0})
    reserved = runner.run(
        image=test_images["fallocater"], recording=recording, output_dir=tmp_path, limits=short
    )
    assert "fallocate failed: No space left on device" in reserved.admin_log
    many = runner.run(
        image=test_images["manyfiles"], recording=recording, output_dir=tmp_path, limits=short
    )
    found = re.search(r"making files stopped after (\d+): No space left", many.admin_log)
    assert found is not None, many.admin_log[-2000:]
    assert int(found.group(1)) <= LIMITS.output_files
    for result in (reserved, many):
        assert result.outcome is RunOutcome.TIMEOUT
        assert result.output_tsv is None
    assert list(runner.work_dir.iterdir()) == []
    assert str(runner.work_dir) not in Path("/proc/mounts").read_text()


def test_a_dataset_may_set_its_own_file_cap() -> None:
    dataset = Dataset(slug="x", run_limits={"output_files": "7", "output_bytes": 4096})
    limits = run_limits(Settings(runner_output_files=1000), dataset)
    assert (limits.output_files, limits.output_bytes) == (7, 4096)
    assert Limits.from_settings(Settings(runner_output_files=12)).output_files == 12
    assert "output_files" in RUN_LIMIT_KEYS
    with pytest.raises(ValueError, match=r"Limits\.output_files must be a positive integer"):
        Limits(output_files=0)
