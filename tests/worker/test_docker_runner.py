"""The Docker runner against a real Docker engine, with hostile algorithm images.

Every image under tests/worker/images is built once per session from the local base image
(no registry). Limits are small so the whole file stays well under a minute or two.
These tests fail, never skip, when no engine is running: CI starts one.
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from szbench.models import RunOutcome
from szbench_scoring import read_annotations
from szbench_worker.docker_runner import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUNNER,
    DockerRunner,
    build_image,
    cleanup_orphans,
    inspect_image,
    load_image_tarball,
    pull_image,
)
from szbench_worker.runner import ImageError, Limits, RunResult, owner_token
from tests.worker.conftest import BASE_IMAGE, IMAGES_DIR, LIMITS, REPO, MiB, write_edf

pytestmark = pytest.mark.docker

# Images that never end get a short timeout, so that they cost this file seconds.
SHORT = Limits(**{**LIMITS.__dict__, "timeout_s": 4.0})
NEVER_END = {"sleeper", "forkbomb", "chatty"}


def limits_for(name: str) -> Limits:
    return SHORT if name in NEVER_END else LIMITS


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    return tmp_path / "work"


@pytest.fixture
def runner(docker_client: object, work_dir: Path) -> DockerRunner:
    return DockerRunner(docker_client, work_dir=work_dir, host="test-host")  # type: ignore[arg-type]


def our_containers(client: object, runner: DockerRunner) -> list[object]:
    return client.containers.list(  # type: ignore[attr-defined, no-any-return]
        all=True, filters={"label": f"{LABEL_OWNER}={runner.owner}"}, ignore_removed=True
    )


def assert_clean(client: object, runner: DockerRunner) -> None:
    """No container left, no staging directory left, no tmpfs left mounted."""
    assert our_containers(client, runner) == []
    assert list(runner.work_dir.iterdir()) == []
    assert str(runner.work_dir) not in Path("/proc/mounts").read_text()


def assert_submitter_safe(result: RunResult, *hidden: Path) -> None:
    for path in hidden:
        assert str(path) not in result.submitter_message
    assert "/tmp/" not in result.submitter_message
    assert "/var/lib/docker" not in result.submitter_message
    # The container's logs are for admins only.
    assert "--- container log" not in result.submitter_message


# --- each hostile image ends in the right outcome ----------------------------------------

CASES = [
    # image, outcome, exit code, text expected in the submitter message, in the admin log
    ("good", RunOutcome.OK, 0, "ok", "wrote 1 detection"),
    ("sleeper", RunOutcome.TIMEOUT, None, "time limit of 4 s", "sleeping"),
    ("memhog", RunOutcome.OUT_OF_MEMORY, None, "memory limit of 96 MiB", "holding 16 MiB"),
    ("crasher", RunOutcome.CRASHED, 3, "exited with code 3", "model weights not found"),
    (
        "silent",
        RunOutcome.NO_OUTPUT,
        0,
        "wrote no /output/sub-01_ses-01_task-szMonitoring",
        "nothing",
    ),
    ("malformed", RunOutcome.INVALID_OUTPUT, 0, "_events.tsv row 2: onset", "malformed"),
    ("wrongduration", RunOutcome.INVALID_OUTPUT, 0, "does not match the recording's duration", ""),
    ("bigoutput", RunOutcome.INVALID_OUTPUT, None, "more than 1 MiB to /output", ""),
    ("symlink", RunOutcome.INVALID_OUTPUT, 0, "_events.tsv must be a regular file", "linked"),
    ("hideout", RunOutcome.INVALID_OUTPUT, None, "more than 1 MiB to /output", ""),
    ("network", RunOutcome.OK, 0, "ok", "no network"),
    ("escape", RunOutcome.OK, 0, "ok", "Read-only file system"),
    ("forkbomb", RunOutcome.TIMEOUT, None, "time limit", "fork refused"),
    ("chatty", RunOutcome.TIMEOUT, None, "time limit", "xxxxxxxx"),
]


@pytest.mark.parametrize(("name", "outcome", "exit_code", "says", "logged"), CASES)
def test_hostile_image_ends_in_the_right_outcome(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    name: str,
    outcome: RunOutcome,
    exit_code: int | None,
    says: str,
    logged: str,
) -> None:
    before = recording.read_bytes()
    out = tmp_path / "results"
    result = runner.run(
        image=test_images[name], recording=recording, output_dir=out, limits=limits_for(name)
    )

    assert result.outcome is outcome, result.admin_log[-2000:]
    if exit_code is not None:
        assert result.exit_code == exit_code
    assert says in result.submitter_message
    assert logged in result.admin_log
    assert result.image_digest == inspect_image(test_images[name], docker_client).digest  # type: ignore[arg-type]
    assert result.image_digest.startswith("sha256:")
    assert result.worker_host == "test-host"
    assert result.gpu is None
    assert len(result.admin_log) <= LIMITS.log_bytes + 8192
    assert_submitter_safe(result, tmp_path, runner.work_dir, recording.parent)
    if outcome is RunOutcome.OK:
        assert result.output_tsv == out / "sub-01_ses-01_task-szMonitoring_run-00_events.tsv"
        assert result.annotations is not None
        assert read_annotations(result.output_tsv).recording_duration_s == 30.0
    else:
        assert result.output_tsv is None
        assert result.annotations is None
        assert not out.exists() or list(out.iterdir()) == []
    # Nothing the container did reached the dataset.
    assert recording.read_bytes() == before
    assert sorted(p.name for p in recording.parent.iterdir()) == [
        "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf",
        "sub-01_ses-01_task-szMonitoring_run-01_eeg.edf",
    ]
    assert_clean(docker_client, runner)


def test_good_image_sees_only_its_recording_and_scores(
    test_images: dict[str, str], runner: DockerRunner, recording: Path, tmp_path: Path
) -> None:
    result = runner.run(
        image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
    )
    assert result.outcome is RunOutcome.OK
    assert "data: ['sub-01_ses-01_task-szMonitoring_run-00_eeg.edf']" in result.admin_log
    assert result.annotations is not None
    assert result.annotations.events.tolist() == [[1.0, 3.0]]
    assert result.duration_s > 0
    assert result.sandbox == "docker"


def test_the_network_flag_is_what_closes_the_network(
    test_images: dict[str, str], runner: DockerRunner, recording: Path, tmp_path: Path
) -> None:
    """The network image passes above; with a network it must notice and fail."""
    open_net = Limits(**{**LIMITS.__dict__, "network": True})
    result = runner.run(
        image=test_images["network"], recording=recording, output_dir=tmp_path, limits=open_net
    )
    assert result.outcome is RunOutcome.CRASHED
    assert "NETWORK LEAK" in result.admin_log


@pytest.mark.parametrize("user", ["65534:65534", "1000"])
def test_configured_user_can_write_its_output(
    test_images: dict[str, str], runner: DockerRunner, recording: Path, tmp_path: Path, user: str
) -> None:
    limits = Limits(**{**LIMITS.__dict__, "user": user})
    result = runner.run(
        image=test_images["good"], recording=recording, output_dir=tmp_path, limits=limits
    )
    assert result.outcome is RunOutcome.OK, result.admin_log


def test_with_the_engine_mounting_output_the_caps_and_the_users_hold(
    docker_client: object,
    test_images: dict[str, str],
    work_dir: Path,
    recording: Path,
    tmp_path: Path,
) -> None:
    """For workers that may not mount: the engine's tmpfs volume, held by a keeper."""
    plain = DockerRunner(
        docker_client,  # type: ignore[arg-type]
        work_dir=work_dir,
        output_tmpfs=False,
        helper_image=BASE_IMAGE,
    )
    # sparsetsv: no block in /output, so only the TSV's own size keeps it from being copied.
    for name in ("bigoutput", "hideout", "sparsetsv"):
        big = plain.run(
            image=test_images[name], recording=recording, output_dir=tmp_path / name, limits=LIMITS
        )
        assert big.outcome is RunOutcome.INVALID_OUTPUT, big.admin_log[-2000:]
        assert "more than 1 MiB" in big.submitter_message
        assert not (tmp_path / name).exists() or list((tmp_path / name).iterdir()) == []
    linked = plain.run(
        image=test_images["symlink"], recording=recording, output_dir=tmp_path, limits=LIMITS
    )
    assert linked.outcome is RunOutcome.INVALID_OUTPUT
    assert "must be a regular file" in linked.submitter_message
    for user in (None, "65534"):
        limits = Limits(**{**LIMITS.__dict__, "user": user})
        good = plain.run(
            image=test_images["good"], recording=recording, output_dir=tmp_path, limits=limits
        )
        assert good.outcome is RunOutcome.OK, good.admin_log
        assert good.output_tsv is not None
        assert good.output_tsv.is_file()
    assert_clean(docker_client, plain)
    label = f"{LABEL_OWNER}={plain.owner}"
    assert docker_client.volumes.list(filters={"label": label}) == []  # type: ignore[attr-defined]


