"""The worker judges the engine it talks to, not the first ``dockerd`` on the host (issue 29
item 12).

A second engine of the test's own runs beside the shared one, in a mount namespace of its
own (``unshare --mount``) and a network namespace of its own (so its ``--bridge none``
never touches the host's docker0), with its own data-root, exec-root, pidfile and socket.
A tmpfs this process mounts is invisible to that engine, so a root worker talking to it
must let the engine mount ``/output`` (a keeper of ``SZBENCH_RUNNER_HELPER_IMAGE``), and a
worker inside that engine's mount namespace may mount it itself. Both used to be decided by
whichever process named ``dockerd`` came first in ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner
from szbench_worker.runner import RunnerError
from tests.worker import _live_services as live
from tests.worker.conftest import BASE_IMAGE, LIMITS, REPO, write_edf

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def second_engine(docker_client: Any, test_images: dict[str, str]) -> Iterator[live.PrivateEngine]:
    engine = live.PrivateEngine(own_mounts=True)
    engine.start()
    try:
        # The good image and the helper (the base image) into it, by the same ids.
        saved = docker_client.api.get_image(test_images["good"])
        engine.client().api.load_image(b"".join(saved))
        engine.client().api.load_image(b"".join(docker_client.api.get_image(BASE_IMAGE)))
        yield engine
    finally:
        engine.remove()


def test_the_engine_is_the_process_behind_the_socket(
    docker_client: Any, second_engine: live.PrivateEngine
) -> None:
    from szbench_worker.docker_runner.client import engine_pid
    from szbench_worker.docker_runner.mounts import shares_mounts_with_engine

    ours = second_engine.client()
    assert engine_pid(ours) == second_engine.pid
    shared = engine_pid(docker_client)
    assert shared is not None
    assert shared != second_engine.pid
    with open(f"/proc/{shared}/comm") as f:
        assert f.read().strip() == "dockerd"
    assert shares_mounts_with_engine(docker_client)
    assert not shares_mounts_with_engine(ours)


def test_a_root_worker_beside_an_engine_in_another_mount_namespace_lets_it_mount_output(
    second_engine: live.PrivateEngine, test_images: dict[str, str], tmp_path: Path
) -> None:
    """The first dockerd in /proc (the shared one) shares this process's mounts; the engine
    this worker talks to does not: a tmpfs mounted here would never reach its containers."""
    client = second_engine.client()
    with pytest.raises(RunnerError, match="SZBENCH_RUNNER_HELPER_IMAGE"):
        DockerRunner(client, work_dir=tmp_path / "refused", host="test-host", cpu_pool="none")
    runner = DockerRunner(
        client,
        work_dir=tmp_path / "work",
        host="test-host",
        cpu_pool="none",
        helper_image=BASE_IMAGE,
    )
    assert runner.output_tmpfs is False
    recording = write_edf(tmp_path / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf")
    result = runner.run(
        image=test_images["good"], recording=recording, output_dir=tmp_path / "out", limits=LIMITS
    )
    assert result.outcome is RunOutcome.OK, result.admin_log
    assert result.annotations is not None


# Run inside the second engine's mount namespace: the worker there must mount /output itself.
_IN_ITS_NAMESPACE = """
import json, sys
from pathlib import Path
import docker
from szbench_worker.docker_runner import DockerRunner
from tests.worker.conftest import LIMITS
url, work, image, recording, out = sys.argv[1:]
runner = DockerRunner(docker.DockerClient(base_url=url, timeout=120), work_dir=Path(work),
                      host="test-host", cpu_pool="none")
result = runner.run(image=image, recording=Path(recording), output_dir=Path(out), limits=LIMITS)
print(json.dumps({"tmpfs": runner.output_tmpfs, "outcome": result.outcome.value,
                  "log": result.admin_log[-2000:]}))
"""


def test_a_root_worker_in_the_engines_mount_namespace_mounts_output_itself(
    second_engine: live.PrivateEngine, test_images: dict[str, str], tmp_path: Path
) -> None:
    """Here the shared dockerd, first in /proc, is in another mount namespace than the
    worker: judged by it, the worker refused every run (no helper image is set)."""
    recording = write_edf(tmp_path / "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf")
    # Entering a mount namespace moves to its root: every path absolute.
    parts = (REPO / "platform", REPO / "worker", REPO / "scoring", REPO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in parts)}
    env["SZBENCH_DATA_DIR"] = str(tmp_path / "data")
    env.pop("SZBENCH_RUNNER_HELPER_IMAGE", None)
    script = [_IN_ITS_NAMESPACE, second_engine.url, str(tmp_path / "work"), test_images["good"]]
    command = ["nsenter", f"--mount=/proc/{second_engine.pid}/ns/mnt", f"--wd={REPO}", "--"]
    command += [sys.executable, "-c", *script, str(recording), str(tmp_path / "out")]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["tmpfs"] is True
    assert answer["outcome"] == RunOutcome.OK.value, answer["log"]


def test_a_socket_handed_to_the_engine_by_a_service_manager(tmp_path: Path) -> None:
    """systemd's socket activation: the socket's listener (the peer's credentials) is the
    manager; the engine is the process named dockerd that holds the listening socket."""
    from szbench_worker.docker_runner.client import engine_pid

    path = str(tmp_path / "engine.sock")
    manager = subprocess.Popen(
        [sys.executable, "-c", _MANAGER, path], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        assert manager.stdout is not None
        child = int(manager.stdout.readline())
        client = docker.DockerClient(base_url=f"unix://{path}", version="1.41")
        assert engine_pid(client) == child
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path)  # the peer is the manager, which bound and listened
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        manager.kill()
        manager.wait()


# Binds and listens (as systemd does), then hands the socket to a child named "dockerd".
_MANAGER = """
import ctypes, os, socket, sys, time
sock = socket.socket(socket.AF_UNIX)
sock.bind(sys.argv[1])
sock.listen(8)
pid = os.fork()
if pid == 0:
    ctypes.CDLL(None).prctl(15, b"dockerd", 0, 0, 0)  # PR_SET_NAME
    time.sleep(600)
    os._exit(0)
print(pid, flush=True)
time.sleep(600)
"""
