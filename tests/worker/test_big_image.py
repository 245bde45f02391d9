"""A multi-GB image end to end under the documented time-outs (issue 29.11).

A real image of about 3.2 GiB is built offline from the local base image (one layer of
incompressible random bytes, streamed into the build context, never written to disk here),
saved with ``docker save``, and submitted with ``szbench algorithm submit --server`` (its
shipped 300 s time-out) through nginx configured with the block of docs/deployment.md
("TLS in front": ``proxy_read_timeout 300s``, read from the page itself) to the API under
uvicorn, which pushes it to a real registry on loopback. Before issue 29.11 the server
checked and pushed in the submit request, with nothing shown, and a push longer than the
proxy's 300 s cut it off; now the CLI shows each server-side step with its progress and
no request waits for them. Every image and file made here is removed at the end.

Figures from a run (the step durations and the longest request nginx served) are printed,
never asserted. A second test kills the API process while its steps push and checks that
the CLI carries the submission through the restart.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from szbench import db, migrate, queue
from szbench.algorithms import registry as registry_push
from szbench.cli.main import app
from szbench.config import get_settings
from szbench.models import AlgorithmVersion
from tests.worker._live_services import child_env, free_port, wait_for
from tests.worker.conftest import BASE_IMAGE

pytestmark = [pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
PAYLOAD_BYTES = 3200 * 1024**2  # over the ~3 GB that the 300 s time-outs cut off before


def _documented_proxy(listen: int, upstream: int, tmp: Path) -> str:
    """nginx.conf around the server block of docs/deployment.md, on loopback without TLS."""
    page = (REPO / "docs" / "deployment.md").read_text()
    block = re.search(r"```nginx\n(server \{.*?\n\})\n```", page, re.S)
    assert block, "docs/deployment.md has no nginx server block"
    server = block.group(1)
    server = re.sub(r"listen 443 ssl;", f"listen 127.0.0.1:{listen};", server)
    server = re.sub(r"\n\s*ssl_certificate\S* [^\n]*;", "", server)
    server = re.sub(
        r"proxy_pass http://127\.0\.0\.1:8000;", f"proxy_pass http://127.0.0.1:{upstream};", server
    )
    assert "proxy_read_timeout 300s;" in server  # the time-out this test is about
    temp = "\n".join(
        f"    {kind}_temp_path {tmp / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {tmp / 'nginx.pid'};\n"
        f"error_log {tmp / 'error.log'} warn;\nevents {{ worker_connections 64; }}\n"
        "http {\n"
        "    log_format timed '$request_method $uri $status $request_time';\n"
        f"    access_log {tmp / 'access.log'} timed;\n{temp}\n{server}\n}}\n"
    )


@contextlib.contextmanager
def _proxy(upstream: int, tmp: Path) -> Iterator[tuple[int, Path]]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.fail("nginx is not installed; scripts/test-services.sh installs it")
    tmp.mkdir()
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(_documented_proxy(port, upstream, tmp))
    proc = subprocess.Popen(
        [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: _answers(port), 30, "nginx", logs=lambda: (tmp / "error.log").read_text())
        yield port, tmp / "access.log"
    finally:
        proc.terminate()
        proc.wait(30)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def _api(
    env: dict[str, str], log: Path, port: int | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = port or free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "szbench.app:create_production_app",
                "--factory", "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning",
            ],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for(lambda: _answers(port), 60, "the API", logs=lambda: log.read_text())
            yield port, proc
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(30)


def _context(payload_bytes: int) -> Iterator[bytes]:
    """A build context as a tar stream: a Dockerfile and ``payload_bytes`` random bytes,
    made as they are sent (nothing of it is written to disk here)."""
    dockerfile = (
        f"FROM {BASE_IMAGE}\nLABEL szbench.test={uuid.uuid4().hex}\nCOPY payload /payload\n"
        "USER 1000\n"
    ).encode()
    for name, size in (("Dockerfile", len(dockerfile)), ("payload", payload_bytes)):
        info = tarfile.TarInfo(name)
        info.size = size
        info.mode = 0o644
        yield info.tobuf(tarfile.PAX_FORMAT)
        if name == "Dockerfile":
            yield dockerfile
        else:
            left = size
            while left:
                chunk = os.urandom(min(left, 1024**2))
                left -= len(chunk)
                yield chunk
        yield bytes(-size % tarfile.BLOCKSIZE)
    yield bytes(2 * tarfile.BLOCKSIZE)


def _build_and_save(client: Any, archive: Path) -> str:
    """The big image, saved to ``archive`` and removed from the engine; its id."""
    stream = client.api.build(
        fileobj=_context(PAYLOAD_BYTES),
        custom_context=True,
        rm=True,
        pull=False,
        decode=True,
        timeout=1800,  # the engine commits the layer in silence
    )
    image_id = ""
    for event in stream:
        assert "error" not in event, event
        image_id = event.get("aux", {}).get("ID", image_id)
    assert image_id.startswith("sha256:"), "the build reported no image"
    try:
        with archive.open("wb") as out:
            for chunk in client.images.get(image_id).save(named=False):
                out.write(chunk)
    finally:
        client.images.remove(image_id, force=True)
    return image_id


@pytest.fixture
def served(
    registry: str, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """An SQLite-backed platform set up for the API processes of a test: a token, and the
    uploads folder, with ``registry`` as its registry."""
    url = f"sqlite:///{tmp_path / 'api.sqlite3'}"
    for name, value in {
        "SZBENCH_DATABASE_URL": url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_REGISTRY": registry,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }.items():
        settings_env.setenv(name, value)
    get_settings.cache_clear()
    db.reset_engine()
    migrate.upgrade(url)
    queue.set_sender(lambda *_: None)
    try:
        cli = CliRunner()
        assert cli.invoke(app, ["user", "create", "re@example.org", "--no-password"]).exit_code == 0
        yield cli.invoke(app, ["token", "create", "re@example.org"]).output.strip(), tmp_path
    finally:
        queue.set_sender(None)
        shutil.rmtree(tmp_path / "registry-data", ignore_errors=True)
        shutil.rmtree(tmp_path / "uploads", ignore_errors=True)


@pytest.mark.timeout(2400)
def test_a_multi_gb_image_through_the_documented_proxy_shows_the_server_steps(
    docker_client: Any, registry: str, served: tuple[str, Path]
) -> None:
    token, tmp_path = served
    archive = tmp_path / "big.tar"
    try:
        started = time.monotonic()
        image_id = _build_and_save(docker_client, archive)
        built_s = time.monotonic() - started
        with (
            _api(child_env(), tmp_path / "api.log") as (api_port, _),
            _proxy(api_port, tmp_path / "nginx") as (proxy_port, access_log),
        ):
            started = time.monotonic()
            submitted = subprocess.run(
                [
                    sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", "big",
                    "-v", "1", "--image", str(archive),
                    "--server", f"http://127.0.0.1:{proxy_port}", "--token", token,
                ],
                env=child_env(), cwd=REPO, capture_output=True, text=True, timeout=2000,
            )  # fmt: skip
            submit_s = time.monotonic() - started
            requests = access_log.read_text().splitlines()
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        assert image_id in submitted.stdout

        # The server's steps, each shown with its progress as it went.
        lines = submitted.stderr.splitlines()
        for label in ("checking the archive", "pushing to the registry"):
            shown = [line for line in lines if line.startswith(f"server: {label}, ")]
            assert shown, submitted.stderr[-3000:]
        pushing = {line.split(", ")[1] for line in lines if "pushing to the registry" in line}
        assert len(pushing) >= 5, pushing  # the bar moved: 0%, 10%, ... as bytes went
        # Asked for once and answered at once (202), then polled until done.
        checks = [r for r in requests if r.startswith("POST ") and r.split()[1].endswith("/check")]
        assert [r.split()[2] for r in checks] == ["202"], checks
        polls = [
            r for r in requests if re.fullmatch(r"GET /api/v1/uploads/[0-9a-f]{32} 200 \S+", r)
        ]
        assert len(polls) >= 2, requests[-20:]

        with db.session_scope() as session:
            (version,) = session.query(AlgorithmVersion).all()
            assert version.image_digest == image_id
            assert version.registry_digest is not None
            digest = version.registry_digest
        manifest = httpx.get(
            f"http://{registry}/v2/szbench/algorithms/manifests/{digest}",
            headers={"Accept": registry_push.MANIFEST_TYPE},
        )
        assert "sha256:" + hashlib.sha256(manifest.content).hexdigest() == digest
        assert manifest.json()["config"]["digest"] == image_id
        assert sum(layer["size"] for layer in manifest.json()["layers"]) > PAYLOAD_BYTES

        longest = max(float(r.split()[3]) for r in requests)
        print(
            f"\n{archive.stat().st_size / 1e9:.2f} GB archive: built and saved in {built_s:.0f} s;"
            f" submitted in {submit_s:.0f} s through nginx (its longest request {longest:.1f} s,"
            f" {len(requests)} requests)"
        )
    finally:
        archive.unlink(missing_ok=True)  # the uploads and the registry's data: `served`


def test_the_documented_proxy_block_is_read_from_the_page(tmp_path: Path) -> None:
    """The nginx configuration this file runs is the page's block, only moved to loopback."""
    conf = _documented_proxy(8443, 8000, tmp_path)
    for directive in (
        "client_max_body_size 20g;",
        "proxy_request_buffering off;",
        "proxy_read_timeout 300s;",
        "listen 127.0.0.1:8443;",
        "proxy_pass http://127.0.0.1:8000;",
    ):
        assert directive in conf
    assert "ssl_certificate" not in conf
    assert conf.count("server {") == 1


