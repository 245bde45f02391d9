"""A server on loopback that answers one byte at a time (issue 28.5): the receiver that held
an API thread for minutes, because each byte came within the per-read timeout.

It reads whatever the client sends first (an HTTP request up to its body, or nothing, for
a server that speaks first such as SMTP), then sends ``answer`` one byte every
``interval_s``. It records whether the client hung up before the answer was out, which is
what the tests assert: the caller gave up, it did not wait for the receiver.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# An HTTP answer whose headers alone take about ``len / rate`` seconds to drip.
HTTP_204 = b"HTTP/1.1 204 No Content\r\nX-Pad: " + b"p" * 400 + b"\r\nContent-Length: 0\r\n\r\n"
SMTP_GREETING = b"220 " + b"s" * 400 + b" ESMTP\r\n"


@dataclass
class Drip:
    port: int
    answer: bytes
    interval_s: float
    speaks_first: bool
    connections: int = 0
    # Each connection's bytes sent when it ended, and whether the client had hung up.
    ended: list[tuple[int, bool]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ended(self, count: int = 1, timeout_s: float = 30.0) -> list[tuple[int, bool]]:
        """``(bytes sent, client hung up)`` of the first ``count`` connections to end
        (waits on a condition, not a sleep)."""
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.ended) >= count, timeout_s), (
                f"{len(self.ended)} of {count} connections ended"
            )
            return list(self.ended)


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


@contextmanager
def dripping_receiver(
    answer: bytes = HTTP_204, *, interval_s: float = 0.05, speaks_first: bool = False
) -> Iterator[Drip]:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    drip = Drip(listener.getsockname()[1], answer, interval_s, speaks_first)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        sent, gone = 0, False
        try:
            conn.settimeout(30)
            if not speaks_first:
                _read_request(conn)
            for i in range(len(answer)):
                if stop.wait(interval_s):
                    break
                try:
                    conn.sendall(answer[i : i + 1])
                except OSError:
                    gone = True
                    break
                sent += 1
                # A client that hung up shows as a readable socket with nothing to read.
                conn.setblocking(False)
                try:
                    if conn.recv(65536, socket.MSG_PEEK) == b"":
                        gone = True
                        break
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
                    break
                finally:
                    conn.setblocking(True)
                    conn.settimeout(30)
        except OSError:
            gone = True
        finally:
            conn.close()
            with drip.changed:
                drip.ended.append((sent, gone))
                drip.changed.notify_all()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with drip.changed:
                drip.connections += 1
                drip.changed.notify_all()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield drip
    finally:
        stop.set()
        listener.close()
