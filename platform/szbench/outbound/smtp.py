""":mod:`smtplib` under a :class:`~szbench.outbound.deadline.Deadline`: the whole conversation
(resolving, connecting, the greeting, STARTTLS, login, the message) ends when it passes.

``smtplib.SMTP(timeout=...)`` bounds each read, so a server that sends its greeting one byte
per second holds the sender for as long as it likes; here the connection belongs to the
deadline, whose watchdog cuts it, and each read waits at most what is left.
"""

from __future__ import annotations

import smtplib
import socket
from typing import Any

from szbench.outbound.deadline import Deadline


class DeadlineSMTP(smtplib.SMTP):
    """An SMTP client whose connection ends with ``deadline`` (connect in the constructor,
    as :class:`smtplib.SMTP` does when given a host)."""

    def __init__(self, host: str, port: int, *, deadline: Deadline) -> None:
        self._deadline = deadline
        super().__init__(host, port, timeout=deadline.timeout())

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        infos = self._deadline.run(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
        error: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            try:
                self._deadline.guard(sock)
                sock.settimeout(self._deadline.timeout(timeout))
                sock.connect(address)
            except OSError as exc:
                sock.close()
                error = exc
                if isinstance(exc, TimeoutError):
                    raise
                continue
            return sock
        raise error or OSError(f"{host} resolves to no address")

    def getreply(self) -> tuple[int, bytes]:
        # Each reply waits at most what is left (the watchdog cuts it then in any case).
        if self.sock is not None:
            self.sock.settimeout(self._deadline.timeout())
        return super().getreply()

    def send(self, s: Any) -> None:
        if self.sock is not None:
            self.sock.settimeout(self._deadline.timeout())
        super().send(s)
