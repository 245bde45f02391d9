"""Per-process caches of serialised read answers, checked against the database by *stamp*.

Read routes whose answer rarely changes (leaderboards, an evaluation's results, an
algorithm's results) keep the JSON they produced, grouped by *subject* (a dataset version,
an evaluation, an algorithm). Each subject has *facts*: one small row (status, finish time,
published flag, visibility, owner, counts...) that changes whenever any answer about it could,
and from which the access check is made. An answer is rebuilt only when its subject's facts
changed (or after a time to live, for edits the facts do not see, such as a new title).

How often the facts are read:

- within the freshness window (``SZBENCH_*_FRESH_S``, 1 s by default) after the last check,
  an answer is served from memory on the event loop: no database access, no worker thread;
- after it, for up to :data:`STALE_GRACE_S` more, the answer is still served from memory
  while one background task re-reads the facts of every subject asked for meanwhile, in one
  go (one query for a whole batch of evaluations): request latency never waits for it;
- later than that, or when the subject is new, the request checks the facts itself.

A write handled by this process marks every entry as unchecked (:func:`end_freshness`), so
that a user who publishes a result sees it on their next read; other processes see it
within their window plus one check. A window of 0 turns all of this off: every request
checks the facts (the tests do this).

Variants (the query parameters, and the viewer where the answer depends on who asks) are
part of each answer's key; errors are never cached.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import Request, Response
from sqlalchemy.orm import Session

from szbench.api.deps import db_slot, run_in_slot
from szbench.db import get_sessionmaker

log = logging.getLogger(__name__)

#: Seconds past the freshness window during which an answer is still served while its facts
#: are re-read in the background.
STALE_GRACE_S = 5.0

#: Answers kept per subject (variants: query parameters, and viewers where answers differ).
ANSWERS_PER_SUBJECT = 64

#: Reads the facts of many subjects; a subject missing from the result does not exist.
StampReader = Callable[[Session, list[Any]], dict[Any, Hashable]]

_caches: weakref.WeakSet[StampedCache] = weakref.WeakSet()
_background: set[asyncio.Task[None]] = set()


@dataclass
class _Entry:
    facts: Hashable
    checked_at: float
    checked: bool = True  # False after a local write: check before serving again
    answers: dict[Hashable, tuple[float, bytes]] = field(default_factory=dict)


class StampedCache:
    """Answers per subject and variant, valid while the subject's facts are unchanged."""

    def __init__(
        self,
        name: str,
        read_facts: StampReader,
        *,
        kept: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._clock = clock
        self._read_facts = read_facts
        self._kept = kept
        self._lock = threading.Lock()
        self._entries: OrderedDict[Any, _Entry] = OrderedDict()
        self._pending: set[Any] = set()
        self._refreshing = False
        _caches.add(self)

    # --- On the event loop ---------------------------------------------------------------

    def peek(
        self, subject: Any, variant: Hashable, window_s: float
    ) -> tuple[Hashable, bytes | None] | None:
        """``(facts, answer or None)`` when they may be used without reading the facts now."""
        if window_s <= 0:
            return None
        now = self._clock()
        with self._lock:
            entry = self._entries.get(subject)
            if entry is None or not entry.checked:
                return None
            age = now - entry.checked_at
            if age >= window_s + STALE_GRACE_S:
                return None
            stale = age >= window_s
            answer = entry.answers.get(variant)
        if stale:
            self._refresh_later(subject)
        return entry.facts, (answer[1] if answer is not None else None)

    def _refresh_later(self, subject: Any) -> None:
        with self._lock:
            self._pending.add(subject)
            if self._refreshing:
                return
            self._refreshing = True
        task = asyncio.get_running_loop().create_task(self._refresh())
        _background.add(task)
        task.add_done_callback(_background.discard)

    async def _refresh(self) -> None:
        while True:
            with self._lock:
                batch = list(self._pending)
                self._pending.clear()
                if not batch:
                    self._refreshing = False
                    return
            try:
                async with db_slot():
                    await anyio.to_thread.run_sync(self._refresh_batch, batch)
            except Exception:
                # The entries stay stale; requests past the grace period check for themselves.
                log.exception("refreshing the %s cache failed", self.name)

    def _refresh_batch(self, subjects: list[Any]) -> None:
        session = get_sessionmaker()()
        try:
            facts = self._read_facts(session, subjects)
        finally:
            session.close()
        self._update(subjects, facts)

    # --- In worker threads ---------------------------------------------------------------

    def check(self, session: Session, subject: Any) -> Hashable | None:
        """Read the subject's facts now; None when it does not exist."""
        facts = self._read_facts(session, [subject])
        self._update([subject], facts)
        return facts.get(subject)

    def _update(self, subjects: Iterable[Any], facts: dict[Any, Hashable]) -> None:
        now = self._clock()
        with self._lock:
            for subject in subjects:
                new = facts.get(subject)
                entry = self._entries.get(subject)
                if new is None:
                    self._entries.pop(subject, None)
                elif entry is None or entry.facts != new:
                    self._entries[subject] = _Entry(facts=new, checked_at=now)
                else:
                    entry.checked_at, entry.checked = now, True
                if new is not None:
                    self._entries.move_to_end(subject)
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)

    def answer(
        self, subject: Any, facts: Hashable, variant: Hashable, ttl_s: float
    ) -> bytes | None:
        with self._lock:
            entry = self._entries.get(subject)
            if entry is None or entry.facts != facts:
                return None
            hit = entry.answers.get(variant)
        if hit is None or self._clock() - hit[0] >= ttl_s:
            return None
        return hit[1]

    def store(self, subject: Any, facts: Hashable, variant: Hashable, body: bytes) -> None:
        with self._lock:
            entry = self._entries.get(subject)
            if entry is not None and entry.facts == facts:
                entry.answers.pop(variant, None)
                entry.answers[variant] = (self._clock(), body)
                # Answers per viewer could grow without end on a busy subject: keep the
                # newest few (a dict keeps insertion order).
                while len(entry.answers) > ANSWERS_PER_SUBJECT:
                    del entry.answers[next(iter(entry.answers))]

    # --- Anywhere --------------------------------------------------------------------------

    def end_freshness(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.checked = False

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._pending.clear()


def viewer_key(viewer: Any) -> tuple[int, str] | None:
    """The part of a variant that says who asks, for answers that differ per viewer."""
    return (viewer.id, viewer.role.value) if viewer is not None else None


def end_freshness() -> None:
    """After a write: every cached answer must be checked against the database again."""
    for cache in list(_caches):
        cache.end_freshness()


async def serve(
    cache: StampedCache,
    request: Request,
    session: Session,
    subject: Any,
    variant: Hashable,
    *,
    window_s: float,
    ttl_s: float,
    authorize: Callable[[Hashable], None],
    build: Callable[[], bytes],
    missing: Callable[[], object],
) -> Response:
    """A cached answer, or one built in a worker thread (see the module's docstring).

    ``authorize(facts)`` raises when the caller may not see the subject; ``missing()``
    raises the not-found error of a subject that does not exist; ``build()`` makes the
    answer with the request's session, which must be the slot-less one (:data:`BareSessionDep`):
    the database work takes a connection slot only when it runs.
    """
    hit = cache.peek(subject, variant, window_s)
    if hit is not None:
        facts, body = hit
        authorize(facts)
        if body is not None:
            return Response(body, media_type="application/json")

    def run() -> bytes:
        facts = cache.check(session, subject)
        if facts is None:
            missing()
            raise AssertionError("missing() must raise")
        authorize(facts)
        body = cache.answer(subject, facts, variant, ttl_s)
        if body is None:
            body = build()
            cache.store(subject, facts, variant, body)
        return body

    return Response(await run_in_slot(request, session, run), media_type="application/json")


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class EndFreshnessOnWrite:
    """ASGI middleware: once a write request is done, end every freshness window."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] in _SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            end_freshness()