def test_the_steps_go_on_after_the_api_is_killed_mid_push(
    served: tuple[str, Path], registry: str
) -> None:
    """The API process running the steps is killed while it pushes (its thread dies with
    it); the CLI, polling, meets the server away, then the steps *interrupted*, asks for
    them again on the restarted server, which pushes without checking again, and the
    version is made once."""
    from tests.platform.images import docker_save, member

    token, tmp_path = served
    archive = tmp_path / "algo.tar"
    payload = os.urandom(200 * 1024**2)
    image_id = docker_save(archive, layers=[[(member("app/weights"), payload)]])
    del payload
    sessions = tmp_path / "uploads" / "sessions"
    log = tmp_path / "api.log"
    port = free_port()

    def step() -> str:
        for record in sessions.glob("*.steps.json"):
            with contextlib.suppress(OSError, ValueError):
                return str(json.loads(record.read_text())["step"])
        return ""

    with _api(child_env(), log, port) as (_, api):
        cli = subprocess.Popen(
            [
                sys.executable, "-m", "szbench.cli.main", "algorithm", "submit", "restarted",
                "-v", "1", "--image", str(archive), "--server", f"http://127.0.0.1:{port}",
                "--token", token,
            ],
            env=child_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        wait_for(lambda: step() == "pushing", 300, "the push", poll_s=0.02)
        api.kill()
    assert step() == "pushing"  # the record of a push that no process runs any more
    with _api(child_env(), log, port):
        out, err = cli.communicate(timeout=600)
    assert cli.returncode == 0, err[-3000:]
    assert image_id in out
    assert "the server restarted" in err
    with db.session_scope() as session:
        (version,) = session.query(AlgorithmVersion).all()
        assert version.image_digest == image_id
        assert version.registry_digest is not None
    manifest = httpx.get(
        f"http://{registry}/v2/szbench/algorithms/manifests/{version.registry_digest}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    )
    assert manifest.json()["config"]["digest"] == image_id
