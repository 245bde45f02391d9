"""What a run's process finds around it: thread counts that match its CPU limit, the cores it
is pinned to, and a writable, capped $HOME (docs/algorithm-contract.md, "Threads, cores and
home"). Pure parts first, then the real engine with the ``threads`` test image."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner, build_image, container_config
from szbench_worker.docker_runner.cpus import CpuPool, cores_for, parse_cpu_list
from szbench_worker.docker_runner.sandbox import HOME_DIR, THREAD_VARIABLES, run_environment
from szbench_worker.runner import Limits
from tests.worker.conftest import IMAGES_DIR, TEST_IMAGE_PREFIX

MiB = 1024**2


# --- the environment ----------------------------------------------------------------------


@pytest.mark.parametrize(("cpus", "threads"), [(0.5, "1"), (1.0, "1"), (2.0, "2"), (2.5, "3")])
def test_thread_variables_follow_the_cpu_limit(cpus: float, threads: str) -> None:
    cfg = container_config(
        image_id="sha256:" + "a" * 64,
        data_dir=Path("/w/data"),
        output_dir=Path("/w/output"),
        input_name="r_eeg.edf",
        output_name="r_events.tsv",
        limits=Limits(cpus=cpus),
    )
    env = cfg["environment"]
    assert {name: env[name] for name in THREAD_VARIABLES} == dict.fromkeys(
        THREAD_VARIABLES, threads
    )
    assert env["HOME"] == HOME_DIR
    assert "cpuset_cpus" not in cfg  # not pinned: the quota alone


def test_pinned_runs_count_their_cores() -> None:
    """A run pinned to fewer cores than its limit (a small host) gets as many threads as
    cores; the cores are the engine's cpuset."""
    cfg = container_config(
        image_id="sha256:" + "a" * 64,
        data_dir=Path("/w/data"),
        output_dir=Path("/w/output"),
        input_name="r_eeg.edf",
        output_name="r_events.tsv",
        limits=Limits(cpus=8),
        cpuset=(2, 3),
    )
    assert cfg["cpuset_cpus"] == "2,3"
    assert cfg["environment"]["OMP_NUM_THREADS"] == "2"


def test_what_the_image_sets_wins() -> None:
    env = run_environment(
        input_name="r_eeg.edf",
        output_name="r_events.tsv",
        threads=4,
        image_env=["OMP_NUM_THREADS=1", "HOME=/app", "INPUT=/elsewhere", "PATH=/usr/bin"],
    )
    assert "OMP_NUM_THREADS" not in env  # the image's own 1 stays
    assert "HOME" not in env
    assert env["MKL_NUM_THREADS"] == "4"
    # The contract's variables are always the platform's.
    assert env["INPUT"] == "r_eeg.edf"
    assert "PATH" not in env


# --- the CPU pool -------------------------------------------------------------------------


def test_cores_for_rounds_up() -> None:
    assert [cores_for(c) for c in (0.1, 0.5, 1.0, 1.01, 2.0, 10.0)] == [1, 1, 1, 2, 2, 10]


def test_parse_cpu_list_names_the_setting() -> None:
    assert parse_cpu_list("0-3,8,2") == (0, 1, 2, 3, 8)
    for bad in ("", "a", "3-1", "1,,2", "-1"):
        with pytest.raises(ValueError, match="SZBENCH_RUNNER_CPU_POOL"):
            parse_cpu_list(bad)


def test_concurrent_claims_take_different_cores(tmp_path: Path) -> None:
    # Two pools on one lock folder: two worker processes of one host.
    first = CpuPool((0, 1, 2, 3), tmp_path / "locks")
    second = CpuPool((0, 1, 2, 3), tmp_path / "locks")
    a = first.claim(1)
    b = second.claim(2)
    c = first.claim(1)
    assert (a.cores, b.cores, c.cores) == ((0,), (1, 2), (3,))
    a.release()
    again = second.claim(1)
    assert again.cores == (0,)  # a released core is free again
    for claim in (b, c, again):
        claim.release()


def test_a_full_pool_shares_cores_rather_than_waiting(tmp_path: Path) -> None:
    pool = CpuPool((0, 1), tmp_path / "locks")
    held = pool.claim(2)
    shared = pool.claim(1)
    assert held.cores == (0, 1)
    assert shared.cores == (0,)
    assert pool.claim(5).cores == (0, 1)  # never more than the pool
    held.release()
    shared.release()


def test_pool_setting(tmp_path: Path) -> None:
    assert CpuPool.from_setting("none", tmp_path) is None
    assert CpuPool.from_setting(" Off ", tmp_path) is None
    own = CpuPool.from_setting("", tmp_path)
    assert own is not None
    assert own.cores == tuple(sorted(os.sched_getaffinity(0)))
    listed = CpuPool.from_setting("1,0", tmp_path)
    assert listed is not None
    assert listed.cores == (0, 1)


# --- the real engine ----------------------------------------------------------------------

LIMITS = Limits(
    memory_bytes=256 * MiB,
    cpus=1.0,
    pids=64,
    timeout_s=120.0,
    tmpfs_bytes=8 * MiB,
    output_bytes=1 * MiB,
    log_bytes=64 * 1024,
)


