"""Cross-site request forgery: state changes from another site are refused.

A browser attaches the session cookie to a request whatever page made it, so a page on
another site could make a signed-in user's browser re-run an evaluation or publish a phase.
``SameSite=Lax`` keeps the cookie off most cross-site POSTs, but not off every one (a
top-level form POST in some browsers' first two minutes, a sandboxed frame or a ``data:``
page that sends ``Origin: null``), so every POST, PUT, PATCH and DELETE that does not carry
an ``Authorization`` header is checked here, API and web forms alike:

- an ``Origin`` header must name this site (the request's ``Host``); ``null`` is refused;
- without one, a ``Referer`` header, when present, must name this site;
- with neither, the request passes: browsers send ``Origin`` on every cross-origin POST, so
  only non-browser clients (which hold no victim's cookie) send neither.

Requests with a bearer token are not checked: a page on another site cannot make a browser
add that header (no CORS is served), so such a request was made by the token's holder.
Web forms also carry a double-submit token (:mod:`szbench.web.common`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request

from szbench.errors import Forbidden

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _names_this_site(url: str, host: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == host.lower()


async def refuse_cross_site_writes(request: Request) -> None:
    """App-wide dependency: :class:`Forbidden` for a state change sent from another site."""
    # An empty Authorization header counts as none: the session cookie is then what
    # authenticates the request (szbench.auth.dependencies reads it the same way).
    if request.method not in STATE_CHANGING or request.headers.get("authorization"):
        return
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is not None:
        if not _names_this_site(origin, host):
            raise Forbidden(
                f"cross-site request refused (Origin {origin[:100]!r} is not this site)"
            )
        return
    referer = request.headers.get("referer")
    if referer and not _names_this_site(referer, host):
        raise Forbidden("cross-site request refused (Referer is not this site)")
