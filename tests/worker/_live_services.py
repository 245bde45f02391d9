"""Set-up for tests that run the real parts beside this process.

Those tests start workers, the API or the CLI as child processes that share this process's
settings, PostgreSQL, Redis and the Docker engine; these helpers point both sides at the
same services, wait for the children, stop them and remove what they leave behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
import pytest
import redis

from szbench import db, queue
from szbench.config import get_settings
from szbench.db import session_scope

from ._pipeline_factories import truncate_all

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port free at the time of asking."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    *,
    poll_s: float = 0.2,
    logs: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that.

    On timeout the assertion names ``what`` and ends with ``logs()``: a child process's log
    is the only account of why it never got there.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    message = f"timed out after {timeout_s} s waiting for {what}"
    raise AssertionError(f"{message}\n{logs()}" if logs is not None else message)


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], timeout_s: float = 30) -> None:
    """SIGTERM every process still running, then wait for each; kill one that does not end.

    All are signalled before any is waited for, so that their warm shutdowns overlap.
    """
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def use_settings(settings_env: pytest.MonkeyPatch, values: Mapping[str, str]) -> None:
    """Set ``values`` for this process (and so for children started after) and drop the
    settings, engine and Celery app built from the previous ones."""
    for key, value in values.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    queue.reset_celery()


def child_env() -> dict[str, str]:
    """This process's environment for a child that imports the repository's packages from
    the working tree (not from an installed copy)."""
    packages = os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring"))
    return {**os.environ, "PYTHONPATH": packages}


def faketime_env(offset: str) -> dict[str, str]:
    """Environment that runs a child process on a clock ``offset`` from this host's
    (libfaketime: ``"+1h"``, ``"-10m"``), its monotonic clock left alone. The Debian
    package ``faketime`` (scripts/test-services.sh installs it)."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        raise AssertionError("libfaketime is not installed (scripts/test-services.sh: faketime)")
    return {
        "LD_PRELOAD": str(found[0]),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def log_dir_for(tmp_path: Path, host: str) -> Path:
    """A folder for the child processes' logs, under SZBENCH_TEST_LOG_DIR when set (CI keeps
    that folder as an artefact) and else under ``tmp_path``."""
    log_dir = Path(os.environ.get("SZBENCH_TEST_LOG_DIR") or tmp_path) / host
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


def empty_broker(url: str) -> redis.Redis:
    """The Redis database at ``url``, emptied: an earlier run's messages must not reach this
    test's workers."""
    broker = redis.Redis.from_url(url)
    broker.flushdb()
    return broker


def release_broker(broker: redis.Redis) -> None:
    """Drop the Celery app bound to ``broker``, empty it for the next test and close it."""
    queue.reset_celery()
    broker.flushdb()
    broker.close()


def remove_leftovers(docker_client: Any, host: str) -> None:
    """Remove every container labelled with ``host`` and every row in PostgreSQL: the child
    processes committed them, so no transaction of this process can roll them back."""
    from szbench_worker.docker_runner import cleanup_orphans

    cleanup_orphans(docker_client, host=host, everything=True)
    with session_scope() as session:
        truncate_all(session)


def build_archive(tmp_path: Path, docker_client: Any, program: str, name: str) -> tuple[Path, str]:
    """An algorithm image running ``program``, ``docker save``d and then removed from the
    engine (so the run under test must load or pull it): the archive and the image's id. A
    fresh MARK makes its id new each time, so no earlier image stands in for it."""
    from szbench_worker.docker_runner import build_image

    context = tmp_path / "algorithm"
    context.mkdir()
    (context / "run.py").write_text(program)
    (context / "Dockerfile").write_text(
        f"FROM szbench/python-numpy:bookworm\nCOPY run.py /run.py\nENV MARK={uuid.uuid4().hex}\n"
        'USER 1000\nCMD ["python3", "/run.py"]\n'
    )
    tag = f"szbench-test/{name}:{uuid.uuid4().hex[:8]}"
    image_id = build_image(context, tag, docker_client).digest
    archive = tmp_path / "algorithm.tar"
    subprocess.run(["docker", "save", "-o", str(archive), tag], check=True)
    docker_client.images.remove(image_id, force=True)
    return archive, image_id


class PrivateEngine:
    """A dockerd of a test's own beside the shared one, which it never touches: its own
    data-root, exec-root, pidfile and socket, no bridge, in a network namespace of its own (a
    dockerd with ``--bridge none`` deletes the host's docker0 at start, so it must not see the
    host's links); ``own_mounts`` puts it in a mount namespace of its own too. A test may stop
    and start it."""

    def __init__(self, *, own_mounts: bool = False, extra_args: Sequence[str] = ()) -> None:
        # Short: containerd's sockets live under the exec-root (a path length limit).
        self.root = Path(tempfile.mkdtemp(prefix="szbe-", dir="/tmp"))
        self.socket = self.root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None
        mounts = ["--mount", "--propagation", "private"] if own_mounts else []
        self._args = ["unshare", *mounts, "--net", "--", "dockerd"]
        self._args += ["--data-root", str(self.root / "data"), "--exec-root", str(self.root / "x")]
        self._args += ["--pidfile", str(self.root / "docker.pid"), "-H", self.url]
        self._args += ["--bridge", "none", "--iptables=false", "--ip6tables=false", *extra_args]

    def start(self, timeout_s: float = 90) -> None:
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(self._args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                docker.DockerClient(base_url=self.url, timeout=5).ping()
                return
            except Exception:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.3)
        raise AssertionError((self.root / "dockerd.log").read_text(errors="replace")[-3000:])

    @property
    def pid(self) -> int:
        return int((self.root / "docker.pid").read_text())

    def client(self, timeout_s: int = 120) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=timeout_s)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        """Its containers and volumes, the engine, its mounts and its folder."""
        try:
            client = self.client()
            for container in client.containers.list(all=True):
                container.remove(force=True)
            for volume in client.volumes.list():
                volume.remove(force=True)
            client.close()
        except Exception:
            pass
        self.stop()
        subprocess.run(["umount", "-R", "-l", str(self.root)], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
