"""A worker on a second host, on one machine (issue 22).

Real parts throughout: the API under uvicorn on PostgreSQL, Redis, a registry on loopback
(Debian's docker-registry), the Docker engine, ``celery worker`` processes and the CLI's
remote submit. The "second host" is a worker with its own data dir, started in a mount
namespace (``unshare --mount``) where a tmpfs hides the main host's folder, so that the
datasets and uploads paths the database names do not exist for it.

The algorithm is submitted as an archive through the API (the platform pushes it to the
registry on acceptance); a worker on the main host evaluates it on a held-out dataset
with the files in place; then the second host, which shares only the broker, the database
and the platform, evaluates it again: it pulls the image by digest, fetches each recording
by checksum once, and its scores equal the main host's. A third evaluation there fetches
nothing; after a cache file is tampered with, the next one detects it and fetches that one
recording again, scoring the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from szbench.auth import service as auth
from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationStatus,
    RecordingRun,
    Role,
    RunOutcome,
    VersionStatus,
)
from tests.redis_urls import redis_url

from . import _live_services as live
from ._pipeline_factories import Rec, make_prepared_dataset

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = redis_url(12)

# Detections that depend on every byte of the recording: a wrong or corrupt file scores
# differently, so equal scores mean the same bytes reached the container.
ALGORITHM = """
import os
from pathlib import Path
edf = (Path("/data") / os.environ["INPUT"]).read_bytes()
dur = int(edf[236:244]) * float(edf[244:252])
onset = float(sum(edf) % int(dur - 60))
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"{onset:.1f}\\t30.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{dur:.1f}\\n"
)
"""

RECS = [
    Rec("sub-01", "run-00", 600, ((100, 40),)),
    Rec("sub-01", "run-01", 600, ((300, 30),)),
    Rec("sub-02", "run-00", 600, ()),
]


@dataclass
class Hosts:
    """The processes of the two hosts, their settings and logs."""

    tmp: Path
    main_env: dict[str, str]
    registry: str
    log_dir: Path
    api_url: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def main_dir(self) -> Path:
        return self.tmp / "main"

    @property
    def remote_dir(self) -> Path:
        return self.tmp / "remote"

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-5000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdout=open(self.log_dir / f"{name}.log", "wb"),  # noqa: SIM115 (closed with it)
            stderr=subprocess.STDOUT,
        )
        self.procs[name] = proc
        return proc

    def start_api(self) -> None:
        port = live.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "uvicorn", "szbench.app:create_production_app"]
        cmd += ["--factory", "--host", "127.0.0.1", "--port", str(port)]
        self._spawn("api", cmd, self.main_env)

        def up() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200
            return False

        live.wait_for(up, 60, "the API", logs=self.logs)

    def start_worker(self, name: str, env: dict[str, str], prefix: list[str] = ()) -> None:
        cmd = [*prefix, sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app"]
        cmd += ["worker", "--pool", "solo", "--concurrency", "1", "-Q", "cpu,maintenance"]
        cmd += ["-n", f"{name}@%h", "--without-mingle", "--without-gossip", "-l", "INFO"]
        proc = self._spawn(name, cmd, env)
        live.wait_for(
            lambda: "ready." in self.log(name) or proc.poll() is not None,
            90,
            f"worker {name}",
            logs=self.logs,
        )
        assert proc.poll() is None, f"worker {name} exited:\n{self.logs()}"

    def stop(self, name: str) -> None:
        live.stop_processes([self.procs.pop(name)])

    def stop_all(self) -> None:
        live.stop_processes(self.procs.values())
        self.procs.clear()

    def fetches(self) -> int:
        """Recording fetches the platform served (its log, one line each)."""
        return self.log("api").count("worker fetch: recording")


@pytest.fixture
def hosts(
    pg_url: str,
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
    docker_client: Any,
    registry: str,
) -> Iterator[Hosts]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("the second host's mount namespace needs unshare(1) and root")
    host = f"remote-test-{uuid.uuid4().hex[:8]}"
    main = tmp_path / "main"
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_BROKER_URL": REDIS_URL,
        "SZBENCH_DATA_DIR": str(main / "data"),
        "SZBENCH_UPLOADS_DIR": str(main / "uploads"),
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(main / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(main / "work"),
        "SZBENCH_WORKER_HOST": host,
        "SZBENCH_REGISTRY": registry,
        "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "2",
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_LOG_LEVEL": "INFO",
    }
    live.use_settings(settings_env, values)
    broker = live.empty_broker(REDIS_URL)
    hosts = Hosts(
        tmp=tmp_path,
        main_env=live.child_env(),
        registry=registry,
        log_dir=live.log_dir_for(tmp_path, host),
    )
    try:
        yield hosts
    finally:
        hosts.stop_all()
        live.release_broker(broker)
        live.remove_leftovers(docker_client, host)


def _evaluate(hosts: Hosts, version_id: int, dv_id: int) -> dict[str, tuple[Any, ...]]:
    """A fresh evaluation (no reuse of earlier runs), waited for; its per-recording scores."""
    with session_scope() as session:
        evaluation = evaluations.create_evaluation(
            session,
            algorithm_version=session.get_one(AlgorithmVersion, version_id),
            dataset_version=session.get_one(DatasetVersion, dv_id),
            reuse=False,
        )
        session.flush()
        evaluation_id = evaluation.id

    def finished() -> bool:
        with session_scope() as session:
            return session.get_one(Evaluation, evaluation_id).status.finished

    live.wait_for(finished, 240, f"evaluation {evaluation_id}", logs=hosts.logs)
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        assert evaluation.status == EvaluationStatus.DONE, (evaluation.message, hosts.logs())
        runs = session.scalars(
            select(RecordingRun).where(RecordingRun.evaluation_id == evaluation_id)
        ).all()
        assert all(r.outcome == RunOutcome.OK for r in runs), [
            (r.outcome, r.admin_log) for r in runs
        ]
        return {
            r.recording_checksum: (
                r.detections_tsv,
                r.event_tp,
                r.event_fp,
                r.event_fn,
                r.sample_tp,
                r.sample_fp,
                r.sample_fn,
                r.num_samples,
            )
            for r in runs
        }


def test_a_second_host_evaluates_an_uploaded_archive_on_held_out_data(
    hosts: Hosts, docker_client: Any, tmp_path: Path
) -> None:
    from szbench_worker.docker_runner import inspect_image
    from szbench_worker.runner import ImageError

    archive, image_id = live.build_archive(tmp_path, docker_client, ALGORITHM, "remote-algo")
    with session_scope() as session:
        researcher = auth.create_user(session, email="res@example.org", password=None)
        _, submit_token = auth.create_token(session, researcher, scopes=["read", "write"])
        operator = auth.create_user(
            session, email="gpu-hosts@example.org", password=None, role=Role.ADMIN
        )
        _, worker_token = auth.create_token(session, operator, name="gpu-1", scopes=["worker"])

    hosts.start_api()
    hosts.start_worker("main", hosts.main_env)

    # The upload, through the API: accepted, pushed to the registry, activated.
    submitted = subprocess.run(
        [
            *(sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", "remote-algo"),
            *("-v", "1", "--image", str(archive), "--server", hosts.api_url),
            *("--token", submit_token),
        ],
        cwd=REPO,
        env=hosts.main_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr + hosts.logs()

    def active() -> bool:
        with session_scope() as session:
            version = session.scalars(select(AlgorithmVersion)).one()
            return version.status == VersionStatus.ACTIVE

    live.wait_for(active, 120, "the version's activation", logs=hosts.logs)
    with session_scope() as session:
        version = session.scalars(select(AlgorithmVersion)).one()
        assert version.image_digest == image_id
        assert (version.registry_digest or "").startswith("sha256:")
        assert version.tarball_path
        version_id, registry_digest = version.id, version.registry_digest
        assert (hosts.main_dir / "uploads" / version.tarball_path).is_file()
        prepared = make_prepared_dataset(hosts.main_dir / "datasets" / "held", RECS, seed=7)
        dataset = create_dataset(session, slug="held", kind=DatasetKind.HELD_OUT)
        dv_id = register_dataset_version(session, dataset, version="1", prepared_path=prepared).id

    # The main host: files in place, nothing fetched.
    same_host = _evaluate(hosts, version_id, dv_id)
    assert len(same_host) == len(RECS)
    assert hosts.fetches() == 0
    hosts.stop("main")
    docker_client.images.remove(image_id, force=True)
    with pytest.raises(ImageError):
        inspect_image(image_id, docker_client)

    # The second host: its own data dir; the main host's folder hidden by a tmpfs.
    remote = hosts.remote_dir
    remote_env = {
        **hosts.main_env,
        "SZBENCH_DATA_DIR": str(remote / "data"),
        "SZBENCH_RUNNER_WORK_DIR": str(remote / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(remote / "work"),
        "SZBENCH_PLATFORM_URL": hosts.api_url,
        "SZBENCH_WORKER_TOKEN": worker_token,
        "SZBENCH_RECORDING_CACHE_BYTES": str(10 * 1024**2),
        # Not in the engine's mount namespace: the engine mounts each run's /output, held by
        # a container of this image (docs/security.md, "Worker disk").
        "SZBENCH_RUNNER_HELPER_IMAGE": "szbench/python-numpy:bookworm",
    }
    hide = hosts.main_dir
    namespace = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'mount -t tmpfs none "$0" && test ! -e "$1" && test ! -e "$2" && shift 2 && exec "$@"',
        str(hide), str(prepared), str(hosts.main_dir / "uploads"),
    ]  # fmt: skip
    hosts.start_worker("remote", remote_env, prefix=namespace)

    remote_first = _evaluate(hosts, version_id, dv_id)
    assert remote_first == same_host
    assert hosts.fetches() == len(RECS)
    cache = remote / "data" / "cache" / "recordings" / "sha256"
    cached = sorted(cache.iterdir())
    assert len(cached) == len(RECS)
    assert inspect_image(image_id, docker_client).digest == image_id  # pulled by digest
    pulled = docker_client.images.get(image_id).attrs.get("RepoDigests") or []
    assert any(d.endswith("@" + registry_digest) for d in pulled)

    remote_again = _evaluate(hosts, version_id, dv_id)
    assert remote_again == same_host
    assert hosts.fetches() == len(RECS)  # nothing fetched again

    tampered = cached[0]
    tampered.chmod(0o644)
    with tampered.open("r+b") as fh:
        fh.seek(300)
        byte = fh.read(1)
        fh.seek(300)
        fh.write(bytes([byte[0] ^ 0xFF]))
    remote_after_tamper = _evaluate(hosts, version_id, dv_id)
    assert remote_after_tamper == same_host
    assert hosts.fetches() == len(RECS) + 1
    assert "does not match its checksum" in hosts.log("remote")
    assert "corrupt or tampered" in hosts.log("remote")
