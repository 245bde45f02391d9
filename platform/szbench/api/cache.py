"""HTTP caching of the answers kept by :mod:`szbench.stamped_cache`.

Each answer carries its ETag; a client that sends it back in ``If-None-Match`` gets ``304
Not Modified`` with no body. The tag is weak (``W/``): a compressing layer may send other
bytes for the same answer. Answers differ per viewer (admins, owners and everyone else see
different facts on held-out data), and the ETag differs with them, so every cached answer
says ``Vary: Cookie, Authorization``. Anonymous answers are ``public`` for a short while
(:data:`PUBLIC_MAX_AGE_S`), so that a reverse proxy can take the bulk of anonymous reads;
a signed-in viewer's are ``private`` and revalidated on every use.
"""

from __future__ import annotations

from fastapi import Request, Response

from szbench.stamped_cache import Answer

VARY = "Cookie, Authorization"
# Seconds a proxy or browser may reuse an anonymous answer without asking again: 10 s lets a
# proxy absorb a burst of anonymous reads of a popular board, and a new result still shows
# within seconds. A tuning knob; an operator who wants more caches in their proxy.
PUBLIC_MAX_AGE_S = 10


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    # Weak comparison (RFC 9110, 13.1.2): a W/ prefix does not matter.
    return any(tag.strip().removeprefix("W/") == etag for tag in if_none_match.split(","))


def cached_json(request: Request, answer: Answer, *, signed_in: bool) -> Response:
    """``answer`` as a JSON response with its validators, or ``304`` when the client's
    copy is current."""
    cache_control = "private, no-cache" if signed_in else f"public, max-age={PUBLIC_MAX_AGE_S}"
    headers = {"ETag": f"W/{answer.etag}", "Cache-Control": cache_control, "Vary": VARY}
    if _matches(request.headers.get("if-none-match"), answer.etag):
        return Response(status_code=304, headers=headers)
    return Response(answer.body, media_type="application/json", headers=headers)
