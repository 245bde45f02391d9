"""A host is sick whenever something a run needs is missing, and a worker that cannot run
refuses to start (issue 29 items 2 and 10).

A worker on a "second host" (a mount namespace where a tmpfs hides the main host's files,
as in test_remote_worker.py) fetches held-out recordings from the platform's API (uvicorn)
into its cache, a small tmpfs of the test's own. Broken under it, one at a time: the API
stopped, the cache's disk filled, the settings to fetch at all missing. Each time the
worker stops taking runs and says why (heartbeat, the evaluation's hold, ``/metrics``), no
run counts an attempt, and the evaluation finishes once the need is met again. A worker
whose settings contradict each other, or that could not give runs their ``/output`` on the
engine it talks to, exits before it reports ready.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from szbench.app import create_app
from szbench.auth import service as auth
from szbench.broker import broker_was_emptied
from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.evaluations.holds import platform_hold
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationStatus,
    Role,
    RunOutcome,
    VersionStatus,
    WorkerHeartbeat,
)

from . import _live_services as live
from ._pipeline_factories import Rec, make_prepared_dataset
from .test_pipeline_celery import LIMITS, add_version
from .test_reconcile_celery import (
    OwnRedis,
    slow_image,  # noqa: F401 (a fixture)
)
from .test_remote_worker import Hosts

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

MiB = 1024**2
#: What the worker's heartbeat and the evaluation's hold say (szbench_worker.faults).
CANNOT_FETCH = (
    "this host does not have the recordings' files and cannot fetch them "
    "(SZBENCH_PLATFORM_URL and SZBENCH_WORKER_TOKEN)"
)
PLATFORM_API_AWAY = "the platform's API does not answer recording fetches"
CACHE_FULL = "the recording cache's disk is full or cannot be written"
RECS = [Rec("sub-01", "run-00", 600, ((100, 20),)), Rec("sub-02", "run-00", 600, ((100, 20),))]
HELPER = "szbench/python-numpy:bookworm"


class ApiHosts(Hosts):
    """The hosts of test_remote_worker.py, whose API may come back on the same port."""

    def start_api(self, port: int | None = None) -> None:
        import contextlib

        import httpx

        port = port or live.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "uvicorn", "szbench.app:create_production_app"]
        cmd += ["--factory", "--host", "127.0.0.1", "--port", str(port)]
        self._spawn(f"api-{port}-{len(self.procs)}", cmd, self.main_env)
        self.procs["api"] = self.procs.pop(next(k for k in self.procs if k.startswith("api-")))

        def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200
            return False

        live.wait_for(up, 60, "the API", logs=self.logs)


class SmallDisk:
    """A tmpfs of the test's own (for the recording cache), which it fills and empties."""

    def __init__(self, size: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="szbench-cache-disk-"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(self.path)],
                       check=True)  # fmt: skip
        self.filler = self.path / "filler"

    def fill(self) -> None:
        st = os.statvfs(self.path)
        size = st.f_bavail * st.f_frsize
        subprocess.run(["fallocate", "-l", str(size), str(self.filler)], check=True)

    def empty(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remove(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def second_host(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[dict[str, Any]]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("the second host's mount namespace needs unshare(1) and root")
    host = f"needs-test-{uuid.uuid4().hex[:8]}"
    broker = OwnRedis(tmp_path)
    broker.start()
    broker_was_emptied(broker.url)  # marked, as a deployment's broker is
    main = tmp_path / "main"
    live.use_settings(
        settings_env,
        {
            "SZBENCH_DATABASE_URL": pg_url,
            "SZBENCH_BROKER_URL": broker.url,
            "SZBENCH_DATA_DIR": str(main / "data"),
            "SZBENCH_RUNNER_BACKEND": "docker",
            "SZBENCH_WORKER_HOST": host,
            "SZBENCH_LOG_LEVEL": "INFO",
            "SZBENCH_METRICS_TOKEN": "scrape-me",
            # Seconds instead of minutes: the faults below are about who is charged.
            "SZBENCH_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
            "SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S": "5",
            "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "2",
            "SZBENCH_WORKER_MIN_FREE_BYTES": str(4 * MiB),
        },
    )
    disk = SmallDisk("24m")
    hosts = ApiHosts(tmp=tmp_path, main_env=live.child_env(), registry="",
                  log_dir=live.log_dir_for(tmp_path, host))  # fmt: skip
    try:
        yield {"hosts": hosts, "disk": disk, "host": host}
    finally:
        hosts.stop_all()
        disk.remove()
        broker.kill()
        live.remove_leftovers(docker_client, host)


def _remote_env(hosts: Hosts, disk: SmallDisk, token: str | None) -> dict[str, str]:
    remote = hosts.remote_dir
    env = {
        **hosts.main_env,
        "SZBENCH_DATA_DIR": str(remote / "data"),
        "SZBENCH_RUNNER_WORK_DIR": str(remote / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(remote / "work"),
        "SZBENCH_RECORDING_CACHE_DIR": str(disk.path / "cache"),
        # Not in the engine's mount namespace: the engine mounts each run's /output.
        "SZBENCH_RUNNER_HELPER_IMAGE": HELPER,
    }
    if token is not None:
        env["SZBENCH_PLATFORM_URL"] = hosts.api_url
        env["SZBENCH_WORKER_TOKEN"] = token
    return env


def _hidden(hosts: Hosts) -> list[str]:
    """Run in a mount namespace where the main host's files are not (a second host)."""
    return [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'mount -t tmpfs none "$0" && exec "$@"', str(hosts.main_dir),
    ]  # fmt: skip


def _beats() -> list[tuple[str | None, str | None]]:
    with session_scope() as session:
        return [
            (b.fault, getattr(b, "fault_kind", None))
            for b in session.scalars(select(WorkerHeartbeat))
        ]


def _submit(version_id: int, dv_id: int) -> int:
    with session_scope() as session:
        return evaluations.create_evaluation(
            session,
            algorithm_version=session.get_one(AlgorithmVersion, version_id),
            dataset_version=session.get_one(DatasetVersion, dv_id),
            reuse=False,
        ).id


def _held(hosts: Hosts, evaluation_id: int, public: str, kind: str) -> None:
    """The worker says why it takes no runs, everywhere, and no run counted an attempt."""
    live.wait_for(lambda: (public, kind) in _beats(), 60, f"the heartbeat to say {kind}",
                  logs=hosts.logs)  # fmt: skip
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        hold = platform_hold(session, evaluation)
        assert hold is not None
        assert public in hold
        assert evaluation.status == EvaluationStatus.RUNNING
        assert [run.attempts for run in evaluation.runs] == [0, 0]
    metrics = TestClient(create_app()).get(
        "/metrics", headers={"Authorization": "Bearer scrape-me"}
    )
    assert f'szbench_workers_sick{{queue="cpu",reason="{kind}"}} 1.0' in metrics.text


def _done(hosts: Hosts, evaluation_id: int) -> None:
    def finished() -> bool:
        with session_scope() as session:
            return session.get_one(Evaluation, evaluation_id).status.finished

    live.wait_for(finished, 180, f"evaluation {evaluation_id}", logs=hosts.logs)
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        assert evaluation.status == EvaluationStatus.DONE, (evaluation.message, hosts.logs())
        assert [run.outcome for run in evaluation.runs] == [RunOutcome.OK, RunOutcome.OK]
        assert [run.attempts for run in evaluation.runs] == [1, 1]
        assert all(run.event_tp == 1 for run in evaluation.runs)


def test_a_second_host_is_sick_while_a_fetch_needs_what_it_lacks(
    second_host: dict[str, Any],
    docker_client: Any,
    slow_image: str,  # noqa: F811
) -> None:
    hosts: ApiHosts = second_host["hosts"]
    disk: SmallDisk = second_host["disk"]
    with session_scope() as session:
        operator = auth.create_user(session, email="ops@example.org", password=None,
                                    role=Role.ADMIN)  # fmt: skip
        _, token = auth.create_token(session, operator, name="gpu-1", scopes=["worker"])
        auth.create_user(session, email="alice@example.org", password=None)
        version = add_version(session, slow_image, docker_client)  # by id
        version.image_reference = None
        prepared = make_prepared_dataset(hosts.main_dir / "datasets" / "held", RECS, seed=5)
        dataset = create_dataset(session, slug="held", kind=DatasetKind.HELD_OUT,
                                 run_limits={**LIMITS, "timeout_s": 60})  # fmt: skip
        dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
        session.flush()
        version_id, dv_id = version.id, dv.id
    assert version.status == VersionStatus.ACTIVE

    # 1. A worker without the settings to fetch: held, with the settings named.
    hosts.start_api()
    hosts.start_worker("unset", _remote_env(hosts, disk, None), prefix=_hidden(hosts))
    evaluation_id = _submit(version_id, dv_id)
    _held(hosts, evaluation_id, CANNOT_FETCH, "setting")
    hosts.stop("unset")
    hosts.start_worker("remote", _remote_env(hosts, disk, token), prefix=_hidden(hosts))
    _done(hosts, evaluation_id)

    # 2. The platform's API away during the fetches (of recordings the cache lacks).
    shutil.rmtree(disk.path / "cache" / "sha256")
    hosts.stop("api")
    evaluation_id = _submit(version_id, dv_id)
    _held(hosts, evaluation_id, PLATFORM_API_AWAY, "platform_api")
    hosts.start_api(port=int(hosts.api_url.rsplit(":", 1)[1]))
    _done(hosts, evaluation_id)
    assert "has its platform_api again" in hosts.log("remote")

    # 3. The recording cache's disk full.
    shutil.rmtree(disk.path / "cache" / "sha256")
    disk.fill()
    evaluation_id = _submit(version_id, dv_id)
    _held(hosts, evaluation_id, CACHE_FULL, "recording_cache")
    disk.empty()
    _done(hosts, evaluation_id)
    assert _beats() == [(None, None)]


def _start_refused(hosts: Hosts, name: str, env: dict[str, str], prefix: list[str]) -> str:
    cmd = [*prefix, sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
    cmd += ["--pool", "solo", "-Q", "cpu", "-n", f"{name}@%h", "--without-mingle"]
    done = subprocess.run(cmd, cwd=live.REPO, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-3000:]
    assert "ready." not in out
    return out


def test_a_worker_that_cannot_run_refuses_to_start(second_host: dict[str, Any]) -> None:
    hosts: Hosts = second_host["hosts"]
    disk: SmallDisk = second_host["disk"]
    hosts.main_dir.mkdir(parents=True)
    env = _remote_env(hosts, disk, "szb_x")
    env["SZBENCH_PLATFORM_URL"] = "http://127.0.0.1:9"
    # Outside the engine's mount namespace, without the helper image (issue 29 item 10).
    without_helper = {k: v for k, v in env.items() if k != "SZBENCH_RUNNER_HELPER_IMAGE"}
    out = _start_refused(hosts, "nohelper", without_helper, _hidden(hosts))
    assert "does not start" in out
    assert "SZBENCH_RUNNER_HELPER_IMAGE" in out
    # Half the settings to fetch recordings.
    no_token = {k: v for k, v in env.items() if k != "SZBENCH_WORKER_TOKEN"}
    out = _start_refused(hosts, "notoken", no_token, [])
    assert "SZBENCH_WORKER_TOKEN is not set (SZBENCH_PLATFORM_URL is)" in out
    # The scheduler runs no container: never judged so.
    scheduler = [sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
    scheduler += ["--pool", "solo", "-Q", "maintenance", "-n", "sched@%h", "--without-mingle"]
    proc = subprocess.Popen(
        [*_hidden(hosts), *scheduler],
        cwd=live.REPO,
        env=without_helper,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = ""
        for line in proc.stdout:
            seen += line
            if "ready." in line:
                break
        assert "ready." in seen, seen[-3000:]
    finally:
        live.stop_processes([proc])  # type: ignore[list-item]
