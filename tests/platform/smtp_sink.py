"""A minimal SMTP server on loopback that keeps what it receives (for the e-mail tests).

It speaks just enough SMTP for :mod:`smtplib` (EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP,
QUIT); the platform's real SMTP client talks to it over a real socket.
"""

from __future__ import annotations

import email
import re
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message


@dataclass
class Sink:
    port: int
    messages: list[Message] = field(default_factory=list)
    # While cleared, the sink holds every message at the end of its DATA (the sender waits
    # for the reply), so a test can tell what happened before a message was sent.
    gate: threading.Event = field(default_factory=threading.Event)
    # Set when a message's DATA has arrived (held at the gate or not).
    arrived: threading.Event = field(default_factory=threading.Event)

    def links(self, path: str) -> list[str]:
        """The links to ``path`` in every message received, oldest first."""
        found = []
        for message in self.messages:
            body = message.get_payload(decode=True)
            text = body.decode() if isinstance(body, bytes) else str(message.get_payload())
            found += re.findall(rf"https?://\S+{re.escape(path)}\?token=\S+", text)
        return found


@contextmanager
def smtp_sink(*, hold: bool = False) -> Iterator[Sink]:
    """The sink; ``hold``: its gate starts closed (open it with ``sink.gate.set()``)."""
    sink = Sink(port=0)
    if not hold:
        sink.gate.set()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            def say(line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            say("220 sink ready")
            while True:
                line = self.rfile.readline()
                if not line:
                    return
                verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
                if verb in ("EHLO", "HELO"):
                    say("250 sink")
                elif verb in ("MAIL", "RCPT", "RSET", "NOOP"):
                    say("250 ok")
                elif verb == "DATA":
                    say("354 end with .")
                    data = []
                    while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                        data.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                    sink.arrived.set()
                    sink.gate.wait(30)
                    sink.messages.append(email.message_from_bytes(b"".join(data)))
                    say("250 queued")
                elif verb == "QUIT":
                    say("221 bye")
                    return
                else:
                    say("502 not implemented")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    sink.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        sink.gate.set()
        server.shutdown()
        server.server_close()
