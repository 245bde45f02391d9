"""A webhook receiver on loopback that checks each call's signature as docs/api.md tells
receivers to (for the notification tests): the platform's real HTTP client calls it over a
real socket."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, *, max_age_s: int = 300
) -> bool:
    """The receiver's side of the signature (the snippet in docs/api.md, as a function)."""
    if abs(time.time() - int(timestamp)) > max_age_s:
        return False
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest("sha256=" + expected.hexdigest(), signature)


@dataclass
class Call:
    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int
    secret: str = ""
    calls: list[Call] = field(default_factory=list)
    # Status codes to answer, in order; once used up, 204.
    answers: list[int] = field(default_factory=list)
    answer_body: bytes = b""

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[Call]:
        deadline = time.monotonic() + timeout_s
        while len(self.calls) < count:
            assert time.monotonic() < deadline, f"{len(self.calls)} of {count} webhook calls came"
            time.sleep(0.05)
        return self.calls


@contextmanager
def webhook_receiver(secret: str = "") -> Iterator[Receiver]:
    receiver = Receiver(port=0, secret=secret)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            signed = verify(
                receiver.secret,
                headers.get("x-szbench-timestamp", "0"),
                body,
                headers.get("x-szbench-signature", ""),
            )
            with lock:
                receiver.calls.append(Call(self.path, headers, body, signed))
                status = receiver.answers.pop(0) if receiver.answers else 204
            self.send_response(status)
            if status in (301, 302, 307, 308):
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", str(len(receiver.answer_body)))
            self.end_headers()
            self.wfile.write(receiver.answer_body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
