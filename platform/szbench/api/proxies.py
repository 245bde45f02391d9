"""Which peers may say who the client is (``SZBENCH_FORWARDED_ALLOW_IPS``).

A reverse proxy in front of the API passes the client's address in ``X-Forwarded-For``
(and the scheme in ``X-Forwarded-Proto``). Anyone else can send those headers too, so they
are read only from the proxies named in the setting, and the client is taken the way the
documented proxy writes the header: nginx's ``$proxy_add_x_forwarded_for`` *appends* the
address it saw to whatever the client sent, so the right-most entry that is not itself a
trusted proxy is the client, and everything left of it is the client's own text. Reading the
first entry instead (what ``--forwarded-allow-ips "*"`` does) gave a forged address a fresh
sign-in throttle key on every request.

The app applies this itself (:func:`install`, uvicorn's ``ProxyHeadersMiddleware`` on the
resolved list), so the served image, ``szbench serve`` and the tests share one decision;
uvicorn runs with ``--no-proxy-headers``. Everything that reads the client address (the
sign-in and sign-up throttles, the logs) reads what this leaves in the request.

``gateway`` in the setting stands for the container's default gateway: under docker compose
a proxy on the host reaches the API through the published port, and the API sees it come
from its network's gateway, an address compose chooses.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from szbench.config import GATEWAY, ConfigError, get_settings

_ROUTES = Path("/proc/net/route")


def default_gateway(routes: Path = _ROUTES) -> str:
    """The IPv4 default gateway of this host (or container), from the kernel's table."""
    try:
        lines = routes.read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        # Iface Destination Gateway Flags ...; the default route has destination 0.
        if len(fields) > 3 and fields[1] == "00000000" and int(fields[3], 16) & 0x2:
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    raise ConfigError(
        "SZBENCH_FORWARDED_ALLOW_IPS names 'gateway', but this host has no IPv4 default "
        f"route ({routes}); name the proxy's address instead"
    )


def trusted_proxies(setting: str | None = None) -> list[str]:
    """The addresses and networks of ``setting`` (default: the settings'), ``gateway``
    resolved; the setting's validator has already refused anything else."""
    value = get_settings().forwarded_allow_ips if setting is None else setting
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    return [default_gateway() if entry == GATEWAY else entry for entry in entries]


def install(app: FastAPI) -> None:
    """Read forwarding headers from the trusted proxies only (outermost, before anything
    reads the client address)."""
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=trusted_proxies())