def test_a_sparse_output_is_never_copied_with_the_worker_mounting_output(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
) -> None:
    result = runner.run(
        image=test_images["sparsetsv"], recording=recording, output_dir=tmp_path, limits=LIMITS
    )
    assert runner.output_tmpfs
    assert result.outcome is RunOutcome.INVALID_OUTPUT, result.admin_log[-2000:]
    assert "more than 1 MiB" in result.submitter_message
    assert list(tmp_path.glob("*.tsv")) == []
    assert_clean(docker_client, runner)


def test_mixed_sequence_keeps_every_result(
    docker_client: object, test_images: dict[str, str], runner: DockerRunner, tmp_path: Path
) -> None:
    """Hostile runs between good ones: the worker carries on, good results stay intact."""
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    plan = [
        "good",
        "memhog",
        "good",
        "crasher",
        "forkbomb",
        "malformed",
        "good",
        "bigoutput",
        "good",
    ]
    recordings = [
        write_edf(dataset / f"sub-{i:02d}_eeg.edf", duration_s=20 + i, seed=i)
        for i in range(len(plan))
    ]
    out = tmp_path / "out"
    results = [
        runner.run(image=test_images[name], recording=rec, output_dir=out, limits=limits_for(name))
        for name, rec in zip(plan, recordings, strict=True)
    ]
    expected = {
        "good": RunOutcome.OK,
        "memhog": RunOutcome.OUT_OF_MEMORY,
        "crasher": RunOutcome.CRASHED,
        "forkbomb": RunOutcome.TIMEOUT,
        "malformed": RunOutcome.INVALID_OUTPUT,
        "bigoutput": RunOutcome.INVALID_OUTPUT,
    }
    assert [r.outcome for r in results] == [expected[n] for n in plan]
    good = [(r, rec) for r, rec, n in zip(results, recordings, plan, strict=True) if n == "good"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        rec.name.replace("_eeg.edf", "_events.tsv") for _, rec in good
    )
    for result, rec in good:
        assert result.output_tsv is not None
        assert read_annotations(result.output_tsv).recording_duration_s == 20 + recordings.index(
            rec
        )
    assert_clean(docker_client, runner)


