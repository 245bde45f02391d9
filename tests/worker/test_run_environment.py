"""What a run's process finds around it: thread counts that match its CPU limit, the cores it
is pinned to, and a writable, capped $HOME (docs/algorithm-contract.md, "Threads, cores and
home"). Pure parts first, then the real engine with the ``threads`` test image."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound

from szbench.config import get_settings
from szbench.models import RunOutcome
from szbench_worker.docker_runner import (
    LABEL_HOST,
    DockerRunner,
    build_image,
    cleanup_orphans,
    container_config,
)
from szbench_worker.docker_runner.cpus import CpuPool, cores_for, parse_cpu_list
from szbench_worker.docker_runner.sandbox import HOME_DIR, THREAD_VARIABLES, run_environment
from szbench_worker.runner import Limits, RunnerError
from tests.worker.conftest import BASE_IMAGE, IMAGES_DIR, REPO, TEST_IMAGE_PREFIX

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


@pytest.fixture
def pool_containers(docker_client: Any) -> Iterator[list[Any]]:
    """Containers a test creates to hold cores (never started), removed afterwards."""
    made: list[Any] = []
    yield made
    for container in made:
        with contextlib.suppress(NotFound):
            container.remove(force=True)


def _holder(client: Any, pool: CpuPool, cores: tuple[int, ...], made: list[Any]) -> Any:
    """A container pinned to ``cores`` from ``pool``, as a run's would be (created only)."""
    container = client.containers.create(
        BASE_IMAGE,
        command=["true"],
        cpuset_cpus=",".join(map(str, cores)),
        labels=pool.labels,
        network_mode="none",
    )
    made.append(container)
    return container


@pytest.mark.docker
def test_claims_take_the_least_used_cores_of_the_engines_record(
    docker_client: Any, tmp_path: Path, pool_containers: list[Any]
) -> None:
    """Two pools on one lock directory: two runners of one host, whatever their work dirs.
    A core is taken while a container pinned to it may run, free once it is gone or exited."""
    first = CpuPool((0, 1), tmp_path / "locks", docker_client)
    second = CpuPool((0, 1), tmp_path / "locks", docker_client)
    with first.claim(1) as cores:
        assert cores == (0,)
        a = _holder(docker_client, first, cores, pool_containers)
    with second.claim(1) as cores:
        assert cores == (1,)  # 0 is in the engine's record now
        b = _holder(docker_client, second, cores, pool_containers)
    assert first.in_use() == second.in_use() == {0: [a.name], 1: [b.name]}
    with first.claim(1) as cores:
        assert cores == (0,)  # none free: the least used is shared (a tie: the first)
        c = _holder(docker_client, first, cores, pool_containers)
    with second.claim(1) as cores:
        assert cores == (1,)  # 0 holds two containers, 1 one
    with second.claim(5) as cores:
        assert cores == (0, 1)  # never more than the pool
    a.remove(force=True)
    c.remove(force=True)
    with second.claim(1) as cores:
        assert cores == (0,)  # gone: free again
    b.start()
    assert b.wait(timeout=60)["StatusCode"] == 0
    assert first.in_use() == {}  # exited: runs on no core


