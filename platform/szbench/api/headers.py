"""Headers that every response carries, whoever answers it.

``X-Content-Type-Options: nosniff`` stops a browser from guessing a type other than the one
declared: a JSON error that echoes a submitter's text, a static file or a download must never
be sniffed into HTML and run as a page of this origin. It is added at the very outside of the
application (:class:`SzbenchFastAPI`), outside even Starlette's last-resort 500 handler, so
routes, error handlers, static files, the read front and unknown paths all carry it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from szbench.api.openapi import mark_anonymous_reads
from szbench.config import get_settings

ALWAYS = ((b"x-content-type-options", b"nosniff"),)


class AlwaysHeaders:
    """Pure ASGI: adds :data:`ALWAYS` to every HTTP response that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in ALWAYS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class SzbenchFastAPI(FastAPI):
    """FastAPI whose whole middleware stack (the server-error handler included) is wrapped
    in :class:`AlwaysHeaders`, and whose OpenAPI document marks the routes that anonymous
    callers may use (:mod:`szbench.api.openapi`)."""

    def build_middleware_stack(self) -> Any:
        return AlwaysHeaders(super().build_middleware_stack())

    def openapi(self) -> dict[str, Any]:
        # FastAPI caches the document it builds; marking is idempotent, so a cached one
        # passes through unchanged.
        return mark_anonymous_reads(super().openapi(), anonymous_read=get_settings().anonymous_read)
