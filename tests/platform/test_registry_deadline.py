"""The registry push is bounded as a whole per blob (issue 29.11): a registry on loopback
that misbehaves the ways a limit per read never ends (it drips its answer a byte at a time,
or takes a blob's bytes far below :data:`registry.MIN_RATE_BPS`) is given up on at the blob's
deadline, ``SZBENCH_REGISTRY_TIMEOUT_S`` plus one second per MIN_RATE_BPS bytes sent, with
a message saying so. Shortened here: the timeout is 1 s (shipped: 300 s).

The registry is a stand-in speaking just enough of the v2 API over a real socket, since
Debian's docker-registry cannot be made to misbehave; the well-behaved push is tested against
the real one (tests/worker/test_registry_push.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from szbench.algorithms import registry as registry_push
from szbench.config import Settings
from szbench.errors import ServiceUnavailable
from tests.platform.images import docker_save, member

# The longest a push may be waited for here before the test calls it hung: far over the
# 1 s deadline (and the few seconds of a slow blob), so only a push that never ends fails.
_HUNG_S = 60


class _Stall(BaseHTTPRequestHandler):
    """Answers a push as a registry does, except for a blob's bytes (``PATCH``): in mode
    ``drip`` it reads them, then sends its answer one byte every 0.3 s; in mode ``slow`` it
    reads them at about 100 KiB/s. Every request is counted by method."""

    protocol_version = "HTTP/1.1"
    mode = "drip"
    stop = threading.Event()
    seen: list[str] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(OSError):  # the push hung up on it: what the test wants
            super().handle()

    def _reply(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _body(self, pace: bool) -> None:
        if self.headers.get("Transfer-Encoding") != "chunked":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            return
        while size := int(self.rfile.readline().strip(), 16):
            left = size
            while left and not self.stop.is_set():
                left -= len(self.rfile.read(min(left, 16 * 1024 if pace else left)))
                if pace:
                    time.sleep(0.16)
            self.rfile.readline()
        self.rfile.readline()

    def do_GET(self) -> None:
        self.seen.append("GET")
        self._reply(404)

    def do_HEAD(self) -> None:
        self.seen.append("HEAD")
        self._reply(404)

    def do_POST(self) -> None:
        self.seen.append("POST")
        self._reply(202, {"Location": "/v2/szbench/algorithms/blobs/uploads/1"})

    def do_PATCH(self) -> None:
        self.seen.append("PATCH")
        self._body(pace=self.mode == "slow")
        if self.mode == "drip":
            for byte in b"HTTP/1.1 202 Accepted\r\nLocation: /u\r\n" * 1000:
                if self.stop.wait(0.3):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        self._reply(202, {"Location": "/v2/szbench/algorithms/blobs/uploads/1"})

    def do_PUT(self) -> None:
        self.seen.append("PUT")
        self._body(pace=False)
        self._reply(201)


@pytest.fixture
def stalling_registry() -> Iterator[type[_Stall]]:
    handler = type("Stall", (_Stall,), {"stop": threading.Event(), "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.address = f"127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    handler.stop.set()
    server.shutdown()
    server.server_close()


def _push(archive: Path, image_id: str, address: str, tmp_path: Path) -> BaseException | None:
    """Push in a thread; what it raised, or None. Fails the test if it never ends."""
    settings = Settings(registry=address, data_dir=tmp_path, registry_timeout_s=1.0)
    outcome: list[BaseException | None] = []

    def push() -> None:
        try:
            registry_push.push_archive(archive, image_id, settings)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    thread.join(_HUNG_S)
    assert outcome, f"the push to a stalling registry did not end within {_HUNG_S} s"
    return outcome[0]


def test_a_registry_dripping_its_answer_is_given_up_on_at_the_deadline(
    stalling_registry: type[_Stall], tmp_path: Path
) -> None:
    """A byte every 0.3 s never trips a limit per read of 1 s: on commit 4f6b99f this push
    never ended. Now the blob's deadline ends it, naming the setting."""
    archive = tmp_path / "img.tar"
    image_id = docker_save(archive)
    error = _push(archive, image_id, stalling_registry.address, tmp_path)  # type: ignore[attr-defined]
    assert isinstance(error, ServiceUnavailable), error
    assert "did not finish a PATCH within 1 s" in error.detail
    assert "SZBENCH_REGISTRY_TIMEOUT_S" in error.detail


def test_a_registry_taking_a_blob_too_slowly_is_given_up_on(
    stalling_registry: type[_Stall], tmp_path: Path
) -> None:
    """A 24 MiB layer taken at about 100 KiB/s, a tenth of the slowest rate allowed: the
    deadline grows with the bytes taken, yet not fast enough, and the push ends."""
    stalling_registry.mode = "slow"
    payload = os.urandom(24 * 1024**2)
    archive = tmp_path / "big.tar"
    image_id = docker_save(archive, layers=[[(member("app/weights"), payload)]])
    error = _push(archive, image_id, stalling_registry.address, tmp_path)  # type: ignore[attr-defined]
    assert isinstance(error, ServiceUnavailable), error
    assert "did not finish a PATCH within" in error.detail
    assert stalling_registry.seen.count("PATCH") == 2  # the config blob went through


def test_the_deadline_grows_with_the_bytes_sent() -> None:
    """The push's pacing: each chunk sent gives the blob's deadline one second per
    MIN_RATE_BPS bytes (the outbound client's deadline, extended as the bytes go)."""
    from szbench.outbound.deadline import Deadline, paced

    with Deadline(10.0) as deadline:
        chunks = [b"x" * registry_push.MIN_RATE_BPS] * 5
        for _ in paced(chunks, deadline, bytes_per_s=registry_push.MIN_RATE_BPS):
            pass
        assert deadline.seconds == 15.0
        assert 14.0 < deadline.remaining() <= 15.0
