"""Webhook calls: which URLs a user may give, the signature, and one bounded POST.

Every user chooses a webhook URL, so the platform must not become a way to reach what only
it can reach (its database, the cloud's metadata service, the centre's intranet):

- only ``https://`` (``http://`` where ``webhook_allow_http`` is set, and then only to the
  operator's ``webhook_allowed_networks``), no user name or password in the URL;
- every address the host name resolves to must be a public internet address, or inside
  ``webhook_allowed_networks``; in centre mode only the latter (nothing leaves the host
  otherwise). The check runs when the URL is saved and again at each call, on the very
  address connected to (:class:`_GuardedBackend`), so a name that resolves to another
  address by then (DNS rebinding) is refused as well;
- no redirect is followed, no proxy from the environment is used, the whole call is bounded
  by ``webhook_timeout_s`` and at most :data:`SNIPPET_BYTES` of the answer are read.

The signature lets a receiver check that a call comes from this platform and is fresh:
``X-Szbench-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed by the
secret>``, with ``X-Szbench-Timestamp: <unix seconds>`` (docs/api.md has a checking snippet).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore

from szbench.config import Settings, get_settings
from szbench.errors import BadRequest

#: At most this much of a receiver's answer is read and kept (the delivery log shows it).
SNIPPET_BYTES = 500
SIGNATURE_HEADER = "X-Szbench-Signature"
TIMESTAMP_HEADER = "X-Szbench-Timestamp"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(BadRequest):
    """A webhook URL this platform will not call (its scheme, its addresses); not retried."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``.

    >>> sign("s3cret", 1700000000, b'{"event":"test"}')
    'sha256=1c5b24400e91c3c2a54a5fc594c52fc115eb8e1d8d6b200dc40d90fa6ef6e273'
    """
    message = str(timestamp).encode("ascii") + b"." + body
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def _networks(settings: Settings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for part in settings.webhook_allowed_networks.split(","):
        if part.strip():
            nets.append(ipaddress.ip_network(part.strip(), strict=False))
    return nets


def _plain(address: IPAddress) -> IPAddress:
    # An IPv4 address written as IPv6 (::ffff:10.0.0.1) is that IPv4 address.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def address_refusal(address: IPAddress, settings: Settings) -> str | None:
    """Why a webhook may not connect to ``address`` (a clause after the address), or None."""
    address = _plain(address)
    if any(address in net for net in _networks(settings)):
        return None
    if settings.centre_mode:
        return (
            "which is not in SZBENCH_WEBHOOK_ALLOWED_NETWORKS (in centre mode webhooks reach "
            "only those networks)"
        )
    if not address.is_global or address.is_multicast:
        return (
            "which is not a public internet address (private, loopback, link-local or "
            "reserved): webhooks may not reach it"
        )
    return None


@dataclass(frozen=True)
class Target:
    """A checked webhook URL, split for the call."""

    url: str
    scheme: str
    host: str
    port: int


def check_url(url: str, settings: Settings | None = None) -> Target:
    """The URL's parts when its form is acceptable (addresses are checked on connecting);
    :class:`Refused` naming the field and the reason otherwise."""
    settings = settings or get_settings()
    url = url.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"webhook_url: not a URL ({exc})") from exc
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise Refused("webhook_url: give an https:// address")
    if parts.scheme == "http" and not settings.webhook_allow_http:
        raise Refused("webhook_url: only https:// addresses are accepted on this server")
    if parts.username is not None or parts.password is not None:
        raise Refused("webhook_url: no user name or password in the address (use the secret)")
    if len(url) > 2000:
        raise Refused("webhook_url: at most 2000 characters")
    return Target(
        url=url,
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or (443 if parts.scheme == "https" else 80),
    )


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to; :class:`Refused` when it resolves to none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"webhook_url: the host name {host!r} does not resolve ({exc})") from exc
    addresses: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def check_addresses(target: Target, settings: Settings | None = None) -> list[IPAddress]:
    """The target's addresses when every one may be reached; :class:`Refused` otherwise.

    Plain http goes only to the allowed networks: across the internet it would show the
    payload and its signature to every hop.
    """
    settings = settings or get_settings()
    addresses = resolve(target.host, target.port)
    for address in addresses:
        why = address_refusal(address, settings)
        listed = any(_plain(address) in net for net in _networks(settings))
        if why is None and target.scheme == "http" and not listed:
            why = "and plain http goes only to SZBENCH_WEBHOOK_ALLOWED_NETWORKS"
        if why is not None:
            raise Refused(f"webhook_url: {target.host} resolves to {address}, {why}")
    return addresses


class _GuardedBackend(httpcore.SyncBackend):
    """Connects only to the addresses that :func:`check_addresses` accepts, resolving the
    name once, here, so the address checked is the address connected to."""

    def __init__(self, target: Target, settings: Settings) -> None:
        self.target = target
        self.settings = settings

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = check_addresses(
            Target(self.target.url, self.target.scheme, host, port), self.settings
        )
        return super().connect_tcp(str(addresses[0]), port, timeout, local_address, socket_options)


@dataclass(frozen=True)
class Outcome:
    """What one call came to."""

    delivered: bool
    status_code: int | None = None
    error: str = ""
    snippet: str = ""
    # False for a refusal: calling again cannot change it.
    retry: bool = True


def post(url: str, secret: str, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST ``body`` to ``url``, signed with ``secret``; delivered on a 2xx answer."""
    settings = get_settings()
    try:
        target = check_url(url, settings)
    except Refused as exc:
        return Outcome(False, error=exc.detail, retry=False)
    timestamp = int(time.time())
    all_headers = {
        "Content-Type": "application/json",
        "User-Agent": "szbench-webhook",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
        **headers,
    }
    deadline = time.monotonic() + settings.webhook_timeout_s
    timeout = settings.webhook_timeout_s
    extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": 1}}
    pool = httpcore.ConnectionPool(
        ssl_context=ssl.create_default_context(),
        max_connections=1,
        network_backend=_GuardedBackend(target, settings),
    )
    try:
        with pool.stream(
            "POST",
            target.url,
            headers=list(all_headers.items()),
            content=body,
            extensions=extensions,
        ) as response:
            snippet = b""
            for chunk in response.iter_stream():
                snippet += chunk
                if len(snippet) >= SNIPPET_BYTES or time.monotonic() > deadline:
                    break
            status = response.status
    except Refused as exc:
        return Outcome(False, error=exc.detail, retry=False)
    except (httpcore.TimeoutException, TimeoutError):
        return Outcome(False, error=f"no answer within {timeout:g} s")
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError, ssl.SSLError) as exc:
        return Outcome(False, error=f"could not connect or send: {_one_line(exc)}")
    finally:
        pool.close()
    text = snippet[:SNIPPET_BYTES].decode("utf-8", errors="replace")
    if 200 <= status < 300:
        return Outcome(True, status_code=status, snippet=text)
    if 300 <= status < 400:
        error = f"answered {status}: redirects are not followed (give the final address)"
    else:
        error = f"answered {status}"
    return Outcome(False, status_code=status, error=error, snippet=text)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
