"""The client address the throttles key on: forwarding headers are read only from the
proxies in SZBENCH_FORWARDED_ALLOW_IPS, and the client is the right-most address the proxy
appended (docs/security.md, "Client addresses")."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from szbench import config
from szbench.auth import throttle
from szbench.config import Settings, get_settings

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/api/v1/auth/login"
FREE = 3  # failures per client before its waits start, in these tests
# A server started in a process of its own has the throttle's own number (read before any
# test lowers it to FREE here).
SERVED_FREE = throttle.FREE_FAILURES_PER_CLIENT


@pytest.fixture(autouse=True)
def few_free_failures(settings_env: pytest.MonkeyPatch) -> Iterator[None]:
    settings_env.setattr(throttle, "FREE_FAILURES_PER_CLIENT", FREE)
    throttle.clock.set(datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    yield
    throttle.clock.set(None)


def _guess(client: TestClient | httpx.Client, i: int, forwarded: str | None = None) -> int:
    """One failed sign-in for a new address each time (so only the client key can throttle)."""
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    r = client.post(
        LOGIN,
        json={"email": f"guess-{i}@example.org", "password": "wrong-password-1"},
        headers=headers,
    )
    return r.status_code


def test_forged_first_entries_from_the_proxy_all_count_for_one_client(app: FastAPI) -> None:
    proxy = TestClient(app, client=("127.0.0.1", 40000))
    # As nginx's $proxy_add_x_forwarded_for writes it: whatever the client sent, then the
    # address nginx saw.
    codes = [_guess(proxy, i, f"10.{i}.0.1, 192.0.2.{i}, 203.0.113.7") for i in range(FREE + 2)]
    assert codes == [401] * (FREE + 1) + [429]
    # Another client behind the same proxy has its own key.
    assert _guess(proxy, 99, "203.0.113.8") == 401
    # The proxy's own requests (no header) are the proxy's.
    assert _guess(proxy, 98) == 401


def test_headers_from_a_peer_that_is_no_proxy_are_ignored(app: FastAPI) -> None:
    peer = TestClient(app, client=("198.51.100.7", 40000))
    codes = [_guess(peer, i, f"203.0.113.{i}") for i in range(FREE + 2)]
    assert codes == [401] * (FREE + 1) + [429]
    assert _guess(TestClient(app, client=("198.51.100.8", 40000)), 99, "198.51.100.7") == 401


def _app_trusting(base: FastAPI, settings_env: pytest.MonkeyPatch, trusted: str) -> FastAPI:
    """A new app that reads ``trusted`` at start, on the test's database session."""
    from szbench.app import create_app

    settings_env.setenv("SZBENCH_FORWARDED_ALLOW_IPS", trusted)
    get_settings.cache_clear()
    application = create_app()
    application.dependency_overrides = base.dependency_overrides
    return application


def test_proxies_in_a_listed_network_are_skipped_right_to_left(
    app: FastAPI, settings_env: pytest.MonkeyPatch
) -> None:
    front = TestClient(_app_trusting(app, settings_env, "10.1.0.0/16"), client=("10.1.2.3", 1))
    # Two proxies of the network in a row: the client is the entry left of both.
    codes = [_guess(front, i, f"6.6.6.{i}, 203.0.113.9, 10.1.9.9") for i in range(FREE + 2)]
    assert codes == [401] * (FREE + 1) + [429]
    assert _guess(front, 99, "203.0.113.10, 10.1.9.9") == 401


def test_trusting_nobody_ignores_every_header(
    app: FastAPI, settings_env: pytest.MonkeyPatch
) -> None:
    local = TestClient(_app_trusting(app, settings_env, ""), client=("127.0.0.1", 1))
    codes = [_guess(local, i, f"203.0.113.{i}") for i in range(FREE + 2)]
    assert codes == [401] * (FREE + 1) + [429]


@pytest.mark.parametrize(
    ("value", "because"),
    [
        ("*", "would let any client write its own address"),
        ("127.0.0.1,*", "would let any client write its own address"),
        ("proxy.internal", "is not an IP address, a network"),
        ("10.0.0.0/33", "is not an IP address, a network"),
    ],
)
def test_the_setting_names_addresses_only(value: str, because: str) -> None:
    with pytest.raises(ValidationError, match="SZBENCH_FORWARDED_ALLOW_IPS") as info:
        Settings(forwarded_allow_ips=value)
    assert because in str(info.value)


def test_the_setting_takes_addresses_networks_and_gateway() -> None:
    value = "127.0.0.1, ::1, 10.0.0.0/8, fd00::/8, gateway"
    assert Settings(forwarded_allow_ips=value).forwarded_allow_ips == value
    assert Settings(forwarded_allow_ips="").forwarded_allow_ips == ""


def test_gateway_is_the_default_route(tmp_path: Path) -> None:
    from szbench.api.proxies import default_gateway

    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "eth0\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    assert default_gateway(table) == "172.18.0.1"
    table.write_text("Iface\tDestination\tGateway\n")
    with pytest.raises(config.ConfigError, match="SZBENCH_FORWARDED_ALLOW_IPS names 'gateway'"):
        default_gateway(table)


# --- served as deployed ---------------------------------------------------------------------


def _image_command(port: int) -> list[str]:
    """The API image's CMD (docker/api.Dockerfile), on loopback and ``port``."""
    text = (ROOT / "docker" / "api.Dockerfile").read_text().replace("\\\n", "")
    match = re.search(r"^CMD (\[.*\])$", text, re.MULTILINE)
    assert match, "docker/api.Dockerfile has no CMD"
    command: list[str] = json.loads(match.group(1))
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    return [str(Path(sys.executable).parent / command[0]), *command[1:]]


def _serve_command(port: int) -> list[str]:
    szbench = str(Path(sys.executable).parent / "szbench")
    return [szbench, "serve", "--no-worker", "--port", str(port)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("how", ["api image", "szbench serve"])
def test_served_behind_the_documented_proxy_forged_entries_are_throttled(
    how: str, tmp_path: Path
) -> None:
    """The server as the image and `szbench serve` run it, on a fresh embedded database,
    with the default setting (a proxy on loopback): forged first entries of X-Forwarded-For
    all count against the one client the proxy appended."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SZBENCH_")}
    env.update(
        SZBENCH_DATA_DIR=str(tmp_path / "data"),
        SZBENCH_PASSWORD_SCRYPT_N="1024",
        SZBENCH_LOG_LEVEL="WARNING",
    )
    python = str(Path(sys.executable))
    migrate = subprocess.run(
        [python, "-m", "szbench.cli.main", "db", "upgrade"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    command = _image_command(port) if how == "api image" else _serve_command(port)
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, shlex.join(command)
                time.sleep(0.2)
            codes = [
                _guess(http, i, f"10.{i}.{i}.{i}, 203.0.113.7") for i in range(SERVED_FREE + 2)
            ]
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    assert codes == [401] * (SERVED_FREE + 1) + [429], (how, codes)