def test_worked_example_from_the_contract_docs(
    docker_client: object, runner: DockerRunner, tmp_path: Path, test_images: dict[str, str]
) -> None:
    """docs/algorithm-contract.md's example, built and run from the page itself."""
    doc = (REPO / "docs" / "algorithm-contract.md").read_text()
    files = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", doc, flags=re.S)
    assert [name for name, _ in files] == ["detect.py", "Dockerfile"]
    context = tmp_path / "example"
    context.mkdir()
    for name, text in files:
        (context / name).write_text(text)
    build_image(context, "szbench-test/doc-example:latest", docker_client)  # type: ignore[arg-type]

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    rec = write_edf(dataset / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf", duration_s=600)
    burst = np.sign(np.sin(2 * np.pi * 20 * np.arange(256) / 256)) * 20000
    with open(rec, "r+b") as f:  # 30 s of fast high-amplitude activity from 300 s
        for second in range(300, 330):
            f.seek(256 * 20 + second * 19 * 256 * 2)
            f.write(np.tile(burst, 19).astype("<i2").tobytes())
    limits = Limits(**{**LIMITS.__dict__, "memory_bytes": 512 * MiB})
    result = runner.run(
        image="szbench-test/doc-example:latest",
        recording=rec,
        output_dir=tmp_path / "o",
        limits=limits,
    )
    assert result.outcome is RunOutcome.OK, result.admin_log
    assert result.annotations is not None
    assert result.annotations.events.tolist() == [[300.0, 330.0]]
    assert result.annotations.recording_duration_s == 600.0


def test_runner_built_before_a_fork_labels_runs_with_the_child(
    test_images: dict[str, str], runner: DockerRunner, recording: Path, tmp_path: Path
) -> None:
    """Celery's prefork pool: a runner made in the parent, used in a child."""
    parent_owner = runner.owner
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child() -> None:
        result = runner.run(
            image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
        )
        queue.put((result.outcome.value, runner.owner, owner_token()))

    proc = ctx.Process(target=child)
    proc.start()
    outcome, child_owner, child_token = queue.get(timeout=120)
    proc.join(30)
    assert outcome == "ok"
    assert child_owner == child_token != parent_owner
    # The parent's connection still works after the child dropped its copy.
    assert (
        runner.run(
            image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
        ).outcome
        is RunOutcome.OK
    )
    assert runner.owner == parent_owner


# --- interrupted runs: a Ctrl-C, or a cold shutdown raising from a signal handler ----------


def test_interrupted_before_create_returns_leaves_nothing(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine has made the container but ``create`` has not returned it: the runner
    never held it, and still removes it (by the name it chose beforehand)."""
    from docker.models.containers import ContainerCollection

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt  # as a signal handler raising on this line would

    with monkeypatch.context() as patch:
        # create() asks the engine for the container, then get()s it by id.
        patch.setattr(ContainerCollection, "get", interrupted)
        with pytest.raises(KeyboardInterrupt):
            runner.run(
                image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
            )
    assert_clean(docker_client, runner)


def test_interrupted_as_the_watchdog_starts_leaves_nothing(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The container runs; the watchdog's thread has not run yet (a loaded machine) when the
    interruption lands: the cleanup must not trip over the unstarted thread."""

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # as a signal handler raising in Thread.start() would

    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", interrupted)
        with pytest.raises(KeyboardInterrupt):
            runner.run(
                image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
            )
    assert_clean(docker_client, runner)


def test_remove_leftovers_after_an_interrupted_cleanup(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interrupted inside its own cleanup, a run leaves its container; once the interruption
    has unwound the run, remove_leftovers() removes this process's leftovers, no one else's."""
    api = docker_client.api  # type: ignore[attr-defined]
    remove_container = api.remove_container
    calls: list[tuple[object, ...]] = []

    def interrupted_once(*args: object, **kwargs: object) -> object:
        calls.append(args)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return remove_container(*args, **kwargs)

    monkeypatch.setattr(api, "remove_container", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        runner.run(
            image=test_images["good"], recording=recording, output_dir=tmp_path, limits=LIMITS
        )
    assert [c.status for c in our_containers(docker_client, runner)] == ["exited"]  # type: ignore[attr-defined]
    # A staging directory of this process, as if its removal had been interrupted too, and
    # one of another (dead) process, which only the start-up sweep may judge.
    mine = runner.work_dir / f"run-test-host-{runner.owner}-abc123"
    other = runner.work_dir / "run-test-host-1.1-abc123"
    mine.mkdir()
    other.mkdir()
    live = docker_client.containers.create(  # type: ignore[attr-defined]
        test_images["sleeper"],
        labels={LABEL_RUNNER: "1", LABEL_HOST: "test-host", LABEL_OWNER: "1.1"},
        network_mode="none",
    )
    try:
        assert runner.remove_leftovers() == 1
        assert our_containers(docker_client, runner) == []
        assert list(runner.work_dir.iterdir()) == [other]
        assert _exists(live)
    finally:
        live.remove(force=True)
        other.rmdir()
    assert_clean(docker_client, runner)


# --- image VOLUME paths: bounded tmpfs, never a volume on the host's disk ---------------


def volume_names(client: object) -> set[str]:
    return {v.name for v in client.volumes.list()}  # type: ignore[attr-defined]


@pytest.fixture
def created(
    monkeypatch: pytest.MonkeyPatch, docker_client: object
) -> Iterator[list[dict[str, object]]]:
    """What the engine made of each container created during the test (its inspect data).

    Each creation also makes a volume of a bystander, as any other user of a shared engine
    may at any moment: the checks below must look only at what the run made.
    """
    from docker.models.containers import ContainerCollection

    seen: list[dict[str, object]] = []
    bystanders: list[object] = []
    create = ContainerCollection.create

    def recording_create(self: object, *args: object, **kwargs: object) -> object:
        container = create(self, *args, **kwargs)  # type: ignore[arg-type]
        seen.append(container.attrs)
        bystanders.append(docker_client.volumes.create(labels={"org.szbench.test": "bystander"}))  # type: ignore[attr-defined]
        return container

    monkeypatch.setattr(ContainerCollection, "create", recording_create)
    yield seen
    for volume in bystanders:
        volume.remove(force=True)  # type: ignore[attr-defined]


def volumes_of(attrs: dict[str, object]) -> list[str]:
    return [m["Name"] for m in attrs["Mounts"] if m["Type"] == "volume"]  # type: ignore[attr-defined, index]


def volumes_left(client: object, created: list[dict[str, object]]) -> set[str]:
    """The volumes of the runner's containers (known by its labels) still on the engine."""
    ours = {
        name
        for attrs in created
        if LABEL_RUNNER in (attrs["Config"]["Labels"] or {})  # type: ignore[index, operator]
        for name in volumes_of(attrs)
    }
    return ours & volume_names(client)


def test_image_volume_is_a_capped_tmpfs_and_leaves_no_volume(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    created: list[dict[str, object]],
) -> None:
    """VOLUME /scratch, filled with far more than the cap: the write stops at the cap inside
    a tmpfs (memory the container's limit counts), nothing reaches the host's disk, and no
    volume is left. The algorithm dies of the full disk like any program: a crash."""
    result = runner.run(
        image=test_images["volumefiller"],
        recording=recording,
        output_dir=tmp_path / "o",
        limits=LIMITS,
    )

    assert result.outcome is RunOutcome.CRASHED, result.admin_log[-2000:]
    assert result.exit_code == 1
    assert result.submitter_message == "The algorithm exited with code 1."
    assert_submitter_safe(result, tmp_path, runner.work_dir, recording.parent)
    assert "/scratch is tmpfs" in result.admin_log
    stopped = re.search(r"stopped after (\d+) bytes: No space left on device", result.admin_log)
    assert stopped is not None, result.admin_log[-2000:]
    assert int(stopped.group(1)) <= LIMITS.tmpfs_bytes
    (attrs,) = created
    assert volumes_of(attrs) == []
    assert attrs["HostConfig"]["Tmpfs"]["/scratch"] == (  # type: ignore[index]
        f"rw,nosuid,nodev,size={LIMITS.tmpfs_bytes},mode=1777,uid=0,gid=0"
    )
    assert volumes_left(docker_client, created) == set()
    assert_clean(docker_client, runner)


@pytest.mark.parametrize("user", [None, "65534:65534"])
def test_image_with_volumes_runs_ok(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    created: list[dict[str, object]],
    user: str | None,
) -> None:
    """VOLUME /data /output /tmp /scratch ~/.cache: the contract's folders stay the platform's
    mounts, each scratch folder is a writable tmpfs (for any user), and it starts empty."""
    limits = Limits(**{**LIMITS.__dict__, "user": user})
    out = tmp_path / "o"
    result = runner.run(
        image=test_images["volumes"], recording=recording, output_dir=out, limits=limits
    )

    assert result.outcome is RunOutcome.OK, result.admin_log[-2000:]
    assert result.output_tsv == out / "sub-01_ses-01_task-szMonitoring_run-00_events.tsv"
    for folder in ("/tmp", "/scratch", "/home/algo/.cache"):
        assert f"{folder} is tmpfs" in result.admin_log
    assert "/data is no mount" not in result.admin_log
    assert "/output is no mount" not in result.admin_log
    # Unlike in a Docker volume, the image's own files there are not copied in.
    assert "cache holds: []" in result.admin_log
    assert "used its scratch folders" in result.admin_log
    (attrs,) = created
    assert volumes_of(attrs) == []
    tmpfs = attrs["HostConfig"]["Tmpfs"]  # type: ignore[index]
    assert set(tmpfs) == {"/tmp", "/tmp/home", "/scratch", "/home/algo/.cache"}
    assert volumes_left(docker_client, created) == set()
    assert_clean(docker_client, runner)


def test_image_volume_inside_output_is_refused(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    created: list[dict[str, object]],
) -> None:
    """A VOLUME that would shadow part of /output: the submitter is told, no container runs,
    and it is a result (not an infrastructure fault retried forever)."""
    result = runner.run(
        image=test_images["volumeinside"],
        recording=recording,
        output_dir=tmp_path / "o",
        limits=LIMITS,
    )
    assert result.outcome is RunOutcome.CRASHED
    assert result.exit_code is None
    assert result.submitter_message == (
        "The image declares VOLUME '/output/cache', inside /output, where the platform "
        "collects the output. Remove it from the image."
    )
    assert result.image_digest == test_images["volumeinside"]
    assert result.output_tsv is None
    assert_submitter_safe(result, tmp_path, runner.work_dir, recording.parent)
    assert created == []
    assert_clean(docker_client, runner)


def test_a_volume_that_slips_through_goes_with_its_container(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    created: list[dict[str, object]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should an image's VOLUME ever get past the tmpfs mounts, the engine makes an anonymous
    volume for it, and the container's removal takes that volume too."""
    from szbench_worker.docker_runner import run as docker_run

    monkeypatch.setattr(docker_run, "scratch_paths", lambda _: ())
    result = runner.run(
        image=test_images["volumes"], recording=recording, output_dir=tmp_path, limits=LIMITS
    )
    assert result.outcome is RunOutcome.OK, result.admin_log[-2000:]
    assert "cache holds: ['shipped.txt']" in result.admin_log  # a Docker volume, copied in
    (attrs,) = created
    made = volumes_of(attrs)
    assert len(made) == 2
    assert not set(made) & volume_names(docker_client)
    assert volumes_left(docker_client, created) == set()
    assert_clean(docker_client, runner)


def test_the_sweeps_remove_anonymous_volumes(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    created: list[dict[str, object]],
) -> None:
    """Containers left behind (this process's, a dead worker's) go with their volumes."""
    left = [
        docker_client.containers.create(  # type: ignore[attr-defined]
            test_images["volumes"],  # created, never started: its volumes exist from now on
            labels={LABEL_RUNNER: "1", LABEL_HOST: "test-host", LABEL_OWNER: owner},
            network_mode="none",
        )
        for owner in (runner.owner, "1.1")
    ]
    try:
        made = {m["Name"] for c in left for m in c.attrs["Mounts"] if m["Type"] == "volume"}
        assert len(made) == 10  # five VOLUME paths each
        assert runner.remove_leftovers() == 1
        assert cleanup_orphans(docker_client, host="test-host") >= 1  # type: ignore[arg-type]
        assert not any(_exists(c) for c in left)
        assert not made & volume_names(docker_client)
        assert volumes_left(docker_client, created) == set()
    finally:
        for container in left:
            if _exists(container):
                container.remove(force=True, v=True)


# --- images: tarballs and pulls by digest ------------------------------------------------


def test_load_image_from_docker_save_tarballs(
    docker_client: object,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
) -> None:
    """An image that exists nowhere on the engine any more comes back from its tarball."""
    client = docker_client
    context = tmp_path / "context"
    shutil.copytree(IMAGES_DIR / "good", context)
    (context / "nonce").write_text(str(time.time_ns()))  # a layer no other image has
    with open(context / "Dockerfile", "a") as f:
        f.write("COPY nonce /app/nonce\n")
    uploaded, _ = client.images.build(  # type: ignore[attr-defined]
        path=str(context), tag="szbench-test/uploaded:v1", rm=True
    )
    tar = tmp_path / "algo.tar"
    with open(tar, "wb") as f:
        for chunk in uploaded.save(named="szbench-test/uploaded:v1"):
            f.write(chunk)
    with open(tar, "rb") as src, gzip.open(tmp_path / "algo.tar.gz", "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)

    for path in (tar, tmp_path / "algo.tar.gz"):
        client.images.remove(uploaded.id, force=True)  # type: ignore[attr-defined]
        with pytest.raises(ImageError):
            inspect_image(uploaded.id, client)  # type: ignore[arg-type]
        info = load_image_tarball(path, client)  # type: ignore[arg-type]
        assert info.digest == uploaded.id
        assert info.tags == ()  # the archive's name is never applied (issue 21 point 2)
    result = runner.run(
        image=info.digest, recording=recording, output_dir=tmp_path / "o", limits=LIMITS
    )
    assert result.outcome is RunOutcome.OK
    assert result.image_digest == uploaded.id
    client.images.remove(uploaded.id, force=True)  # type: ignore[attr-defined]


def test_an_archive_over_the_image_limits_never_reaches_the_engine(
    docker_client: object, tmp_path: Path
) -> None:
    """A small archive whose layer expands past the image limit: refused before `docker
    load`, so the engine never expands it (the image is not on the engine afterwards)."""
    import tarfile

    from szbench.algorithms.image_check import ArchiveLimits
    from szbench_worker.runner import ImageRefused
    from tests.platform.images import docker_save

    zeros = tarfile.TarInfo("app/zeros.bin")
    path = tmp_path / "secret-folder" / "algo.tar.gz"
    path.parent.mkdir()
    image_id = docker_save(path, gzip=True, layers=[[(zeros, b"\0" * (4 * 1024**2))]])
    limits = ArchiveLimits(
        max_members=100,
        max_expanded_bytes=1024**3,
        max_layer_members=100,
        max_image_bytes=1024**2,
        max_expansion_ratio=20.0,
    )
    with pytest.raises(ImageRefused) as err:
        load_image_tarball(path, docker_client, limits=limits)  # type: ignore[arg-type]
    assert "SZBENCH_IMAGE_MAX_BYTES" in str(err.value)
    assert "secret-folder" not in str(err.value)
    with pytest.raises(ImageError, match="not present"):
        inspect_image(image_id, docker_client)  # type: ignore[arg-type]
    # The same archive within the limits loads: the refusal above was the limit's.
    limits = ArchiveLimits(100, 1024**3, 100, 8 * 1024**2, 20.0)
    try:
        info = load_image_tarball(path, docker_client, limits=limits)  # type: ignore[arg-type]
        assert info.digest == image_id
    finally:
        docker_client.images.remove(image_id, force=True)  # type: ignore[attr-defined]


def test_bad_tarball_is_a_clear_image_error(docker_client: object, tmp_path: Path) -> None:
    bogus = tmp_path / "secret-folder" / "algo.tar"
    bogus.parent.mkdir()
    bogus.write_bytes(b"this is not a tar archive" * 100)
    with pytest.raises(ImageError) as err:
        load_image_tarball(bogus, docker_client)  # type: ignore[arg-type]
    assert "algo.tar" in str(err.value)
    assert "secret-folder" not in str(err.value)


def test_missing_image_is_an_image_error(
    runner: DockerRunner, recording: Path, tmp_path: Path
) -> None:
    with pytest.raises(ImageError, match="not present"):
        runner.run(
            image="szbench-test/does-not-exist:1",
            recording=recording,
            output_dir=tmp_path,
            limits=LIMITS,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pull_by_digest_from_a_registry(
    docker_client: object,
    test_images: dict[str, str],
    registry: str,
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
) -> None:
    client = docker_client
    good = client.images.get(test_images["good"])  # type: ignore[attr-defined]
    repo = f"{registry}/szbench/good"
    good.tag(repo, "v1")
    for line in client.images.push(repo, tag="v1", stream=True, decode=True):  # type: ignore[attr-defined]
        assert "error" not in line, line
    digest = next(
        d for d in client.images.get(f"{repo}:v1").attrs["RepoDigests"] if d.startswith(repo)
    )  # type: ignore[attr-defined]
    client.images.remove(f"{repo}:v1")  # type: ignore[attr-defined]
    for d in client.images.get(good.id).attrs.get("RepoDigests") or []:  # type: ignore[attr-defined]
        if d.startswith(repo):
            client.images.remove(d)  # type: ignore[attr-defined]

    info = pull_image(digest, client)  # type: ignore[arg-type]
    assert info.digest == good.id
    assert digest in info.repo_digests
    result = runner.run(image=digest, recording=recording, output_dir=tmp_path / "o", limits=LIMITS)
    assert result.outcome is RunOutcome.OK
    assert result.image_digest == good.id
    client.images.remove(digest)  # type: ignore[attr-defined]

    with pytest.raises(ImageError, match="by digest"):
        pull_image(f"{repo}:v1", client)  # type: ignore[arg-type]
    with pytest.raises(ImageError, match="the registry has no such image"):
        pull_image(f"{repo}@sha256:{'0' * 64}", client)  # type: ignore[arg-type]


# --- orphans of a killed worker ----------------------------------------------------------

WORKER_SCRIPT = """
import sys
from pathlib import Path
from szbench_worker.docker_runner import DockerRunner
from szbench_worker.runner import Limits
runner = DockerRunner(work_dir=Path(sys.argv[1]), host=sys.argv[5])
print(runner.owner, flush=True)
runner.run(image=sys.argv[2], recording=Path(sys.argv[3]), output_dir=Path(sys.argv[4]),
           limits=Limits(memory_bytes=64 * 1024**2, timeout_s=120))
"""


def test_cleanup_orphans_after_a_killed_worker(
    docker_client: object,
    test_images: dict[str, str],
    work_dir: Path,
    recording: Path,
    tmp_path: Path,
) -> None:
    """SIGKILL a worker mid-run: its container and staging stay; the startup sweep removes them."""
    # A host name of its own: the sweep with everything=True below removes every container of
    # its host, which must not reach other tests' runs on the same engine.
    host = f"test-host-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WORKER_SCRIPT,
            str(work_dir),
            test_images["sleeper"],
            str(recording),
            str(tmp_path),
            host,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    token = proc.stdout.readline().strip()
    label = {"label": f"{LABEL_OWNER}={token}"}
    for _ in range(200):
        running = docker_client.containers.list(filters=label, ignore_removed=True)  # type: ignore[attr-defined]
        if running:
            break
        time.sleep(0.1)
    assert running, "the worker never started its container"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert docker_client.containers.list(all=True, filters=label, ignore_removed=True)  # type: ignore[attr-defined]
    assert any(p.name.startswith(f"run-{host}-{token}-") for p in work_dir.iterdir())
    # Another host's staging directory in a shared work dir is not this sweep's business.
    foreign = work_dir / "run-other-host-1.1-abc123"
    foreign.mkdir()

    # A live worker's container is never touched by another worker's sweep.
    live = docker_client.containers.create(  # type: ignore[attr-defined]
        test_images["sleeper"],
        labels={LABEL_RUNNER: "1", LABEL_HOST: host, LABEL_OWNER: owner_token()},
        network_mode="none",
    )
    try:
        assert cleanup_orphans(docker_client, work_dir=work_dir, host=host) == 1  # type: ignore[arg-type]
        assert docker_client.containers.list(all=True, filters=label, ignore_removed=True) == []  # type: ignore[attr-defined]
        assert list(work_dir.iterdir()) == [foreign]
        foreign.rmdir()
        assert str(work_dir) not in Path("/proc/mounts").read_text()
        live.reload()
        assert cleanup_orphans(docker_client, host="other-host") == 0  # type: ignore[arg-type]
        assert cleanup_orphans(docker_client, host=host, everything=True) == 1  # type: ignore[arg-type]
    finally:
        if _exists(live):
            live.remove(force=True)


def _exists(container: object) -> bool:
    try:
        container.reload()  # type: ignore[attr-defined]
    except Exception:
        return False
    return True
