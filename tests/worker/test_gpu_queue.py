"""Issue 30.7: the gpu queue end to end, as a deployment runs it.

An upload that wants a GPU (the ``szbench gpu-check`` image: a small CUDA program that
allocates device memory, fills it and reads it back, and says what it saw) goes through the
API; a real Celery worker consuming only the ``gpu`` queue, with ``SZBENCH_RUNNER_GPUS``
naming one GPU, smoke-tests it on a public sample and evaluates it on held-out data through
the Docker runner; the evaluation's provenance names the GPU's model and driver, on the API
and on the evaluation's page; every run's log says the container saw the GPU.

``test_the_gpu_queue_end_to_end_on_a_real_gpu`` is marked ``gpu``: it runs wherever a GPU
and the NVIDIA container runtime are present (scripts/test.sh runs the ``gpu`` tests where
``nvidia-smi`` answers, and leaves them out, saying so, elsewhere). The same journey on the
``cpu`` queue runs everywhere, so that the harness itself is tested where there is no GPU.

Real parts: PostgreSQL, Redis, the app under uvicorn on loopback, a ``celery worker`` child
process, the Docker engine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from szbench import db
from szbench.auth import service as auth
from szbench.db import session_scope
from szbench.models import Role
from tests.redis_urls import redis_url
from tests.worker import _live_services as live
from tests.worker._pipeline_factories import truncate_all

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = redis_url(11)
TIMEOUT_S = 300


def host_gpu() -> tuple[str, str, str]:
    """The first GPU as ``nvidia-smi`` shows it: index, model, driver. Fails (never skips)
    where there is none: this test is selected only where a GPU is (the ``gpu`` marker)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.fail("no nvidia-smi on this host: the gpu tests need a GPU", pytrace=False)
    out = subprocess.run(
        [smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    index, name, driver = (part.strip() for part in out.splitlines()[0].split(","))
    return index, name, driver


@dataclass
class Deployment:
    api: str
    admin: dict[str, str]
    researcher: dict[str, str]
    worker_log: Path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A public sample and a held-out set, prepared (one 10-minute recording each)."""
    from szbench_worker.datasets import prepare_dataset
    from szbench_worker.synth import generate_dataset

    root = tmp_path_factory.mktemp("gpu-data")
    out = {}
    for name, seed in (("public", 3), ("held", 7)):
        generate_dataset(root / f"{name}-bids", subjects=1, hours=10 / 60, recording_minutes=10,
                         seed=seed)  # fmt: skip
        prepare_dataset(root / f"{name}-bids", root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def check_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``szbench gpu-check`` image, built offline, as ``docker save`` writes it."""
    from szbench_worker import gpu_check
    from szbench_worker.docker_runner import connect

    client = connect()
    try:
        image_id = gpu_check.build_check_image(client)
        tar = tmp_path_factory.mktemp("gpu-image") / "gpu-check.tar"
        with tar.open("wb") as out:
            for chunk in client.images.get(image_id).save():
                out.write(chunk)
    finally:
        client.close()
    return tar


@contextmanager
def _deployment(
    settings_env: pytest.MonkeyPatch, pg_url: str, tmp_path: Path, gpu: str | None
) -> Iterator[Deployment]:
    """The API and one Celery worker of the ``gpu`` queue (with ``gpu``) or of the ``cpu``
    queue (``gpu`` None), sharing PostgreSQL, Redis and the uploads folder."""
    import uvicorn

    host = f"gpu-test-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_BROKER_URL": REDIS_URL,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(tmp_path / "work"),
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_RUNNER_TIMEOUT_S": "300",
        "SZBENCH_WORKER_HOST": host,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "gpu-queue-test-secret-key",
        "SZBENCH_SMOKE_TEST_DATASET": "public-sample",
        "SZBENCH_RUNNER_GPUS": gpu or "",
    }
    live.use_settings(settings_env, values)
    broker = live.empty_broker(REDIS_URL)
    with session_scope() as session:
        truncate_all(session)
        admin = auth.create_user(
            session, email="gpu-admin@example.org", password=None, role=Role.ADMIN
        )
        researcher = auth.create_user(session, email="gpu-rita@example.org", password=None)
        _, admin_secret = auth.create_token(
            session, admin, name="t", scopes=["read", "write", "admin"]
        )
        _, researcher_secret = auth.create_token(session, researcher, name="t")
    worker_log = tmp_path / "worker.log"
    queue_name = "gpu" if gpu else "cpu"
    cmd = [sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
    cmd += ["--pool", "solo", "--concurrency", "1", "-Q", queue_name, "-n", f"{host}@%h"]
    cmd += ["--without-mingle", "--without-gossip", "--loglevel", "INFO"]
    worker = subprocess.Popen(
        cmd, cwd=REPO, env=live.child_env(), stdout=worker_log.open("wb"), stderr=subprocess.STDOUT
    )
    from szbench.app import create_app

    port = live.free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    live.wait_for(lambda: server.started, timeout_s=30, what="uvicorn")
    live.wait_for(
        lambda: "ready." in worker_log.read_text(errors="replace") or worker.poll() is not None,
        timeout_s=60,
        what="the celery worker",
    )
    assert worker.poll() is None, worker_log.read_text()[-3000:]
    try:
        yield Deployment(
            f"http://127.0.0.1:{port}",
            {"Authorization": f"Bearer {admin_secret}"},
            {"Authorization": f"Bearer {researcher_secret}"},
            worker_log,
        )
    finally:
        server.should_exit = True
        thread.join(15)
        live.stop_processes([worker])
        live.release_broker(broker)
        from szbench_worker.docker_runner import connect

        client = connect()
        live.remove_leftovers(client, host)
        client.close()
        db.reset_engine()


@dataclass
class Journey:
    evaluation: dict[str, Any]
    runs: list[dict[str, Any]]
    page: str
    reports: list[str]


def _journey(d: Deployment, data: dict[str, Path], tarball: Path, *, wants_gpu: bool) -> Journey:
    """Datasets registered by the admin, the image uploaded and submitted by a researcher
    (wanting a GPU or not), the smoke test and the held-out evaluation waited for; what the
    API and the evaluation's page say of it."""
    with httpx.Client(base_url=d.api + "/api/v1", timeout=60) as api:

        def call(method: str, path: str, who: dict[str, str], **kw: Any) -> Any:
            r = api.request(method, path, headers={**who, **kw.pop("headers", {})}, **kw)
            assert r.status_code < 300, (method, path, r.status_code, r.text)
            return r.json() if r.content else None

        for slug, kind, folder in (
            ("public-sample", "public_sample", data["public"]),
            ("held", "held_out", data["held"]),
        ):
            body = {"slug": slug, "kind": kind, "confirm_public": kind == "public_sample"}
            call("POST", "/datasets", d.admin, json=body)
            register = {"version": "1", "prepared_path": str(folder), "queue_benchmark": False}
            call("POST", f"/datasets/{slug}/versions", d.admin, json=register)
        algo = call("POST", "/algorithms", d.researcher, json={"name": "cuda-check"})
        blob = tarball.read_bytes()
        upload = call("POST", "/uploads", d.researcher,
                      json={"filename": "gpu-check.tar", "size_bytes": len(blob)})  # fmt: skip
        call("PUT", f"/uploads/{upload['id']}?offset=0", d.researcher, content=blob, headers={
            **d.researcher, "Content-Type": "application/octet-stream",
            "Content-Range": f"bytes 0-{len(blob) - 1}/{len(blob)}"})  # fmt: skip
        submit = {"version": "1", "upload_id": upload["id"], "wants_gpu": wants_gpu}
        version = call("POST", f"/algorithms/{algo['id']}/versions", d.researcher, json=submit)

        def held_out_done() -> dict[str, Any] | None:
            page = call("GET", "/evaluations?limit=50", d.admin)
            for e in page["items"]:
                if (
                    e["algorithm_version_id"] == version["id"]
                    and e["dataset"] == "held"
                    and e["status"] in ("done", "failed", "cancelled")
                ):
                    return e  # type: ignore[no-any-return]
            return None

        found = live.wait_for(
            held_out_done,
            timeout_s=TIMEOUT_S,
            what="the held-out evaluation",
            logs=lambda: d.worker_log.read_text(errors="replace")[-6000:],
        )
        evaluation = call("GET", f"/evaluations/{found['id']}", d.admin)
        runs = call("GET", f"/evaluations/{found['id']}/recordings?limit=50", d.admin)["items"]
        smoke = call("GET", f"/algorithms/{algo['id']}/versions/{version['id']}", d.admin)
        assert smoke["status"] == "active", smoke
        page = httpx.get(f"{d.api}/evaluations/{found['id']}", headers=d.admin, timeout=30).text
    from szbench_worker.gpu_check import REPORT

    reports = [m.group(0) for r in runs for m in REPORT.finditer(r.get("admin_log") or "")]
    return Journey(evaluation, runs, page, reports)


@pytest.mark.gpu
def test_the_gpu_queue_end_to_end_on_a_real_gpu(
    settings_env: pytest.MonkeyPatch,
    pg_url: str,
    tmp_path: Path,
    prepared: dict[str, Path],
    check_tarball: Path,
) -> None:
    index, model, driver = host_gpu()
    with _deployment(settings_env, pg_url, tmp_path, index) as d:
        journey = _journey(d, prepared, check_tarball, wants_gpu=True)
        assert journey.evaluation["queue"] == "gpu"
        assert journey.evaluation["status"] == "done", journey.evaluation
        assert [r["outcome"] for r in journey.runs] == ["ok"]
        assert journey.evaluation["provenance"]["gpu_models"] == [model]
        assert {r["provenance"]["gpu_driver"] for r in journey.runs} == {driver}
        # The container itself saw the GPU and used its memory.
        assert journey.reports, [r.get("admin_log") for r in journey.runs]
        assert all("seen=yes" in line and "memory_check=ok" in line for line in journey.reports)
        assert f"<dt>GPU</dt><dd>{model}</dd>" in journey.page


def test_the_same_journey_on_the_cpu_queue(
    settings_env: pytest.MonkeyPatch,
    pg_url: str,
    tmp_path: Path,
    prepared: dict[str, Path],
    check_tarball: Path,
) -> None:
    """The harness of the test above where there is no GPU: the same upload without
    ``wants_gpu`` runs on the cpu queue, and the container says it saw no GPU."""
    with _deployment(settings_env, pg_url, tmp_path, None) as d:
        journey = _journey(d, prepared, check_tarball, wants_gpu=False)
        assert journey.evaluation["queue"] == "cpu"
        assert journey.evaluation["status"] == "done", journey.evaluation
        assert [r["outcome"] for r in journey.runs] == ["ok"]
        assert journey.evaluation["provenance"]["gpu_models"] == []
        assert journey.reports
        assert all("seen=no" in line for line in journey.reports)
        assert "<dt>GPU</dt><dd>none</dd>" in journey.page
