"""The platform's HTTP client for servers it does not run: one call, bounded as a whole.

:func:`request` sends one request over a fresh connection (httpcore, no pool kept between
calls, no redirect followed, no proxy from the environment) and reads at most ``max_body``
bytes of the answer. Resolving the name, connecting, the TLS handshake, sending the body
and reading the headers and body all happen before one :class:`~.deadline.Deadline`: every
socket is the deadline's, and each blocking step waits only as long as is left. A server
that answers one byte per second is cut when the deadline passes, not at the end of its
answer (tests/platform/test_outbound.py).

The caller decides which addresses a call may reach (``guard``: the webhook's rules refuse
private addresses, and are asked again here, on connecting, so that the address checked is
the address connected to). A streaming upload passes an iterator as ``content`` and grows
its deadline as it goes (:func:`szbench.outbound.deadline.paced`).
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpcore

from szbench.outbound.deadline import Deadline, DeadlineExceeded

#: Which addresses ``host:port`` may be reached at, in the order to try them; raises to refuse.
Guard = Callable[[str, int], Sequence[str]]


class CallFailed(Exception):
    """The call could not be made or broke off (not a timeout): a refused connection, a
    broken TLS handshake, an answer that is not HTTP."""


@dataclass(frozen=True)
class Answer:
    """A server's answer: its status, headers (names in lower case) and the first bytes of
    its body."""

    status: int
    headers: dict[str, str]
    body: bytes


def any_address(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the guard for servers the operator names)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@cache
def _tls() -> ssl.SSLContext:
    # Loading the system's CA certificates takes milliseconds: once per process.
    return ssl.create_default_context()


def request(
    method: str,
    url: str,
    *,
    deadline: Deadline,
    headers: Sequence[tuple[str, str]] = (),
    content: bytes | Iterator[bytes] = b"",
    guard: Guard = any_address,
    max_body: int = 65536,
) -> Answer:
    """Make one call before ``deadline``; :class:`DeadlineExceeded` when it passes first,
    :class:`CallFailed` when the call breaks off otherwise. Whatever ``guard`` raises (a
    refused address) is raised as it is."""
    pool = httpcore.ConnectionPool(
        ssl_context=_tls(),
        max_connections=1,
        retries=0,
        network_backend=_Backend(deadline, guard),
    )
    timeout = deadline.remaining()
    extensions = {
        "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    }
    try:
        with pool.stream(
            method, url, headers=list(headers), content=content, extensions=extensions
        ) as response:
            body = bytearray()
            for chunk in response.iter_stream():
                body += chunk
                if len(body) >= max_body:
                    break
            answer_headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in response.headers
            }
            return Answer(response.status, answer_headers, bytes(body[:max_body]))
    except DeadlineExceeded:
        raise
    except (httpcore.TimeoutException, TimeoutError) as exc:
        raise DeadlineExceeded(deadline.seconds) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError) as exc:
        # A socket the watchdog cut reads as a disconnection: say what really happened.
        if deadline.expired:
            raise DeadlineExceeded(deadline.seconds) from exc
        raise CallFailed(" ".join(str(exc).split())[:300] or type(exc).__name__) from exc
    finally:
        pool.close()


class _Backend(httpcore.NetworkBackend):
    """Connections that belong to the deadline, to the addresses the guard allows."""

    def __init__(self, deadline: Deadline, guard: Guard) -> None:
        self.deadline = deadline
        self.guard = guard

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self.deadline.run(self.guard, host, port)
        if not addresses:
            raise CallFailed(f"{host} resolves to no address")
        error: OSError | None = None
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                self.deadline.guard(sock)
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if local_address:
                    sock.bind((local_address, 0))
                sock.settimeout(self.deadline.timeout(timeout))
                sock.connect((address, port))
            except TimeoutError as exc:
                sock.close()
                raise httpcore.ConnectTimeout(str(exc)) from exc
            except OSError as exc:
                sock.close()
                error = exc
                continue
            return _Stream(sock, self.deadline)
        raise httpcore.ConnectError(str(error))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - never asked for
        raise CallFailed("outbound calls go over TCP only")

    def sleep(self, seconds: float) -> None:  # pragma: no cover - retries=0
        raise CallFailed("outbound calls are not retried in the client")


class _Stream(httpcore.NetworkStream):
    """A socket whose every blocking step waits no longer than what is left."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            self._sock.settimeout(self._deadline.timeout(timeout))
            return self._sock.recv(max_bytes)
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._sock.settimeout(self._deadline.timeout(timeout))
            self._sock.sendall(buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The deadline holds a copy of the descriptor: the handshake is cut as well.
        try:
            self._sock.settimeout(self._deadline.timeout(timeout))
            tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
        except TimeoutError as exc:
            self.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:  # ssl.SSLError is an OSError
            self.close()
            raise httpcore.ConnectError(str(exc)) from exc
        return _Stream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object" and isinstance(self._sock, ssl.SSLSocket):
            return self._sock
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":
            readable, _, _ = select.select([self._sock], [], [], 0)
            return bool(readable)
        return None