@pytest.mark.docker
def test_a_claim_holds_the_hosts_lock_until_its_block_ends(
    docker_client: Any, tmp_path: Path
) -> None:
    """No other claim reads the record between a claim and its container's creation."""
    pool = CpuPool((0,), tmp_path / "locks", docker_client)
    with pool.claim(1):
        probe = os.open(tmp_path / "locks", os.O_RDONLY | os.O_DIRECTORY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the block
    finally:
        os.close(probe)


def test_an_unusable_lock_dir_is_an_infrastructure_fault_naming_the_setting(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("not a folder")
    pool = CpuPool((0,), tmp_path / "file", None)
    with pytest.raises(RunnerError, match="SZBENCH_RUNNER_CPU_LOCK_DIR"), pool.claim(1):
        pass


def test_pool_setting(tmp_path: Path) -> None:
    assert CpuPool.from_setting("none", tmp_path, None) is None
    assert CpuPool.from_setting(" Off ", tmp_path, None) is None
    own = CpuPool.from_setting("", tmp_path, None)
    assert own is not None
    assert own.cores == tuple(sorted(os.sched_getaffinity(0)))
    listed = CpuPool.from_setting("1,0", tmp_path, None)
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


# --- pinning per host (issue 21 point 4) ----------------------------------------------------


def _running(client: Any, host: str, timeout_s: float = 120.0) -> Any:
    """The running run container of the runner labelled ``host`` (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = client.containers.list(
            filters={"label": f"{LABEL_HOST}={host}", "status": "running"}
        )
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no running container of {host}")


def _cpuset(container: Any) -> set[int]:
    container.reload()
    return set(parse_cpu_list(container.attrs["HostConfig"]["CpusetCpus"]))


@pytest.fixture
def host_lock_dir(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This test's own host-wide lock directory (SZBENCH_RUNNER_CPU_LOCK_DIR): the pool is
    the runs of this test alone, whatever else the engine runs."""
    locks = tmp_path / "host-locks"
    settings_env.setenv("SZBENCH_RUNNER_CPU_LOCK_DIR", str(locks))
    get_settings.cache_clear()
    return locks


@pytest.mark.docker
def test_runners_of_different_work_dirs_get_different_cores(
    docker_client: Any,
    test_images: dict[str, str],
    recording: Path,
    tmp_path: Path,
    host_lock_dir: Path,
) -> None:
    """Two `szbench evaluate` of different data dirs at once: their runs never share a core
    while the pool has one free (they shared one when only a work dir was shared)."""
    assert len(os.sched_getaffinity(0)) >= 2, "this test needs a host of at least 2 cores"
    first = DockerRunner(docker_client, work_dir=tmp_path / "a" / "runs", host="pin-a")
    second = DockerRunner(docker_client, work_dir=tmp_path / "b" / "runs", host="pin-b")
    sleeping = dataclasses.replace(LIMITS, timeout_s=300.0)
    outcome: list[Any] = []
    thread = threading.Thread(
        target=lambda: outcome.append(
            first.run(
                image=test_images["sleeper"],
                recording=recording,
                output_dir=tmp_path / "o1",
                limits=sleeping,
            )
        )
    )
    thread.start()
    try:
        held = _cpuset(_running(docker_client, "pin-a"))
        result = second.run(
            image=test_images["threads"],
            recording=recording,
            output_dir=tmp_path / "o2",
            limits=LIMITS,
        )
        assert result.outcome is RunOutcome.OK, result.admin_log
        assert len(held) == 1
        assert set(seen(result)["affinity"]).isdisjoint(held)
    finally:
        cleanup_orphans(docker_client, host="pin-a", everything=True)
        thread.join(timeout=120)
    assert not thread.is_alive()


_KILLED_WORKER = """
import sys
from pathlib import Path
from szbench_worker.docker_runner import DockerRunner
from szbench_worker.runner import Limits, RunnerError
work, host, image, recording, out = sys.argv[1:]
runner = DockerRunner(work_dir=Path(work), host=host)
runner.run(image=image, recording=Path(recording), output_dir=Path(out),
           limits=Limits(memory_bytes=256 * 2**20, cpus=1.0, pids=64, timeout_s=600.0))
"""


@pytest.mark.docker
def test_a_killed_workers_running_container_keeps_its_core(
    docker_client: Any,
    test_images: dict[str, str],
    recording: Path,
    tmp_path: Path,
    host_lock_dir: Path,
) -> None:
    """kill -9 of a worker frees nothing while its container runs: the next run is pinned
    elsewhere; once the sweep has removed that container, its core is free again."""
    assert len(os.sched_getaffinity(0)) >= 2, "this test needs a host of at least 2 cores"
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _KILLED_WORKER,
            str(tmp_path / "killed" / "runs"),
            "pin-killed",
            test_images["sleeper"],
            str(recording),
            str(tmp_path / "o-killed"),
        ],
        cwd=REPO,
    )
    try:
        orphan = _running(docker_client, "pin-killed")
        held = _cpuset(orphan)
        worker.kill()  # SIGKILL: no clean-up of any kind
        worker.wait(timeout=60)
        orphan.reload()
        assert orphan.status == "running"
        runner = DockerRunner(docker_client, work_dir=tmp_path / "next" / "runs", host="pin-next")
        result = runner.run(
            image=test_images["threads"],
            recording=recording,
            output_dir=tmp_path / "o-next",
            limits=LIMITS,
        )
        assert result.outcome is RunOutcome.OK, result.admin_log
        assert set(seen(result)["affinity"]).isdisjoint(held)
    finally:
        if worker.poll() is None:
            worker.kill()
        removed = cleanup_orphans(
            docker_client,
            work_dir=tmp_path / "killed" / "runs",
            host="pin-killed",
        )
    assert removed == 1  # the dead worker's container: gone, and its core with it
    again = runner.run(
        image=test_images["threads"],
        recording=recording,
        output_dir=tmp_path / "o-again",
        limits=LIMITS,
    )
    assert set(seen(again)["affinity"]) == held  # the least used core: the freed one first