def seen(result: Any) -> dict[str, Any]:
    lines = [line for line in result.admin_log.splitlines() if line.startswith("SEEN ")]
    assert len(lines) == 1, result.admin_log
    return json.loads(lines[0][len("SEEN ") :])  # type: ignore[no-any-return]


@pytest.mark.docker
@pytest.mark.parametrize(("cpus", "threads"), [(0.5, 1), (2.0, 2)])
def test_a_run_sees_threads_and_cores_of_its_limit(
    docker_client: object,
    test_images: dict[str, str],
    recording: Path,
    tmp_path: Path,
    cpus: float,
    threads: int,
) -> None:
    host_cores = sorted(os.sched_getaffinity(0))
    assert len(host_cores) >= threads, "this test needs a host of at least 2 cores"
    runner = DockerRunner(docker_client, work_dir=tmp_path / "runs", host="test-host")  # type: ignore[arg-type]
    limits = dataclasses.replace(LIMITS, cpus=cpus)
    result = runner.run(
        image=test_images["threads"], recording=recording, output_dir=tmp_path / "o", limits=limits
    )
    assert result.outcome is RunOutcome.OK, result.admin_log
    facts = seen(result)
    assert facts["uid"] == 4242
    assert len(facts["affinity"]) == threads
    assert set(facts["affinity"]) <= set(host_cores)
    expected = dict.fromkeys(THREAD_VARIABLES, str(threads))
    assert {k: facts["env"][k] for k in THREAD_VARIABLES} == expected
    # os.cpu_count() still counts the host's cores: the contract says to use the variables.
    assert facts["cpu_count"] == os.cpu_count()


@pytest.mark.docker
@pytest.mark.parametrize(
    ("user", "uid"),
    [
        (None, 4242),  # the image's USER, numeric, with no /etc/passwd entry
        ("nobody", 65534),  # a name (its uid unknown to the worker), home /nonexistent
    ],
)
def test_a_user_without_a_home_gets_a_writable_capped_one(
    docker_client: object,
    test_images: dict[str, str],
    recording: Path,
    tmp_path: Path,
    user: str | None,
    uid: int,
) -> None:
    runner = DockerRunner(docker_client, work_dir=tmp_path / "runs", host="test-host")  # type: ignore[arg-type]
    limits = dataclasses.replace(LIMITS, user=user)
    result = runner.run(
        image=test_images["threads"], recording=recording, output_dir=tmp_path / "o", limits=limits
    )
    assert result.outcome is RunOutcome.OK, result.admin_log
    facts = seen(result)
    assert facts["uid"] == uid
    assert facts["env"]["HOME"] == HOME_DIR
    assert facts["home_write"] == "ok"
    # Capped like /tmp, at RUNNER_TMPFS_BYTES; past the cap: no space left on device.
    assert facts["home_size"] == LIMITS.tmpfs_bytes
    assert facts["home_fill"] == "OSError: errno 28"


@pytest.mark.docker
def test_an_image_that_sets_threads_or_home_keeps_them(
    docker_client: object, test_images: dict[str, str], recording: Path, tmp_path: Path
) -> None:
    context = tmp_path / "ctx"
    context.mkdir()
    shutil.copy(IMAGES_DIR / "threads" / "run.py", context / "run.py")
    (context / "Dockerfile").write_text(
        f"FROM {TEST_IMAGE_PREFIX}threads:latest\n"
        "ENV OMP_NUM_THREADS=7 HOME=/tmp/mine\n"
        "COPY run.py /app/run.py\n"
    )
    image = build_image(context, f"{TEST_IMAGE_PREFIX}threads-own:latest", docker_client).digest  # type: ignore[arg-type]
    assert test_images["threads"]  # the base above is built
    runner = DockerRunner(docker_client, work_dir=tmp_path / "runs", host="test-host")  # type: ignore[arg-type]
    limits = dataclasses.replace(LIMITS, cpus=2.0)
    result = runner.run(image=image, recording=recording, output_dir=tmp_path / "o", limits=limits)
    assert result.outcome is RunOutcome.OK, result.admin_log
    facts = seen(result)
    assert facts["env"]["OMP_NUM_THREADS"] == "7"
    assert facts["env"]["MKL_NUM_THREADS"] == "2"
    assert facts["env"]["HOME"] == "/tmp/mine"
    assert facts["home_write"] == "ok"  # under /tmp, writable


@pytest.mark.docker
def test_pinning_off_leaves_every_core(
    docker_client: object, test_images: dict[str, str], recording: Path, tmp_path: Path
) -> None:
    runner = DockerRunner(
        docker_client,  # type: ignore[arg-type]
        work_dir=tmp_path / "runs",
        host="test-host",
        cpu_pool="none",
    )
    limits = dataclasses.replace(LIMITS, cpus=0.5)
    result = runner.run(
        image=test_images["threads"], recording=recording, output_dir=tmp_path / "o", limits=limits
    )
    facts = seen(result)
    assert facts["affinity"] == sorted(os.sched_getaffinity(0))
    assert facts["env"]["OMP_NUM_THREADS"] == "1"
