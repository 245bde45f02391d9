#!/usr/bin/env python3
"""Fault drill: run evaluations through the real pipeline while breaking its parts.

Starts its own PostgreSQL (``initdb``/``pg_ctl``) and Redis (``redis-server``) on free
ports under a scratch folder, a Docker engine of its own (a second ``dockerd`` in a network
namespace of its own, with its own data-root, exec-root, pidfile and socket: the drill stops
it, never the host's engine), a prefork ``celery worker`` (concurrency 1) for the ``cpu``
and ``score`` queues and the scheduler (``worker --beat -Q maintenance,score``), as
docker-compose.yml does. The
runner's work directory (``SZBENCH_RUNNER_WORK_DIR``) is a tmpfs of the drill's own, 64 MiB
over the default ``SZBENCH_WORKER_MIN_FREE_BYTES``, so that it can be filled. The algorithm
is a small image built from the local base image that sleeps a few seconds and writes one
detection per recording. First an undisturbed evaluation (the reference), then one fresh
evaluation (no reuse) per fault:

- ``malformed-message``: a message that is not JSON pushed onto the ``cpu`` queue just
  before the evaluation is submitted (the worker must dead-letter it and go on);
- ``full-work-dir``: the runner's work directory filled to its last byte mid-run for
  ``--full-s`` seconds (default 120), then emptied;
- ``engine-outage``: the drill's Docker engine stopped mid-run for ``--engine-outage-s``
  seconds (default 180), then started again;

- ``worker-kill``: the whole worker (main process and pool) killed with SIGKILL mid-run,
  then started again on the same host;
- ``child-kill``: the pool process running the container killed with SIGKILL;
- ``redis-empty``: Redis killed mid-evaluation and started again empty;
- ``postgres-stop``: PostgreSQL stopped (immediate) for ``--pg-outage-s`` mid-run;
- ``broker-down-submit``: Redis down while the evaluation is submitted (its start task
  cannot be sent), started again empty a few seconds later;
- ``clock-ahead-killed``: a worker whose clock runs an hour ahead (libfaketime, as another
  host's clock would be off) takes a run and is killed with SIGKILL, never to return; the
  regular worker starts again, and only the reconciler, judging the dead worker by its
  heartbeat's age on the database's clock, can give the run back;
- ``clock-behind``: a worker whose clock runs ten minutes behind does the whole
  evaluation; the drill checks that every stored time is in order and that the
  evaluation's page never said that no worker served its queue.
- ``registry-down-pull``: the registry (Debian's ``docker-registry``) stopped for
  ``--registry-outage-s`` (default 120) while the worker must pull the version's image by
  digest (it was removed from the drill's engine first);
- ``registry-down-push``: the registry stopped for ``--push-outage-s`` (default 60) while a
  new version of the image is submitted through the API with ``szbench algorithm submit``
  (the platform pushes each accepted upload to the registry); then its evaluation;
- ``api-down-fetch``: the platform's API (uvicorn) stopped for ``--api-outage-s`` (default
  120) while the worker must fetch the recordings (a dataset whose files this worker does not
  see, its cache emptied first);
- ``cache-full``: the worker's recording cache's disk (a tmpfs of its own) filled to its last
  byte for ``--cache-full-s`` (default 120) while it must fetch;
- ``missing-setting``: a worker started without ``SZBENCH_PLATFORM_URL`` and
  ``SZBENCH_WORKER_TOKEN`` must fetch; after ``--setting-fix-s`` (default 60) the operator
  restarts it with them.

For the last five the drill also runs, beside its own engine, a registry (reached from the
engine's network namespace through a relay of its own: a unix socket across the namespaces),
the API (in a mount namespace where the second dataset's folder exists; the worker, like a
worker on another host, does not see it and fetches its recordings by checksum), a worker
token and a researcher's token, and a tmpfs for the recording cache. Each of those faults
records what a researcher and an operator see meanwhile (the evaluation's hold, the worker's
fault), printed with its row.

Every timer is the shipped default (heartbeat, reconciler, retry backoff, visibility
timeout) unless an option below sets it; the header of the output says which were changed.

Per fault it prints: recovered (DONE within ``--timeout-s``), seconds from the fault to
DONE, stored results per recording (must be 1), containers started per recording (the
run's ``attempts``), and whether every recording's counts and the dataset's scores equal
the undisturbed run's. Exit status 1 when any fault did not recover or changed a score.

Run (root, with the Docker engine, the base image and docker-registry:
scripts/test-services.sh)::

    .venv/bin/python scripts/fault_drill.py [--recordings 4] [--pg-outage-s 60] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))


BASE_IMAGE = "szbench/python-numpy:bookworm"
IMAGE = "szbench-drill/slow-detector:latest"
RUN_PY = """import os, time
from pathlib import Path
time.sleep(float(os.environ.get("SLOW_S", "3")))
h = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
d = int(h[236:244]) * float(h[244:252])
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"100.0\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{d:.1f}\\n")
"""
FAULTS = (
    "malformed-message",
    "full-work-dir",
    "engine-outage",
    "worker-kill",
    "child-kill",
    "redis-empty",
    "postgres-stop",
    "broker-down-submit",
    "clock-ahead-killed",
    "clock-behind",
    "registry-down-pull",
    "registry-down-push",
    "api-down-fetch",
    "cache-full",
    "missing-setting",
)
#: The faults whose evaluation runs on the dataset this worker must fetch, not see.
REMOTE_FAULTS = ("api-down-fetch", "cache-full", "missing-setting")
#: Timers the drill may shorten: option name -> setting. None (the default): shipped value.
TIMERS = {
    "heartbeat_s": "SZBENCH_WORKER_HEARTBEAT_INTERVAL_S",
    "heartbeat_timeout_s": "SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S",
    "reconcile_interval_s": "SZBENCH_RECONCILE_INTERVAL_S",
    "stale_s": "SZBENCH_RECONCILE_STALE_S",
    "claim_grace_s": "SZBENCH_RECONCILE_CLAIM_GRACE_S",
    "backoff_max_s": "SZBENCH_TASK_RETRY_BACKOFF_MAX_S",
}
MiB = 1024**2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise SystemExit(f"{name} not found (install postgresql)")


class Postgres:
    """A scratch PostgreSQL cluster (run as the ``postgres`` user when this is root)."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "pg"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        # Never a pipe: the server that pg_ctl starts would hold it open, and we would wait.
        subprocess.run(
            [*self._as, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def init(self) -> None:
        self.dir.mkdir()
        if self._as:
            shutil.chown(self.dir, "postgres", "postgres")
            (self.dir.parent / "postgres.log").touch()
            shutil.chown(self.dir.parent / "postgres.log", "postgres", "postgres")
            os.chmod(self.dir.parent, 0o755)  # noqa: S103 (postgres must reach its cluster)
        self._run(_pg_bin("initdb"), "-D", str(self.dir), "-U", "postgres", "--auth=trust")
        self.start()

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        log = str(self.dir.parent / "postgres.log")
        self._run(_pg_bin("pg_ctl"), "-D", str(self.dir), "-o", opts, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", str(self.dir), "-m", "immediate", "-w", "stop")


class Redis:
    """A scratch ``redis-server`` without persistence: a restart starts it empty."""

    def __init__(self, root: Path) -> None:
        self.dir = root
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.dir)]
        binary = shutil.which("redis-server") or "redis-server"
        self.proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
        for _ in range(100):
            with contextlib.suppress(redis.ConnectionError):
                if redis.Redis.from_url(self.url).ping():
                    return
            time.sleep(0.1)
        raise SystemExit("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Dockerd:
    """A second dockerd of the drill's own, which it may stop and start (never the host's
    engine, never the host's network: ``--bridge none`` in the host's network namespace
    would delete the host's docker0)."""

    def __init__(self) -> None:
        # Short: containerd's sockets live under the exec-root (a path length limit).
        self.root = Path(tempfile.mkdtemp(prefix="szdrill-", dir="/tmp"))
        self.url = f"unix://{self.root / 'docker.sock'}"
        self.proc: subprocess.Popen[bytes] | None = None
        #: Called after every start (the registry's relay into its new network namespace).
        self.on_start: list[Callable[[], None]] = []

    def start(self) -> None:
        import docker

        args = ["unshare", "--net", "--", "dockerd", "--data-root", str(self.root / "data")]
        args += ["--exec-root", str(self.root / "x"), "--pidfile", str(self.root / "docker.pid")]
        args += ["-H", self.url, "--bridge", "none", "--iptables=false", "--ip6tables=false"]
        with open(self.root / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            up = False
            with contextlib.suppress(Exception):  # not up yet
                up = bool(docker.DockerClient(base_url=self.url, timeout=5).ping())
            if up:
                for hook in self.on_start:
                    hook()
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"the drill's dockerd did not start; see {self.root / 'dockerd.log'}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        import docker

        with contextlib.suppress(Exception):
            client = docker.DockerClient(base_url=self.url, timeout=30)
            for container in client.containers.list(all=True):
                container.remove(force=True)
        self.stop()
        subprocess.run(["umount", "-R", "-l", str(self.root)], check=False, capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


class SmallDisk:
    """A tmpfs just over the default free-space floor, for a work directory to fill."""

    def __init__(self, root: Path, size_bytes: int) -> None:
        self.path = root / "small-disk"
        self.path.mkdir()
        size = f"size={size_bytes}"
        subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(self.path)], check=True)
        self.filler = self.path / "filler"

    def fill(self) -> None:
        st = os.statvfs(self.path)
        # The last byte: whatever else the runner tries to write there fails (ENOSPC).
        free = st.f_bavail * st.f_frsize
        subprocess.run(["fallocate", "-l", str(free), str(self.filler)], check=True)

    def empty(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remove(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


def _endpoint(spec: str) -> tuple[int, Any]:
    """``tcp:HOST:PORT`` or ``unix:PATH`` as a socket family and address."""
    kind, _, rest = spec.partition(":")
    if kind == "unix":
        return socket.AF_UNIX, rest
    host, _, port = rest.rpartition(":")
    return socket.AF_INET, (host, int(port))


def relay(listen: str, connect: str) -> None:
    """Forward every connection to ``listen`` to ``connect`` (the drill's ``--relay``): the
    registry on this namespace's loopback, reached from the engine's network namespace
    through a unix socket (a path crosses network namespaces, a loopback port does not).
    A connection that cannot be forwarded is closed at once, as a stopped registry's is."""
    family, address = _endpoint(listen)
    server = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
    server.bind(address)
    server.listen(64)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve(client: socket.socket) -> None:
        target_family, target = _endpoint(connect)
        upstream = socket.socket(target_family, socket.SOCK_STREAM)
        try:
            upstream.connect(target)
        except OSError:
            client.close()
            upstream.close()
            return
        back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        back.start()
        pump(client, upstream)
        back.join()
        client.close()
        upstream.close()

    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


class Registry:
    """Debian's ``docker-registry`` on a loopback port of this namespace, with a relay into
    the drill engine's network namespace at the same address (so one ``SZBENCH_REGISTRY``
    names it for the platform's pushes and the engine's pulls)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.socket = root / "registry.sock"
        self.config = root / "registry.yml"
        self.config.write_text(
            "version: 0.1\nlog: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'registry-data'}}}}}\n"
            f'http: {{addr: "{self.address}"}}\n'
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.relays: list[subprocess.Popen[bytes]] = []
        self.engine_relay: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise SystemExit("docker-registry not found (apt-get install docker-registry)")
        with open(self.root / "registry.log", "ab") as log:
            self.proc = subprocess.Popen(
                [binary, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            time.sleep(0.1)
        raise SystemExit("the drill's registry did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def relay_into(self, engine: Dockerd) -> None:
        """(Re)start the relays: this namespace's side once, the engine's side for the
        network namespace the engine has now (a new one each time it starts)."""
        me = [sys.executable, str(Path(__file__).resolve()), "--relay"]
        if not self.relays:
            self.relays.append(
                subprocess.Popen([*me, f"unix:{self.socket}", f"tcp:{self.address}"])
            )
        if self.engine_relay is not None:
            self.engine_relay.kill()
            self.engine_relay.wait()
        assert engine.proc is not None
        into = ["nsenter", f"--net=/proc/{engine.proc.pid}/ns/net", "--"]
        # A new network namespace's loopback is down: up, for the relay's 127.0.0.1.
        subprocess.run([*into, "ip", "link", "set", "lo", "up"], check=True)
        self.engine_relay = subprocess.Popen(
            [*into, *me, f"tcp:{self.address}", f"unix:{self.socket}"]
        )

    def remove(self) -> None:
        self.stop()
        for proc in [*self.relays, self.engine_relay]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


class Api:
    """The platform's API (uvicorn) in a mount namespace of its own where ``hidden`` (a
    dataset folder the worker must not see) is bind-mounted from ``real``."""

    def __init__(self, root: Path, env: dict[str, str], hidden: Path, real: Path) -> None:
        self.root = root
        self.env = env
        self.hidden = hidden
        self.real = real
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
        cmd += ['mount --bind "$0" "$1" && shift && exec "$@"', str(self.real), str(self.hidden)]
        cmd += [sys.executable, "-m", "uvicorn", "szbench.app:create_production_app", "--factory"]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.root / "api.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        import requests

        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"the drill's API did not start; see {self.root / 'api.log'}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Worker:
    """A ``celery worker`` process in its own session (so kill -9 can take its pool too)."""

    def __init__(self, name: str, env: dict[str, str], log: Path, *args: str) -> None:
        self.name, self.env, self.log, self.args = name, env, log, args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
        cmd += ["-n", f"{self.name}@%h", "--without-mingle", "--without-gossip", *self.args]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        size = self.log.stat().st_size
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(max(0, size - 200))
                if b"ready." in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"worker {self.name} did not start; see {self.log}")

    def kill_all(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill_all()


@dataclass
class Outcome:
    fault: str
    recovered: bool
    seconds: float
    results_per_recording: set[int]
    attempts_max: int
    scores_equal: bool
    status: str
    note: str = ""


def build_image() -> str:
    """The drill's image, built on the host's engine (where the base image is)."""
    from szbench_worker.docker_runner import build_image as build
    from szbench_worker.docker_runner import connect

    with tempfile.TemporaryDirectory() as ctx:
        (Path(ctx) / "run.py").write_text(RUN_PY)
        (Path(ctx) / "Dockerfile").write_text(
            f'FROM {BASE_IMAGE}\nCOPY run.py /run.py\nCMD ["python3", "/run.py"]\n'
        )
        return build(Path(ctx), IMAGE, connect()).digest


def save_image(digest: str, path: Path) -> None:
    """The image as ``docker save`` writes it, by id (its tag is any checkout's to move)."""
    from szbench_worker.docker_runner import connect

    with path.open("wb") as fh:
        for chunk in connect().api.get_image(digest):
            fh.write(chunk)


def load_image(digest: str, engine: Dockerd) -> None:
    """The image (with its base layers) into the drill's engine, by the same id."""
    import docker

    from szbench_worker.docker_runner import connect

    saved = connect().api.get_image(digest)
    client = docker.DockerClient(base_url=engine.url, timeout=300)
    client.api.load_image(b"".join(saved))
    client.images.get(digest)  # raises when the load did not give it


def seed(prepared: Path, digest: str, timeout_s: int) -> tuple[int, int]:
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, User, VersionStatus

    with session_scope() as session:
        user = User(email="drill@example.org")
        session.add(user)
        session.flush()
        algorithm = Algorithm(owner_id=user.id, name="slow-detector")
        session.add(algorithm)
        session.flush()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="1",
            image_digest=digest,
            image_reference=IMAGE,
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        limits = {"timeout_s": timeout_s, "memory_bytes": 256 * 1024**2, "cpus": 1}
        dataset = create_dataset(session, slug="drill", run_limits=limits)
        dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
        session.flush()
        return version.id, dv.id


def make_tokens() -> dict[str, str]:
    """A worker token (an admin's, scope ``worker`` alone) and a researcher's token."""
    from szbench.auth import service as auth
    from szbench.db import session_scope
    from szbench.models import Role

    with session_scope() as session:
        ops = auth.create_user(session, email="ops@example.org", password=None, role=Role.ADMIN)
        _, worker = auth.create_token(session, ops, name="drill-host", scopes=["worker"])
        researcher = auth.create_user(session, email="researcher@example.org", password=None)
        _, submitter = auth.create_token(session, researcher, scopes=["read", "write"])
    return {"worker": worker, "submit": submitter}


def seed_remote(real: Path, hidden: Path, recs: list[Any], timeout_s: int) -> int:
    """A second dataset (not held out: no new version is evaluated on it by itself) whose
    files the worker does not see: registered from ``real``, recorded at ``hidden``."""
    from szbench.datasets.service import create_dataset, register_dataset_version
    from szbench.db import session_scope
    from szbench.models import DatasetKind
    from tests.worker._pipeline_factories import make_prepared_dataset

    make_prepared_dataset(real, recs, seed=9)
    with session_scope() as session:
        limits = {"timeout_s": timeout_s, "memory_bytes": 256 * 1024**2, "cpus": 1}
        dataset = create_dataset(
            session,
            slug="drill-remote",
            kind=DatasetKind.PUBLIC_SAMPLE,
            run_limits=limits,
            confirm_public=True,
        )
        dv = register_dataset_version(session, dataset, version="1", prepared_path=real)
        dv.path = str(hidden)
        session.flush()
        return dv.id


def seed_pulled(digest: str, registry_address: str, archive: Path) -> int:
    """The image pushed to the drill's registry, and a version that runs it from there."""
    from szbench.algorithms import registry
    from szbench.config import Settings
    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, VersionStatus

    pushed = registry.push_archive(archive, digest, Settings(registry=registry_address))
    with session_scope() as session:
        algorithm = session.query(Algorithm).filter_by(name="slow-detector").one()
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version="pulled",
            image_digest=digest,
            registry_digest=pushed.digest,
            status=VersionStatus.ACTIVE,
        )
        session.add(version)
        session.flush()
        return version.id


def submit(version_id: int, dv_id: int) -> int:
    """A fresh evaluation (no reuse); its id even when its start task could not be sent."""
    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import AlgorithmVersion, DatasetVersion, Evaluation

    created: list[int] = []
    try:
        with session_scope() as session:
            evaluation = create_evaluation(
                session,
                algorithm_version=session.get_one(AlgorithmVersion, version_id),
                dataset_version=session.get_one(DatasetVersion, dv_id),
                reuse=False,
            )
            created.append(evaluation.id)
    except Exception as exc:  # the broker is down: committed, not sent
        print(f"    submit: {type(exc).__name__}: {exc}")
    if created:
        return created[0]
    with session_scope() as session:
        from sqlalchemy import func, select

        return int(session.scalar(select(func.max(Evaluation.id))) or 0)


def _retrying(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None while the database is away."""
    import sqlalchemy.exc

    from szbench import db

    try:
        return fn()
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError):
        db.reset_engine()
        return None


def status(evaluation_id: int) -> str | None:
    from szbench.db import session_scope
    from szbench.models import Evaluation

    def read() -> str:
        with session_scope() as session:
            return session.get_one(Evaluation, evaluation_id).status.value

    return _retrying(read)


def wait_finished(evaluation_id: int, timeout_s: float) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = status(evaluation_id)
        if state in ("done", "failed", "cancelled"):
            return state == "done", state
        time.sleep(0.5)
    return False, str(status(evaluation_id))


def running_container(host: str, timeout_s: float = 120) -> Any:
    from szbench_worker.docker_runner import LABEL_HOST, connect

    client = connect()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in client.containers.list(filters={"label": f"{LABEL_HOST}={host}"}):
            if c.status == "running":
                return c
        time.sleep(0.2)
    raise SystemExit("no container started")


def snapshot(
    evaluation_id: int,
) -> tuple[dict[int, tuple[Any, ...]], dict[str, Any], dict[int, int], int]:
    """Per recording: counts; dataset metrics; results per recording; max attempts."""
    from sqlalchemy import func, select

    from szbench.db import session_scope
    from szbench.models import DatasetResult, Evaluation, RecordingRun

    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        counts = {
            r.recording_id: (
                r.outcome.value if r.outcome else None,
                r.event_tp,
                r.event_fp,
                r.event_fn,
                r.sample_tp,
                r.sample_fp,
                r.sample_fn,
            )
            for r in ev.runs
        }
        per_recording = dict(
            session.execute(
                select(RecordingRun.recording_id, func.count(RecordingRun.id))
                .where(
                    RecordingRun.evaluation_id == evaluation_id,
                    RecordingRun.finished_at.is_not(None),
                )
                .group_by(RecordingRun.recording_id)
            ).all()
        )
        results = session.scalar(
            select(func.count(DatasetResult.id)).where(DatasetResult.evaluation_id == evaluation_id)
        )
        metrics = {}
        if ev.result is not None:
            metrics = {
                k: getattr(ev.result, k)
                for k in (
                    "event_sensitivity",
                    "event_precision",
                    "event_f1",
                    "event_fp_rate",
                    "sample_sensitivity",
                    "sample_precision",
                    "sample_f1",
                    "sample_fp_rate",
                )
            }
        metrics["dataset_results"] = results
        attempts = max((r.attempts for r in ev.runs), default=0)
        return counts, metrics, per_recording, attempts


@contextlib.contextmanager
def stack(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    from szbench.config import Settings

    root = Path(tempfile.mkdtemp(prefix="szbench-drill-"))
    pg, broker = Postgres(root), Redis(root)
    engine = Dockerd()
    registry = Registry(root)
    disk: SmallDisk | None = None
    cache_disk: SmallDisk | None = None
    api: Api | None = None
    workers: list[Worker] = []
    other_hosts: list[str] = []  # hosts of workers a fault started (removed at the end)
    try:
        pg.init()
        broker.start()
        registry.start()
        engine.on_start.append(lambda: registry.relay_into(engine))
        engine.start()
        load_image(args.digest, engine)
        disk = SmallDisk(root, Settings().worker_min_free_bytes + 64 * MiB)
        (root / "cache-disk").mkdir()
        cache_disk = SmallDisk(root / "cache-disk", Settings().worker_min_free_bytes + 64 * MiB)
        host = f"drill-{uuid.uuid4().hex[:6]}"
        timers = {
            setting: str(getattr(args, option))
            for option, setting in TIMERS.items()
            if getattr(args, option) is not None
        }
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(["platform", "worker", "scoring"]),
            "SZBENCH_DATA_DIR": str(root / "data"),
            "SZBENCH_DATABASE_URL": pg.url,
            "SZBENCH_BROKER_URL": broker.url,
            "SZBENCH_RUNNER_BACKEND": "docker",
            "SZBENCH_RUNNER_WORK_DIR": str(disk.path / "runs"),
            "SZBENCH_PIPELINE_WORK_DIR": str(root / "work"),
            "SZBENCH_WORKER_HOST": host,
            "SZBENCH_LOG_LEVEL": "INFO",
            "DOCKER_HOST": engine.url,
            **timers,
        }
        # Shipped defaults for every timer not named above, whatever this shell exports.
        for setting in (*TIMERS.values(), "SZBENCH_QUEUE_VISIBILITY_TIMEOUT_S"):
            if setting not in timers:
                env.pop(setting, None)
                os.environ.pop(setting, None)
        env.pop("SZBENCH_WORKER_MIN_FREE_BYTES", None)
        os.environ.pop("SZBENCH_WORKER_MIN_FREE_BYTES", None)
        os.environ.update(
            {k: v for k, v in env.items() if k.startswith("SZBENCH_") or k == "DOCKER_HOST"}
        )
        from szbench import db, migrate, queue
        from szbench.config import get_settings

        get_settings.cache_clear()
        db.reset_engine()
        queue.reset_celery()
        migrate.upgrade(pg.url)
        tokens = make_tokens()
        # The second dataset's folder: the API sees it (bind-mounted at `hidden` in its own
        # mount namespace), the worker does not, as on another host: it fetches.
        hidden, real = root / "remote-hidden", root / "remote"
        hidden.mkdir()
        real.mkdir()
        api_env = {
            **env,
            "SZBENCH_DATA_DIR": str(root / "api-data"),
            "SZBENCH_REGISTRY": registry.address,
            # The drill's image runs as root (its base image's user): accepted here.
            "SZBENCH_ALLOW_ROOT_IMAGES": "true",
        }
        api = Api(root, api_env, hidden, real)
        api.start()
        env.update(
            {
                "SZBENCH_PLATFORM_URL": api.url,
                "SZBENCH_WORKER_TOKEN": tokens["worker"],
                "SZBENCH_RECORDING_CACHE_DIR": str(cache_disk.path / "cache"),
                "SZBENCH_REGISTRY": registry.address,
            }
        )
        run = Worker(
            "run",
            env,
            root / "worker.log",
            "--pool",
            "prefork",
            "--concurrency",
            "1",
            "-Q",
            "cpu,score",
            "--loglevel",
            "INFO",
        )
        scheduler = Worker(
            "scheduler",
            env,
            root / "scheduler.log",
            "--pool",
            "solo",
            "--beat",
            "-Q",
            "maintenance,score",
            "--loglevel",
            "INFO",
        )
        workers += [run, scheduler]
        run.start()
        scheduler.start()
        yield {
            "root": root,
            "pg": pg,
            "redis": broker,
            "engine": engine,
            "disk": disk,
            "cache_disk": cache_disk,
            "registry": registry,
            "api": api,
            "run": run,
            "scheduler": scheduler,
            "workers": workers,
            "host": host,
            "env": env,
            "other_hosts": other_hosts,
            "tokens": tokens,
            "hidden": hidden,
            "real": real,
            "seen": {},
        }
    finally:
        for w in workers:
            w.stop()
        if api is not None:
            api.stop()
        registry.remove()
        broker.kill()
        with contextlib.suppress(Exception):
            pg.stop()
        if "host" in locals():
            with contextlib.suppress(Exception):
                from szbench_worker.docker_runner import cleanup_orphans

                cleanup_orphans(host=host, everything=True)
                for other in other_hosts:
                    cleanup_orphans(host=other, everything=True)
        engine.remove()
        for small in (disk, cache_disk):
            if small is not None:
                small.remove()
        if args.keep:
            print(f"scratch folder kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def apply(
    fault: str, s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    """Submit an evaluation, apply ``fault``; return its id and the moment of the fault."""
    from szbench import queue

    if fault in CLOCK_FAULTS:
        return clock_skew(fault, s, submit_it)
    if fault == "malformed-message":
        import redis

        # Onto the list the worker consumes, ahead of the evaluation's tasks.
        redis.Redis.from_url(s["redis"].url).lpush("cpu", b"{not json, no task")
        t = time.monotonic()
        return submit_it(), t
    if fault == "broker-down-submit":
        s["redis"].kill()
        t = time.monotonic()
        evaluation_id = submit_it()
        time.sleep(5)
        s["redis"].start()
        queue.reset_celery()
        return evaluation_id, t
    if fault in NEW_FAULTS:
        return NEW_FAULTS[fault](s, args, submit_it)
    evaluation_id = submit_it()
    container = running_container(s["host"])
    t = time.monotonic()
    if fault == "worker-kill":
        s["run"].kill_all()
        s["run"].start()
    elif fault == "child-kill":
        os.kill(int(container.labels["org.szbench.owner"].split(".")[0]), signal.SIGKILL)
    elif fault == "redis-empty":
        s["redis"].kill()
        s["redis"].start()
        queue.reset_celery()
    elif fault == "postgres-stop":
        s["pg"].stop()
        time.sleep(args.pg_outage_s)
        s["pg"].start()
    elif fault == "full-work-dir":
        s["disk"].fill()
        time.sleep(args.full_s)
        s["disk"].empty()
    elif fault == "engine-outage":
        s["engine"].stop()
        time.sleep(args.engine_outage_s)
        s["engine"].start()
    return evaluation_id, t


# --- clock skew on one worker (issue 29.3) ------------------------------------------------

CLOCK_FAULTS = {"clock-ahead-killed": "+1h", "clock-behind": "-10m"}


def clock_skew(fault: str, s: dict[str, Any], submit_it: Callable[[], int]) -> tuple[int, float]:
    """The regular run worker gives way to one on a skewed clock (libfaketime: the Debian
    package ``faketime``, scripts/test-services.sh). ``clock-ahead-killed``: it takes a run
    and is killed, and the regular worker starts again; the fault's moment is the kill.
    ``clock-behind``: it does the whole evaluation; the moment is the submission, and the
    drill reads the evaluation's hold while the container runs."""
    from tests.worker._live_services import faketime_env

    ahead = fault == "clock-ahead-killed"
    host = f"{s['host']}-{'ahead' if ahead else 'behind'}"
    s["other_hosts"].append(host)
    env = {**s["env"], **faketime_env(CLOCK_FAULTS[fault]), "SZBENCH_WORKER_HOST": host}
    # The regular worker's own options, on the skewed clock.
    skewed = Worker(fault, env, s["root"] / f"{fault}.log", *s["run"].args)
    s["run"].stop()
    s["workers"].append(skewed)
    skewed.start()
    s["skewed"] = skewed
    submitted = time.monotonic()
    evaluation_id = submit_it()
    running_container(host)
    if ahead:
        t = time.monotonic()
        skewed.kill_all()
        s["run"].start()
        return evaluation_id, t
    s["holds"] = []
    from szbench.db import session_scope
    from szbench.evaluations.holds import platform_hold
    from szbench.models import Evaluation

    while status(evaluation_id) not in ("done", "failed", "cancelled", None):
        with session_scope() as session:
            evaluation = session.get_one(Evaluation, evaluation_id)
            s["holds"].append(platform_hold(session, evaluation))
        time.sleep(1)
    return evaluation_id, submitted


def clock_skew_check(fault: str, s: dict[str, Any], evaluation_id: int) -> tuple[str, bool]:
    """After the evaluation: every stored time in order (submission <= each run's start <=
    its finish <= the evaluation's finish), what held it, and the regular worker back."""
    from szbench.db import session_scope
    from szbench.models import Evaluation

    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        in_order = ev.started_at is not None and ev.finished_at is not None
        in_order = in_order and ev.created_at <= ev.started_at <= ev.finished_at
        for run in ev.runs:
            in_order = in_order and run.started_at is not None and run.finished_at is not None
            in_order = in_order and ev.created_at <= run.started_at <= run.finished_at
            in_order = in_order and run.finished_at <= ev.finished_at
    note = f"times in order: {'yes' if in_order else 'NO'}"
    if fault == "clock-behind":
        holds = sorted({h for h in s.pop("holds", []) if h})
        note += f", held while running: {holds[0] if holds else 'never'}"
        in_order = in_order and not holds
        s["skewed"].stop()
        s["run"].start()
    return note, in_order


def observe(s: dict[str, Any], fault: str, evaluation_id: int, until: float) -> None:
    """What a researcher and an operator see while ``fault`` lasts (until ``until``, a
    monotonic time): the evaluation's hold (its page and API) and the worker's fault (its
    heartbeat, /metrics), once a heartbeat has said it."""
    from sqlalchemy import select

    from szbench.db import session_scope
    from szbench.evaluations.holds import platform_hold
    from szbench.models import Evaluation, WorkerHeartbeat

    def look() -> dict[str, Any] | None:
        with session_scope() as session:
            beats = [(b.fault_kind, b.fault) for b in session.scalars(select(WorkerHeartbeat))]
            sick = [b for b in beats if b[0]]
            if not sick:
                return None
            runs = session.get_one(Evaluation, evaluation_id).runs
            return {
                "hold": platform_hold(session, session.get_one(Evaluation, evaluation_id)),
                "worker": sick[0][0],
                "attempts": max((r.attempts for r in runs), default=0),
            }

    while time.monotonic() < until - 1:
        seen = _retrying(look)
        if seen:
            s["seen"][fault] = seen
            print(f"    seen: {seen}", flush=True)
            return
        time.sleep(1)
    s["seen"][fault] = {"hold": None, "worker": None}


def _outage(
    s: dict[str, Any],
    fault: str,
    length_s: float,
    submit_it: Callable[[], int],
    down: Callable[[], None],
    up: Callable[[], None],
) -> tuple[int, float]:
    down()
    t = time.monotonic()
    evaluation_id = submit_it()
    observe(s, fault, evaluation_id, t + length_s)
    time.sleep(max(0.0, length_s - (time.monotonic() - t)))
    up()
    return evaluation_id, t


def _empty_cache(s: dict[str, Any]) -> None:
    shutil.rmtree(s["cache_disk"].path / "cache" / "sha256", ignore_errors=True)


def registry_down_pull(
    s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    import docker

    # Off the drill's engine: the worker must pull it (by digest) from the registry.
    docker.DockerClient(base_url=s["engine"].url, timeout=60).images.remove(args.digest, force=True)
    registry = s["registry"]
    return _outage(
        s, "registry-down-pull", args.registry_outage_s, submit_it, registry.stop, registry.start
    )


def registry_down_push(
    s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    """A new version submitted through the API (the CLI) while the registry is away: the
    submission is answered 503 (the upload kept) until it is back; the CLI retries."""
    from sqlalchemy import select

    from szbench.db import session_scope
    from szbench.models import Algorithm, AlgorithmVersion, Evaluation, EvaluationKind

    del submit_it  # the API makes this evaluation (the version's activation)
    name = f"pushed-{uuid.uuid4().hex[:6]}"
    cmd = [sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", name, "-v", "1"]
    cmd += ["--image", str(s["root"] / "image.tar"), "--server", s["api"].url]
    cmd += ["--token", s["tokens"]["submit"]]
    env = {**s["env"], "XDG_CACHE_HOME": str(s["root"] / "cli-cache")}
    s["registry"].stop()
    t = time.monotonic()
    with open(s["root"] / "cli.log", "ab") as log:
        cli = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    time.sleep(args.push_outage_s)
    s["registry"].start()
    rc = cli.wait(900)
    said = (s["root"] / "cli.log").read_text(errors="replace")
    s["seen"]["registry-down-push"] = {
        "cli_exit": rc,
        "answered_503": said.count("server answered 503"),
        "address_shown": str(s["registry"].port) in said,
    }
    print(f"    seen: {s['seen']['registry-down-push']}", flush=True)

    def evaluation() -> int | None:
        with session_scope() as session:
            return session.scalar(
                select(Evaluation.id)
                .join(AlgorithmVersion, AlgorithmVersion.id == Evaluation.algorithm_version_id)
                .join(Algorithm, Algorithm.id == AlgorithmVersion.algorithm_id)
                .where(Algorithm.name == name, Evaluation.kind == EvaluationKind.FULL)
            )

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = _retrying(evaluation)
        if found:
            return int(found), t
        time.sleep(1)
    raise SystemExit(f"no evaluation of the pushed version; see {s['root'] / 'cli.log'}")


def api_down_fetch(
    s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    _empty_cache(s)
    api = s["api"]
    return _outage(s, "api-down-fetch", args.api_outage_s, submit_it, api.stop, api.start)


def cache_full(
    s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    _empty_cache(s)
    disk = s["cache_disk"]
    return _outage(s, "cache-full", args.cache_full_s, submit_it, disk.fill, disk.empty)


def missing_setting(
    s: dict[str, Any], args: argparse.Namespace, submit_it: Callable[[], int]
) -> tuple[int, float]:
    """A worker started without the settings to fetch; the operator restarts it with them."""
    _empty_cache(s)
    run: Worker = s["run"]
    unset_env = {
        k: v
        for k, v in run.env.items()
        if k not in ("SZBENCH_PLATFORM_URL", "SZBENCH_WORKER_TOKEN")
    }
    unset = Worker(run.name, unset_env, run.log, *run.args)

    def down() -> None:
        run.stop()
        unset.start()
        s["workers"].append(unset)

    def up() -> None:
        unset.stop()
        run.start()

    return _outage(s, "missing-setting", args.setting_fix_s, submit_it, down, up)


NEW_FAULTS: dict[
    str, Callable[[dict[str, Any], argparse.Namespace, Callable[[], int]], tuple[int, float]]
] = {
    "registry-down-pull": registry_down_pull,
    "registry-down-push": registry_down_push,
    "api-down-fetch": api_down_fetch,
    "cache-full": cache_full,
    "missing-setting": missing_setting,
}


def dead_letters(s: dict[str, Any]) -> int:
    import redis

    from szbench.broker import DEAD_LETTER_KEY

    with contextlib.suppress(redis.RedisError):
        return int(redis.Redis.from_url(s["redis"].url).llen(DEAD_LETTER_KEY))
    return -1


def _judge_seen(fault: str, seen: dict[str, Any]) -> str:
    """What was seen during ``fault``, as the row's note; "NOT HELD" when the worker did
    not say why it took no runs, or a try was spent meanwhile."""
    if fault == "registry-down-push":
        ok = seen.get("cli_exit") == 0 and not seen.get("address_shown")
        return (
            f"CLI exit {seen.get('cli_exit')}, {seen.get('answered_503')} answer(s) 503, "
            f"registry address {'SHOWN' if seen.get('address_shown') else 'not shown'}"
            + ("" if ok else "; NOT HELD")
        )
    if not seen.get("worker") or not seen.get("hold") or seen.get("attempts"):
        return f"NOT HELD ({seen})"
    return f"worker lacks {seen['worker']}; hold: {seen['hold']}"


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--relay":
        relay(sys.argv[2], sys.argv[3])
        return 0
    from tests.worker._pipeline_factories import Rec, make_prepared_dataset

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--recordings", type=int, default=4)
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--pg-outage-s", type=float, default=60)
    p.add_argument("--full-s", type=float, default=120)
    p.add_argument("--engine-outage-s", type=float, default=180)
    p.add_argument("--registry-outage-s", type=float, default=120)
    p.add_argument("--push-outage-s", type=float, default=60)
    p.add_argument("--api-outage-s", type=float, default=120)
    p.add_argument("--cache-full-s", type=float, default=120)
    p.add_argument("--setting-fix-s", type=float, default=60)
    p.add_argument("--timeout-s", type=float, default=1800)
    # Timers: the shipped defaults unless set (a shortened run says so in its header).
    for option in TIMERS:
        p.add_argument("--" + option.replace("_", "-"), type=float, default=None)
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (logs)")
    args = p.parse_args()
    changed = {o: getattr(args, o) for o in TIMERS if getattr(args, o) is not None}
    print(
        "timers: "
        + (
            "SHORTENED " + ", ".join(f"{TIMERS[o]}={v:g}" for o, v in changed.items())
            if changed
            else "the shipped defaults"
        )
    )
    faults = [f for f in args.faults.split(",") if f]
    for f in faults:
        if f not in FAULTS:
            raise SystemExit(f"unknown fault {f!r}; one of {', '.join(FAULTS)}")
    args.digest = digest = build_image()
    outcomes: list[Outcome] = []
    with stack(args) as s:
        recs = [
            Rec(f"sub-{i:02d}", "run-00", 600, ((100, 20),) if i % 2 else ((400, 20),))
            for i in range(1, args.recordings + 1)
        ]
        prepared = make_prepared_dataset(s["root"] / "prepared", recs)
        version_id, dv_id = seed(prepared, digest, timeout_s=120)
        remote_dv_id = seed_remote(s["real"], s["hidden"], recs, timeout_s=120)
        save_image(digest, s["root"] / "image.tar")
        pulled_id = seed_pulled(digest, s["registry"].address, s["root"] / "image.tar")
        references = {}
        for name, target in (("held", dv_id), ("fetched", remote_dv_id)):
            t0 = time.monotonic()
            reference = submit(version_id, target)
            ok, state = wait_finished(reference, args.timeout_s)
            if not ok:
                raise SystemExit(f"the undisturbed evaluation ended {state}; see the worker logs")
            ref_counts, ref_metrics, _, _ = snapshot(reference)
            references[target] = (ref_counts, ref_metrics)
            print(
                f"undisturbed ({name}): {args.recordings} recordings in "
                f"{time.monotonic() - t0:.1f} s",
                flush=True,
            )
        for fault in faults:
            print(f"== {fault}", flush=True)
            letters = dead_letters(s)
            worker_pid = s["run"].proc.pid
            target = remote_dv_id if fault in REMOTE_FAULTS else dv_id
            version = pulled_id if fault == "registry-down-pull" else version_id
            evaluation_id, t = apply(fault, s, args, functools.partial(submit, version, target))
            ok, state = wait_finished(evaluation_id, args.timeout_s)
            seconds = time.monotonic() - t
            counts, metrics, per_recording, attempts = _retrying(
                lambda eid=evaluation_id: snapshot(eid)
            ) or ({}, {}, {}, 0)
            ref_counts, ref_metrics = references[target]
            outcome = Outcome(
                fault=fault,
                recovered=ok,
                seconds=seconds,
                results_per_recording=set(per_recording.values()) or {0},
                attempts_max=attempts,
                scores_equal=ok
                and metrics == ref_metrics
                and (sorted(counts.values()) == sorted(ref_counts.values())),
                status=state,
            )
            if fault == "malformed-message":
                outcome.note = f"dead letters +{dead_letters(s) - letters}, worker process " + (
                    "the same"
                    if s["run"].proc.pid == worker_pid and s["run"].proc.poll() is None
                    else "CHANGED"
                )
                if not outcome.note.startswith("dead letters +1,") or "CHANGED" in outcome.note:
                    outcome.scores_equal = False
            if fault in CLOCK_FAULTS:
                outcome.note, in_order = clock_skew_check(fault, s, evaluation_id)
                outcome.scores_equal = outcome.scores_equal and in_order
            elif fault in NEW_FAULTS:
                outcome.note = _judge_seen(fault, s["seen"].get(fault, {}))
                if "NOT HELD" in outcome.note:
                    outcome.scores_equal = False
            outcomes.append(outcome)
            print(f"   {outcome}", flush=True)
    print()
    print(
        f"{'fault':20} {'recovered':9} {'to DONE (s)':>11} {'results/rec':>11} "
        f"{'max attempts':>12} {'scores equal':>12}"
    )
    for o in outcomes:
        per = ",".join(str(n) for n in sorted(o.results_per_recording))
        print(
            f"{o.fault:20} {'yes' if o.recovered else 'NO (' + o.status + ')':9} "
            f"{o.seconds:11.1f} {per:>11} {o.attempts_max:12d} "
            f"{'yes' if o.scores_equal else 'NO':>12}  {o.note}"
        )
    bad = [
        o
        for o in outcomes
        if not (o.recovered and o.scores_equal and o.results_per_recording == {1})
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
