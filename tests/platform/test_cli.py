"""The CLI over the same services: user, token, algorithm submit (local and remote), leaderboard."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from typer.testing import CliRunner

from szbench import db, migrate, queue
from szbench.cli import algorithm as algorithm_cli
from szbench.cli.main import app
from szbench.config import get_settings
from szbench.models import DatasetKind
from tests.platform import factories as f
from tests.platform.images import docker_save

runner = CliRunner()


@pytest.fixture
def local_db(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A migrated SQLite database (the embedded default) and captured task sends."""
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    get_settings.cache_clear()
    db.reset_engine()
    migrate.upgrade(url)
    sent: list[tuple[str, str, dict]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    yield url
    queue.set_sender(None)


def _invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_user_token_submit_leaderboard_locally(local_db: str, tmp_path: Path) -> None:
    _invoke(
        "user", "create", "ada@example.org", "--role", "researcher", "--password", "s3cret-pass"
    )
    result = runner.invoke(app, ["user", "create", "ada@example.org", "--no-password"])
    assert result.exit_code == 1
    assert "already exists" in result.output
    secret = _invoke("token", "create", "ada@example.org", "--scopes", "read").strip()
    assert secret.startswith("szb_")
    archive = tmp_path / "algo.tar"
    image_id = docker_save(archive)
    out = _invoke(
        "algorithm",
        "submit",
        "my-algo",
        "-v",
        "1.0",
        "--image",
        str(archive),
        "--email",
        "ada@example.org",
    )
    assert "pending" in out
    assert image_id in out
    # The check is shown as it goes (off a terminal: a line per tenth of it; issue 29.11).
    assert "checking the archive, 100% of" in out
    bad = tmp_path / "arm.tar"
    docker_save(bad, arch="arm64")
    result = runner.invoke(
        app,
        [
            "algorithm",
            "submit",
            "my-algo",
            "-v",
            "2",
            "--image",
            str(bad),
            "--email",
            "ada@example.org",
        ],
    )
    assert result.exit_code == 1
    assert "linux/arm64" in result.output
    # A leaderboard with one result, as a table and as JSON.
    with db.session_scope() as s:
        from szbench.models import AlgorithmVersion

        version = s.query(AlgorithmVersion).one()
        dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT, slug="cli-ds"), version="1")
        f.result(
            s, f.evaluation(s, version, dv), {"01": {"event_f1": 0.4, "event_sensitivity": 0.5}}
        )
    table = _invoke("leaderboard", "cli-ds")
    assert "my-algo" in table
    # One held-out subject at the aggregate level: no interval, and the table says why.
    assert "released from 10 subjects on (this result has 1;" in table
    # Released rounded to two decimals (held-out, aggregate level): printed as released,
    # not with a third decimal it does not have (issue 30.6).
    assert "0.40" in table
    assert "0.400" not in table
    assert "0.500" not in table
    board = json.loads(_invoke("leaderboard", "cli-ds", "--json"))
    assert board["items"][0]["algorithm"] == "my-algo"
    result = runner.invoke(app, ["leaderboard", "nope"])
    assert result.exit_code == 1
    assert "does not exist" in result.output


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_remote_submit_with_chunked_upload(
    local_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from szbench.app import create_app

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            time.sleep(0.05)
        _invoke("user", "create", "rem@example.org", "--no-password")
        token = _invoke("token", "create", "rem@example.org").strip()
        archive = tmp_path / "algo.tar.gz"
        image_id = docker_save(archive, layout="oci", gzip=True)
        monkeypatch.setattr(algorithm_cli, "CHUNK_BYTES", 512)  # several chunks
        out = _invoke(
            "algorithm", "submit", "remote-algo", "-v", "1", "--image", str(archive),
            "--server", f"http://127.0.0.1:{port}", "--token", token,
        )  # fmt: skip
        assert image_id in out
        result = runner.invoke(app, [
            "algorithm", "submit", "remote-algo", "-v", "1", "--reference", "x@sha256:" + "1" * 64,
            "--server", f"http://127.0.0.1:{port}", "--token", token,
        ])  # fmt: skip
        assert result.exit_code == 1
        assert "Conflict" in result.output
    finally:
        server.should_exit = True
        thread.join(timeout=10)
