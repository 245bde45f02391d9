"""Webhook calls: which URLs a user may give, the signature, and one bounded POST.

Every user chooses a webhook URL, so the platform must not become a way to reach what only
it can reach (its database, the cloud's metadata service, the centre's intranet):

- only ``https://`` (``http://`` where ``webhook_allow_http`` is set, and then only to the
  operator's ``webhook_allowed_networks``), no user name or password in the URL;
- every address the host name resolves to must be a public internet address, or inside
  ``webhook_allowed_networks``; in centre mode only the latter (nothing leaves the host
  otherwise). An IPv6 address that embeds an IPv4 address (mapped, SIIT, IPv4-compatible,
  NAT64, 6to4) is checked as that IPv4 address; Teredo and local-use NAT64 addresses are
  refused (:func:`plain`). The check runs when the URL is saved and again at each call, on
  the very address connected to (the guard :func:`post` gives the outbound client), so a
  name that resolves to another address by then (DNS rebinding) is refused as well;
- no redirect is followed, no proxy from the environment is used, the whole call (connect,
  send, the answer's headers and body) ends within ``webhook_timeout_s`` however slowly the
  receiver answers (:mod:`szbench.outbound`), and at most :data:`SNIPPET_BYTES` of the
  answer are read.

The signature lets a receiver check that a call comes from this platform and is fresh:
``X-Szbench-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed by the
secret>``, with ``X-Szbench-Timestamp: <unix seconds>`` (docs/api.md has a checking snippet).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from szbench.config import Settings, get_settings
from szbench.errors import BadRequest
from szbench.outbound import http
from szbench.outbound.deadline import Deadline, DeadlineExceeded

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


# IPv6 forms that carry an IPv4 address, and where (RFC 6052, 7915, 3056, 4291). A call to
# one of them reaches that IPv4 address (through a translator, a relay or the host's own
# stack), so the IPv4 address is what is checked. Teredo (2001::/32, RFC 4380) and the
# local-use NAT64 prefix (64:ff9b:1::/48, RFC 8215, where the operator chooses the prefix
# length and so where the address sits) are refused outright: no webhook receiver needs them.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TEREDO = ipaddress.ip_network("2001::/32")


class _Tunnel(ValueError):
    """An address form that hides where it leads (Teredo, local-use NAT64)."""


def plain(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form embeds (mapped, SIIT, IPv4-compatible, NAT64 /96,
    6to4), or ``address`` itself.

    >>> str(plain(ipaddress.ip_address("64:ff9b::7f00:1")))
    '127.0.0.1'
    >>> str(plain(ipaddress.ip_address("2002:a00:1::1")))
    '10.0.0.1'
    """
    if not isinstance(address, ipaddress.IPv6Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _TEREDO or address in _NAT64_LOCAL:
        raise _Tunnel(str(address))
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64 or address in _SIIT:
        return low32
    # ::/96 holds :: and ::1 as well, which are themselves (unspecified, loopback).
    if address in _COMPATIBLE and int(address) > 1:
        return low32
    return address


def address_refusal(address: IPAddress, settings: Settings) -> str | None:
    """Why a webhook may not connect to ``address`` (a clause after the address), or None."""
    nets = _networks(settings)
    if any(address in net for net in nets):
        return None  # the operator named this very address's network
    try:
        reached = plain(address)
    except _Tunnel:
        return (
            "a Teredo or local-use NAT64 address, which hides the address it leads to: "
            "webhooks may not reach it"
        )
    if any(reached in net for net in nets):
        return None
    if settings.centre_mode:
        return (
            "which is not in SZBENCH_WEBHOOK_ALLOWED_NETWORKS (in centre mode webhooks reach "
            "only those networks)"
        )
    embeds = "" if reached == address else f" (it leads to {reached})"
    if not reached.is_global or reached.is_multicast:
        return (
            f"which is not a public internet address{embeds} (private, loopback, link-local "
            "or reserved): webhooks may not reach it"
        )
    return None


def _listed(address: IPAddress, settings: Settings) -> bool:
    nets = _networks(settings)
    if any(address in net for net in nets):
        return True
    try:
        return any(plain(address) in net for net in nets)
    except _Tunnel:
        return False


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


def host_of(url: str) -> str:
    """The host a webhook URL names, in lower case ("" when it names none)."""
    try:
        return (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return ""


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
        listed = _listed(address, settings)
        if why is None and target.scheme == "http" and not listed:
            why = "and plain http goes only to SZBENCH_WEBHOOK_ALLOWED_NETWORKS"
        if why is not None:
            raise Refused(f"webhook_url: {target.host} resolves to {address}, {why}")
    return addresses


@dataclass(frozen=True)
class Outcome:
    """What one call came to."""

    delivered: bool
    status_code: int | None = None
    error: str = ""
    snippet: str = ""
    # False for a refusal: calling again cannot change it.
    retry: bool = True
    # The call ran out its deadline: the receiver is slow (its other calls can wait).
    ran_out: bool = False


def post(url: str, secret: str, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST ``body`` to ``url``, signed with ``secret``; delivered on a 2xx answer. The whole
    call, however slowly the receiver answers, ends within ``webhook_timeout_s``."""
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

    def guard(host: str, port: int) -> list[str]:
        # Resolved once, here, on connecting: the address checked is the address used.
        checked = Target(target.url, target.scheme, host, port)
        return [str(a) for a in check_addresses(checked, settings)]

    try:
        with Deadline(settings.webhook_timeout_s) as deadline:
            answer = http.request(
                "POST",
                target.url,
                deadline=deadline,
                headers=list(all_headers.items()),
                content=body,
                guard=guard,
                max_body=SNIPPET_BYTES,
            )
    except Refused as exc:
        return Outcome(False, error=exc.detail, retry=False)
    except DeadlineExceeded as exc:
        return Outcome(False, error=str(exc), ran_out=True)
    except http.CallFailed as exc:
        return Outcome(False, error=f"could not connect or send: {exc}")
    text = answer.body.decode("utf-8", errors="replace")
    status = answer.status
    if 200 <= status < 300:
        return Outcome(True, status_code=status, snippet=text)
    if 300 <= status < 400:
        error = f"answered {status}: redirects are not followed (give the final address)"
    else:
        error = f"answered {status}"
    return Outcome(False, status_code=status, error=error, snippet=text)
