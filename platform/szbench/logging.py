"""Structured logs for the API, the worker and the CLI.

One call, :func:`configure_logging`, sets up the root logger from the settings
(``SZBENCH_LOG_LEVEL``, ``SZBENCH_LOG_FORMAT``): ``json`` writes one JSON object per line
(for log collectors), ``text`` a readable line (for a terminal). Every record carries the id
of the request or task it belongs to, so that the lines of one upload or one container run
can be found together:

- the API adds :class:`RequestIdMiddleware`, which takes the caller's ``X-Request-ID`` (when it
  is sane) or makes one, binds it for the request and returns it in the response header;
- the worker calls :func:`install_celery_log_context`, which binds the Celery task id and task
  name around every task.

The module is named ``szbench.logging``; inside it ``logging`` is still the standard library
(absolute imports), and callers import it as ``from szbench import logging as szlog`` or by
its functions.
"""

from __future__ import annotations

import logging
import os
import random
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from szbench.config import Settings, get_settings

__all__ = [
    "REQUEST_ID_HEADER",
    "ContextFilter",
    "RequestIdMiddleware",
    "bind_context",
    "configure_logging",
    "current_context",
    "install_celery_log_context",
]

REQUEST_ID_HEADER = "X-Request-ID"
LOG_FORMATS = ("json", "text")

# Fields bound to the current request or task; copied onto every record logged inside it.
_context: ContextVar[dict[str, str] | None] = ContextVar("szbench_log_context", default=None)

# A caller-supplied request id is echoed into logs and headers: accept only short, plain ids
# so that nobody can inject newlines or megabytes into them.
_SANE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def current_context() -> dict[str, str]:
    """The fields bound to the current request or task (a copy)."""
    return dict(_context.get() or {})


@contextmanager
def bind_context(**fields: str) -> Iterator[None]:
    """Add ``fields`` to every record logged inside the ``with`` block (nestable).

    >>> with bind_context(request_id="abc"):
    ...     current_context()
    {'request_id': 'abc'}
    >>> current_context()
    {}
    """
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copy the bound context (request id, task id, ...) onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class _TextFormatter(logging.Formatter):
    """``time level logger [ctx] message``, with the bound context when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={v}" for k, v in sorted((_context.get() or {}).items()))
        record.ctx = f" [{ctx}]" if ctx else ""
        return super().format(record)


def _json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
        json_ensure_ascii=False,
    )


def configure_logging(
    settings: Settings | None = None, *, stream: Any = None, force: bool = True
) -> logging.Handler:
    """Send every log record to one handler on stderr, formatted as the settings say.

    Call it once at process start (``szbench serve``, the Celery worker's ``setup_logging``
    signal, CLI commands). Calling it again replaces the handler it installed before, so tests
    and reloads do not duplicate lines.

    Parameters
    ----------
    settings
        Defaults to :func:`szbench.config.get_settings`.
    stream
        Where to write (default ``sys.stderr``).
    force
        Remove handlers other code put on the root logger first (uvicorn, Celery).

    Returns
    -------
    logging.Handler
        The installed handler.
    """
    settings = settings or get_settings()
    fmt = settings.log_format.lower()
    if fmt not in LOG_FORMATS:
        raise ValueError(f"SZBENCH_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    level = logging.getLevelName(settings.log_level.upper())
    if not isinstance(level, int):
        raise ValueError(
            f"SZBENCH_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
            f"not {settings.log_level!r}"
        )

    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name("szbench")
    handler.addFilter(ContextFilter())
    if fmt == "json":
        handler.setFormatter(_json_formatter())
    else:
        handler.setFormatter(
            _TextFormatter("%(asctime)s %(levelname)-7s %(name)s%(ctx)s: %(message)s")
        )

    root = logging.getLogger()
    for old in list(root.handlers):
        if force or old.get_name() == "szbench":
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Uvicorn and Celery loggers keep their own handlers unless told to propagate to ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery"):
        lib = logging.getLogger(name)
        lib.handlers.clear()
        lib.propagate = True
    return handler


# Request ids need to be unique, not unpredictable. uuid4() reads os.urandom, which lets go
# of the GIL for the system call: under load, the event loop then waits for any busy worker
# thread to hand the GIL back (up to the 5 ms switch interval) once per request.
_request_ids = random.Random()
if hasattr(os, "register_at_fork"):  # forked workers (gunicorn --preload) must not share ids
    os.register_at_fork(after_in_child=_request_ids.seed)


def new_request_id() -> str:
    """32 hex digits, like a uuid4's, from a PRNG seeded from the OS at import."""
    return f"{_request_ids.getrandbits(128):032x}"


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RequestIdMiddleware:
    """ASGI middleware: bind a request id for the request's logs and return it as a header.

    A sane incoming ``X-Request-ID`` (from a proxy in front) is kept; otherwise a new one
    is made. Usage: ``app.add_middleware(RequestIdMiddleware)``.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self._header = REQUEST_ID_HEADER.lower().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        incoming = ""
        for key, value in scope.get("headers", []):
            if key == self._header:
                incoming = value.decode("latin-1")
                break
        request_id = incoming if _SANE_ID.match(incoming) else new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != self._header
                ]
                headers.append((self._header, request_id.encode("latin-1")))
                message["headers"] = headers
            await send(message)

        with bind_context(request_id=request_id):
            await self.app(scope, receive, send_with_id)


_celery_tokens: dict[str, Any] = {}


def _task_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task_id is None:
        return
    fields = {**(_context.get() or {}), "task_id": task_id}
    if task is not None and getattr(task, "name", None):
        fields["task_name"] = task.name
    _celery_tokens[task_id] = _context.set(fields)


def _task_postrun(task_id: str | None = None, **_: Any) -> None:
    token = _celery_tokens.pop(task_id or "", None)
    if token is not None:
        try:
            _context.reset(token)
        except ValueError:
            # The task ran in another context (eventlet/gevent pools): just clear it.
            _context.set(None)


def install_celery_log_context() -> None:
    """Bind ``task_id`` and ``task_name`` to every record logged inside a Celery task.

    Call once in the worker process (idempotent). Celery is imported here, not at module
    level, so that the API process does not pay for it on import.
    """
    from celery import signals

    signals.task_prerun.connect(_task_prerun, weak=False, dispatch_uid="szbench-log-prerun")
    signals.task_postrun.connect(_task_postrun, weak=False, dispatch_uid="szbench-log-postrun")
