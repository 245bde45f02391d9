"""``szbench algorithm submit --server`` under faults: the API restarts mid-upload, the CLI dies.

Real processes: the API under uvicorn (embedded SQLite database) and the CLI, both as
subprocesses; the upload is paced (``--limit-rate``) so that the faults land mid-transfer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from szbench import db, migrate, queue
from szbench.cli.main import app
from szbench.config import get_settings
from szbench.models import AlgorithmVersion
from tests.platform.images import docker_save
from tests.worker._live_services import child_env, free_port, wait_for

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ARCHIVE_BYTES = 3 * 1024**2
RATE = 1024**2  # bytes per second: about 3 s for the archive


# Polled often: each fault must land while the paced upload is still early on.
POLL_S = 0.05


@dataclass
class World:
    env: dict[str, str]
    port: int
    token: str
    archive: Path
    image_id: str
    sessions: Path
    server: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start_server(self) -> None:
        self.server = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "szbench.app:create_production_app",
                "--factory", "--host", "127.0.0.1", "--port", str(self.port),
                "--log-level", "warning",
            ],
            env=self.env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def up() -> bool:
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 60, "the API", poll_s=POLL_S)

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.send_signal(signal.SIGKILL)
        self.server.wait(30)
        self.server = None

    def submit(self, *extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", "resumed",
                "-v", "1", "--image", str(self.archive), "--server", self.url,
                "--token", self.token, "--limit-rate", str(RATE), *extra,
            ],
            env=self.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def received(self) -> int:
        """Bytes the server holds of the open upload (its offset: the .part file's size)."""
        return sum(p.stat().st_size for p in self.sessions.glob("*.part"))


@pytest.fixture
def world(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[World]:
    url = f"sqlite:///{tmp_path / 'api.sqlite3'}"
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    settings_env.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the CLI's resume state
    get_settings.cache_clear()
    db.reset_engine()
    migrate.upgrade(url)
    queue.set_sender(lambda *_: None)  # nothing is sent from this process
    try:
        cli = CliRunner()
        created = cli.invoke(app, ["user", "create", "up@example.org", "--no-password"])
        assert created.exit_code == 0, created.output
        token = cli.invoke(app, ["token", "create", "up@example.org"]).output.strip()
        archive = tmp_path / "algo.tar"
        blob = tarfile.TarInfo("app/weights.bin")
        image_id = docker_save(archive, layers=[[(blob, os.urandom(ARCHIVE_BYTES))]])
        w = World(
            env=child_env(),
            port=free_port(),
            token=token,
            archive=archive,
            image_id=image_id,
            sessions=get_settings().effective_uploads_dir / "sessions",
        )
        try:
            yield w
        finally:
            if w.server is not None:
                w.kill_server()
    finally:
        queue.set_sender(None)


def _one_version_with_the_same_bytes(w: World) -> None:
    with db.session_scope() as session:
        (version,) = session.query(AlgorithmVersion).all()  # created once
        assert version.image_digest == w.image_id
        assert version.tarball_path
        stored = Path(version.tarball_path)
        if not stored.is_absolute():
            stored = get_settings().effective_uploads_dir / stored
    assert stored.read_bytes() == w.archive.read_bytes()


def test_submit_survives_an_api_restart_mid_upload(world: World) -> None:
    # Before: the first refused reconnect (GET of the offset while the API was down) raised
    # out of the CLI, and the partial upload could not be resumed.
    w = world
    w.start_server()
    cli = w.submit("--retries", "30", "--retry-wait-max", "1")
    try:
        wait_for(
            lambda: w.received() > ARCHIVE_BYTES // 4, 60, "a quarter of the archive", poll_s=POLL_S
        )
        w.kill_server()
        at_kill = w.received()
        assert 0 < at_kill < w.archive.stat().st_size
        time.sleep(2)  # the CLI meets refused connections meanwhile
        w.start_server()
        out, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, out + err
    assert "retrying" in err  # it did meet the outage
    assert w.image_id in out
    _one_version_with_the_same_bytes(w)


def test_a_later_submit_resumes_an_interrupted_upload(world: World) -> None:
    w = world
    w.start_server()
    first = w.submit()
    try:
        wait_for(
            lambda: w.received() > ARCHIVE_BYTES // 3, 60, "a third of the archive", poll_s=POLL_S
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    partial = w.received()
    assert 0 < partial < w.archive.stat().st_size
    second = w.submit()
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, out + err
    assert "resuming upload" in err
    assert w.image_id in out
    _one_version_with_the_same_bytes(w)
    # The resumed session was the only one: nothing of a second upload is left behind.
    assert list(w.sessions.glob("*.part")) == []


def test_a_lost_answer_to_the_version_post_never_creates_two(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from szbench.cli import algorithm as algorithm_cli

    versions: list[dict[str, Any]] = []

    def api(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/algorithms" and request.method == "GET":
            return httpx.Response(200, json={"items": [{"id": 7, "name": "a"}]})
        if path == "/api/v1/algorithms/7/versions" and request.method == "POST":
            versions.append({"id": 1, "version": "1", "status": "pending"})
            # Created, then the connection dropped before the answer.
            raise httpx.ReadError("server closed the connection", request=request)
        if path == "/api/v1/algorithms/7/versions" and request.method == "GET":
            return httpx.Response(200, json={"items": versions})
        return httpx.Response(404, json={"error": "NotFound", "detail": path})

    real_client = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", lambda **kw: real_client(transport=httpx.MockTransport(api), **kw)
    )
    out = algorithm_cli._submit_remote(
        "http://api.invalid", "t", "a", {"version": "1", "image_reference": "x"}, None, {},
        algorithm_cli.Retry(retries=3, wait_max_s=0),
    )  # fmt: skip
    assert out["id"] == 1
    assert len(versions) == 1


def test_the_retries_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:

    calls: list[str] = []

    def refused(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ConnectError("connection refused", request=request)

    real_client = httpx.Client
    monkeypatch.setattr(
        httpx, "Client", lambda **kw: real_client(transport=httpx.MockTransport(refused), **kw)
    )
    result = CliRunner().invoke(
        app,
        [
            "algorithm", "submit", "a", "-v", "1", "--reference", "x@sha256:" + "1" * 64,
            "--server", "http://api.invalid", "--token", "t", "--retries", "3",
            "--retry-wait-max", "0",
        ],
    )  # fmt: skip
    assert result.exit_code == 1
    assert len(calls) == 4  # the first attempt and three retries
    assert "run the same command again to resume" in result.output
