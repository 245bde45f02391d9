"""One envelope for every error: ``{"error": "<Name>", "detail": "..."}``.

Services raise :mod:`szbench.errors`; validation errors (422), unknown routes (404) and
wrong methods (405) are rendered the same way, and anything unexpected becomes a logged
500 whose detail gives nothing away.
"""

from __future__ import annotations

import logging
from typing import Any

import kombu.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.exc import TimeoutError as SATimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from szbench.errors import SzbenchError, TooManyAttempts

log = logging.getLogger(__name__)

_HTTP_NAMES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    411: "LengthRequired",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    416: "RangeNotSatisfiable",
    422: "ValidationError",
    429: "QuotaExceeded",
    503: "ServiceUnavailable",
}


class ErrorBody(BaseModel):
    """The error envelope (documented on every route)."""

    error: str
    detail: str


def envelope(status: int, name: str, detail: str, headers: dict[str, str] | None = None) -> Any:
    return JSONResponse({"error": name, "detail": detail}, status_code=status, headers=headers)


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(p) for p in loc) or "request"


def describe_validation_errors(errors: list[dict[str, Any]]) -> str:
    """``query.limit: Input should be less than or equal to 500; body.version: Field required``."""
    parts = [f"{_location(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:10]]
    if len(errors) > 10:
        parts.append(f"... and {len(errors) - 10} more")
    return "; ".join(parts)


async def _szbench_error(_request: Request, exc: Exception) -> Any:
    assert isinstance(exc, SzbenchError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    if isinstance(exc, TooManyAttempts):
        headers = {"Retry-After": str(exc.retry_after_s)}
    return envelope(exc.status_code, exc.name, exc.detail, headers)


async def _validation_error(_request: Request, exc: Exception) -> Any:
    assert isinstance(exc, RequestValidationError)
    return envelope(422, "ValidationError", describe_validation_errors(list(exc.errors())))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """Every method some route of the app takes at the request's path, for ``Allow``.

    Starlette answers a 405 from the first route whose path matched, so a path served by
    several routes (``GET`` and ``POST /api/v1/phases`` are two) would name only that
    route's methods. Each method is tried against every route, as the router would."""
    routes = request.app.router.routes
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            allowed.append(method)
    return ", ".join(allowed)


def http_error_headers(request: Request, exc: StarletteHTTPException) -> dict[str, str] | None:
    """The headers of an HTTP error's answer: a 405's ``Allow`` names every method."""
    headers = getattr(exc, "headers", None)
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": allowed_methods(request)}
    return headers


async def _http_error(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, StarletteHTTPException)
    name = _HTTP_NAMES.get(exc.status_code, "HTTPError")
    detail = exc.detail if isinstance(exc.detail, str) else name
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no such route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    return envelope(exc.status_code, name, detail, http_error_headers(request, exc))


async def _data_error(request: Request, exc: Exception) -> Any:
    # The database refused a value the caller sent (NUL byte in text, number out of range):
    # the caller's fault, reported without echoing the statement.
    log.info("database refused a value on %s %s: %s", request.method, request.url.path, exc)
    return envelope(
        400,
        "BadRequest",
        "a value in the request is out of range or holds characters that cannot be stored",
    )


async def _overloaded(request: Request, exc: Exception) -> Any:
    # No database connection in time (pool exhausted, database down): the server's state,
    # not the request's fault; a client may retry.
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
    return envelope(
        503,
        "ServiceUnavailable",
        "the database is busy or unreachable; retry shortly",
        {"Retry-After": "5"},
    )


async def _broker_unavailable(request: Request, exc: Exception) -> Any:
    # The task queue could not take a message (Redis down or restarting). What the request
    # committed stays; the reconciler sends its task once the broker is back
    # (docs/operations.md), and a client may retry.
    log.warning("task queue unavailable on %s %s: %s", request.method, request.url.path, exc)
    return envelope(
        503,
        "ServiceUnavailable",
        "the task queue is unreachable; retry shortly (anything already saved is queued "
        "once it is back)",
        {"Retry-After": "5"},
    )


async def _unexpected(request: Request, exc: Exception) -> Any:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return envelope(500, "InternalError", "an unexpected error occurred; it has been logged")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SzbenchError, _szbench_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DataError, _data_error)
    app.add_exception_handler(SATimeoutError, _overloaded)
    app.add_exception_handler(OperationalError, _overloaded)
    app.add_exception_handler(kombu.exceptions.OperationalError, _broker_unavailable)
    app.add_exception_handler(Exception, _unexpected)


# Documented on every route so that the OpenAPI schema (and schemathesis) knows the envelope.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": name}
    for code, name in {
        400: "Bad request",
        401: "Not signed in",
        403: "Not allowed",
        404: "Not found",
        409: "Conflict",
        413: "Payload too large",
        422: "Invalid input",
        429: "Quota exceeded",
        503: "Service unavailable",
    }.items()
}
