"""The outbound client (issue 28.5): every call to a server the platform does not run ends
at its deadline, however slowly the server answers. Real sockets on loopback: a receiver
that drips its answer one byte at a time, a server that never answers, a name lookup that
hangs, an SMTP server that drips its greeting."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from szbench.auth import mail
from szbench.config import get_settings
from szbench.notifications import webhook
from szbench.outbound import http
from szbench.outbound.deadline import Deadline, DeadlineExceeded, paced
from tests.platform.dripping_receiver import SMTP_GREETING, dripping_receiver

LOOPBACK = {
    "SZBENCH_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "SZBENCH_WEBHOOK_ALLOW_HTTP": "true",
}


def _env(patcher: pytest.MonkeyPatch, **values: str) -> None:
    for key, value in values.items():
        patcher.setenv(key, value)
    get_settings.cache_clear()


def test_the_watchdog_wakes_a_blocked_read_when_the_deadline_passes() -> None:
    ours, theirs = socket.socketpair()
    try:
        with Deadline(0.3) as deadline:
            deadline.guard(ours)
            ours.settimeout(60)  # the per-read timeout alone would wait a minute
            assert ours.recv(1) == b""  # cut: the connection ends, the read returns
            assert deadline.expired
    finally:
        ours.close()
        theirs.close()


def test_a_guarded_socket_is_cut_even_after_a_layer_wrapped_it() -> None:
    # The TLS layer detaches the socket it wraps; the watchdog's own copy still cuts it.
    ours, theirs = socket.socketpair()
    try:
        with Deadline(0.3) as deadline:
            deadline.guard(ours)
            wrapped = socket.socket(fileno=ours.detach())
            wrapped.settimeout(60)
            assert wrapped.recv(1) == b""
            wrapped.close()
    finally:
        theirs.close()


def test_a_dripping_http_answer_is_given_up_at_the_deadline() -> None:
    with dripping_receiver(interval_s=0.05) as drip:  # about 23 s of headers
        with Deadline(0.5) as deadline, pytest.raises(DeadlineExceeded):
            http.request("POST", drip.url(), deadline=deadline, content=b"{}")
        ((sent, hung_up),) = drip.wait_ended(1)
    assert hung_up
    assert sent < 100


def test_a_server_that_never_answers_is_given_up_at_the_deadline() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        with Deadline(0.3) as deadline, pytest.raises(DeadlineExceeded):
            http.request("GET", f"http://127.0.0.1:{silent.getsockname()[1]}/", deadline=deadline)
    finally:
        silent.close()


def test_a_lookup_that_hangs_is_given_up_at_the_deadline() -> None:
    release = threading.Event()

    def hanging_guard(host: str, port: int) -> list[str]:
        release.wait(30)
        return ["127.0.0.1"]

    try:
        with Deadline(0.3) as deadline, pytest.raises(DeadlineExceeded):
            http.request("GET", "http://slow.example/", deadline=deadline, guard=hanging_guard)
        assert not release.is_set()  # the call returned while the lookup still hung
    finally:
        release.set()


@pytest.fixture
def echo_server() -> Iterator[tuple[int, list[bytes]]]:
    """An HTTP server that reads the whole body and answers 200 with its length."""
    bodies: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                _, _, body = data.partition(b"\r\n\r\n")
                # Chunked: read to the last chunk.
                while not body.endswith(b"0\r\n\r\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                bodies.append(body)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], bodies
    finally:
        listener.close()


def test_an_upload_that_keeps_its_pace_outlives_its_first_deadline(
    echo_server: tuple[int, list[bytes]],
) -> None:
    # A slow source (a disk, an archive member being read) yields 10 chunks over about 1 s
    # against a 0.3 s deadline; each chunk grants the time it may take at 10 kB/s.
    port, bodies = echo_server
    tick = threading.Event()

    def slow_chunks() -> Iterator[bytes]:
        for _ in range(10):
            tick.wait(0.1)
            yield b"x" * 1000

    with Deadline(0.3) as deadline:
        answer = http.request(
            "PUT",
            f"http://127.0.0.1:{port}/blob",
            deadline=deadline,
            content=paced(slow_chunks(), deadline, bytes_per_s=10_000),
        )
    assert answer.status == 200
    assert answer.body == b"ok"
    assert bodies[0].count(b"x") == 10_000


def test_an_upload_to_a_receiver_that_stops_reading_is_cut() -> None:
    # The receiver takes the headers, then reads nothing: once the socket buffers are full
    # the send blocks, and only the deadline ends it (no byte goes out to grant more time).
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()

    def endless() -> Iterator[bytes]:
        while True:
            yield b"x" * 65536

    try:
        with Deadline(0.5) as deadline, pytest.raises(DeadlineExceeded):
            http.request(
                "PUT",
                f"http://127.0.0.1:{listener.getsockname()[1]}/blob",
                deadline=deadline,
                content=paced(endless(), deadline, bytes_per_s=10**12),
            )
    finally:
        for conn in held:
            conn.close()
        listener.close()


def test_a_webhook_to_a_dripping_receiver_fails_within_its_deadline(
    settings_env: pytest.MonkeyPatch,
) -> None:
    _env(settings_env, SZBENCH_WEBHOOK_TIMEOUT_S="0.5", **LOOPBACK)
    with dripping_receiver(interval_s=0.05) as drip:
        outcome = webhook.post(drip.url(), "s" * 16, b"{}", {})
        ((sent, hung_up),) = drip.wait_ended(1)
    assert not outcome.delivered
    assert outcome.retry
    assert outcome.error == "no answer within 0.5 s"
    assert hung_up
    assert sent < 100


def test_mail_to_a_dripping_smtp_server_gives_up_within_its_deadline(
    settings_env: pytest.MonkeyPatch,
) -> None:
    with dripping_receiver(SMTP_GREETING, interval_s=0.05, speaks_first=True) as drip:
        _env(
            settings_env,
            SZBENCH_SMTP_HOST="127.0.0.1",
            SZBENCH_SMTP_PORT=str(drip.port),
            SZBENCH_SMTP_STARTTLS="false",
            SZBENCH_SMTP_TIMEOUT_S="0.5",
        )
        assert mail.send("someone@example.org", "subject", "body") is False
        ((sent, hung_up),) = drip.wait_ended(1)
    assert hung_up
    assert sent < 100


def test_a_hub_that_drips_its_catalogue_is_given_up_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A centre's tick calls its hub; a hub that drips must cost the tick one deadline, no more.
    from szbench.errors import ServiceUnavailable
    from szbench.federation import hub_client

    monkeypatch.setattr(hub_client, "TIMEOUT_S", 0.5)
    with dripping_receiver(interval_s=0.05) as drip:
        with pytest.raises(ServiceUnavailable, match="does not answer"):
            hub_client.catalogue(_origin(drip.url()))
        ((sent, hung_up),) = drip.wait_ended(1)
    assert hung_up
    assert sent < 100


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
