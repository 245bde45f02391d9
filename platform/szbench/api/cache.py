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
- later than that, or when the subject is new, the request needs the facts read now: in a
  read shared with every request of the process that needs facts at that moment
  (:meth:`StampedCache.facts`).

An answer not cached yet is built by one request for all that want it at the same time
(:meth:`StampedCache.build_once`). A write handled by this process marks every entry as
unchecked (:func:`end_freshness`), so that a user who publishes a result sees it on their
next read; other processes see it within their window plus one check. A window of 0 turns
all of this off: every request reads the facts (the tests do this). :class:`ReadFront`
answers repeated GETs from these caches before routing.

Variants (the query parameters, and the viewer where the answer depends on who asks) are
part of each answer's key; errors are never cached.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
from anyio.lowlevel import RunVar
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

#: Subjects whose facts one query reads (an IN list: SQLite takes a few thousand at most).
BATCH = 500

Scope = MutableMapping[str, Any]
T = TypeVar("T")
#: Runs blocking work on a request's session in a worker thread (:func:`run_in_slot`).
Runner = Callable[[Callable[[], Any]], Awaitable[Any]]

#: Reads the facts of many subjects; a subject missing from the result does not exist.
StampReader = Callable[[Session, list[Any]], dict[Any, Hashable]]

_caches: weakref.WeakSet[StampedCache] = weakref.WeakSet()
_background: set[asyncio.Task[None]] = set()  # see in_background()


@dataclass
class _Entry:
    facts: Hashable
    checked_at: float
    checked: bool = True  # False after a local write: check before serving again
    asked: bool = False  # served since it was last checked: worth re-checking with the rest
    answers: dict[Hashable, tuple[float, bytes]] = field(default_factory=dict)


class _LeaderGone(Exception):
    """The request doing a shared read or build was cancelled: the others try again."""


def _settle(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
        future.exception()  # retrieved: nobody may be waiting, which is no error


def in_background(work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """Run ``work`` as a task of the running loop, referenced until it ends (a task that
    nothing references may be garbage-collected mid-way)."""
    task = asyncio.get_running_loop().create_task(work)
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


def _of_this_loop(var: RunVar[T], make: Callable[[], T]) -> T:
    """``var``'s value on the running event loop, made on first use."""
    try:
        return var.get()
    except LookupError:
        value = make()
        var.set(value)
        return value


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """One computation per key at a time: who asks while it runs waits for its result.

    The first request for a key computes (with its own session, in its own slot); the
    others get its result or its error. If the first is cancelled (its client went away),
    one of the others computes instead. State is per event loop (asyncio futures belong to
    one), so that apps under test, each on its own loop, share nothing.
    """

    def __init__(self, name: str) -> None:
        self._running: RunVar[dict[K, asyncio.Future[V]]] = RunVar(f"szbench_flights_{name}")

    def _flights(self) -> dict[K, asyncio.Future[V]]:
        return _of_this_loop(self._running, dict)

    async def run(
        self,
        key: K,
        compute: Callable[[], Awaitable[V]],
        done: Callable[[], V | None] = lambda: None,
    ) -> V:
        """``compute()``'s result for ``key``; ``done()`` may give it without computing
        (checked again after each wait, e.g. a cache that the computation fills)."""
        flights = self._flights()
        while True:
            ready = done()
            if ready is not None:
                return ready
            running = flights.get(key)
            if running is None:
                break
            try:
                return await asyncio.shield(running)
            except _LeaderGone:
                continue
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        flights[key] = future
        try:
            result = await compute()
        except BaseException as exc:
            _settle(future, exc if isinstance(exc, Exception) else _LeaderGone())
            raise
        else:
            future.set_result(result)
        finally:
            del flights[key]
        return result


@dataclass
class _LoopState:
    """What one event loop shares between its requests (asyncio futures belong to a loop)."""

    # Background re-checks (see StampedCache._refresh_later).
    pending: set[Any] = field(default_factory=set)
    refresher: asyncio.Task[None] | None = None
    # Requests waiting for facts: subject -> its future, filled by the next shared read.
    queued: dict[Any, asyncio.Future[Hashable | None]] = field(default_factory=dict)
    reading: bool = False
    # Done each time a shared read ends: whoever waits wakes up, and one of them leads the
    # next read.
    turn: asyncio.Future[None] | None = None


class StampedCache:
    """Answers per subject and variant, valid while the subject's facts are unchanged."""

    def __init__(
        self,
        name: str,
        read_facts: StampReader,
        *,
        kept: int = 4096,
        window_s: Callable[[], float] = lambda: 0.0,
        ttl_s: Callable[[], float] = lambda: math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.window_s = window_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._read_facts = read_facts
        self._kept = kept
        self._lock = threading.Lock()
        self._entries: OrderedDict[Any, _Entry] = OrderedDict()
        # Bumped by every local write: a read of facts that began before it may have missed
        # the write, so what it found is kept but not trusted as checked.
        self._generation = 0
        self._loop_state: RunVar[_LoopState] = RunVar(f"szbench_cache_{name}")
        self._builds: SingleFlight[tuple[Any, Hashable, Hashable], bytes] = SingleFlight(name)
        _caches.add(self)

    def _state(self) -> _LoopState:
        return _of_this_loop(self._loop_state, _LoopState)

    # --- On the event loop ---------------------------------------------------------------

    def peek(
        self, subject: Any, variant: Hashable, window_s: float, ttl_s: float = math.inf
    ) -> tuple[Hashable, bytes | None] | None:
        """``(facts, answer or None)`` when they may be used without reading the facts now.

        The answer is None when there is none for ``variant`` or it is older than ``ttl_s``.
        """
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
            entry.asked = True
            answer = entry.answers.get(variant)
        if stale:
            self._refresh_later(subject)
        if answer is None or now - answer[0] >= ttl_s:
            return entry.facts, None
        return entry.facts, answer[1]

    async def facts(self, subject: Any, session: Session, run: Runner) -> Hashable | None:
        """The subject's facts read now (None: it does not exist), in a read shared with
        every other request of this event loop that needs facts at the same time.

        Under load, the requests that miss the window arrive together (a burst of new
        subjects, or every hot subject at once after a quiet spell). Each reading its own
        facts would take a worker thread, a pooled connection and a few round trips, and
        under a busy event loop every thread waits its turn for the GIL at each of them:
        hundreds of milliseconds. Here one request at a time reads the facts of all that
        are waiting (one query per :data:`BATCH` subjects); those that arrive meanwhile
        wait for the next read, which one of them leads as soon as this one ends, so that
        no request ever gets facts read before it asked. ``run(work)`` runs blocking work
        on ``session``, the calling request's (:func:`szbench.api.deps.run_in_slot`).
        """
        state = self._state()
        loop = asyncio.get_running_loop()
        while True:
            future = state.queued.get(subject)
            if future is None:
                future = state.queued[subject] = loop.create_future()
            while not future.done():
                if not state.reading:
                    await self._lead_read(state, session, run)
                    continue
                if state.turn is None or state.turn.done():
                    state.turn = loop.create_future()
                await asyncio.wait((future, state.turn), return_when=asyncio.FIRST_COMPLETED)
            try:
                return future.result()
            except _LeaderGone:
                continue  # its reader was cancelled: queue again

    async def _lead_read(self, state: _LoopState, session: Session, run: Runner) -> None:
        state.reading = True
        batch, state.queued = state.queued, {}
        generation = self._generation
        try:
            found = await run(lambda: self._read_batches(session, list(batch), generation))
        except BaseException as exc:
            gone = not isinstance(exc, Exception)  # cancelled: the others read again
            for future in batch.values():
                _settle(future, _LeaderGone() if gone else exc)
            raise
        else:
            for subject, future in batch.items():
                if not future.done():
                    future.set_result(found.get(subject))
        finally:
            state.reading = False
            if state.turn is not None and not state.turn.done():
                state.turn.set_result(None)

    async def build_once(
        self,
        subject: Any,
        facts: Hashable,
        variant: Hashable,
        ttl_s: float,
        build: Callable[[], Awaitable[bytes]],
    ) -> bytes:
        """The answer for ``(subject, facts, variant)``: cached, or built by one request
        while the others that want the same answer wait for it (a cold leaderboard asked
        for by a hundred clients at once is computed once)."""

        async def build_and_store() -> bytes:
            body = await build()
            self.store(subject, facts, variant, body)
            return body

        return await self._builds.run(
            (subject, facts, variant),
            build_and_store,
            done=lambda: self.answer(subject, facts, variant, ttl_s),
        )

    def _refresh_later(self, subject: Any) -> None:
        state = self._state()
        state.pending.add(subject)
        if state.refresher is None or state.refresher.done():
            state.refresher = in_background(self._refresh(state))

    async def _refresh(self, state: _LoopState) -> None:
        while True:
            with self._lock:
                # Subjects found stale while the last read ran may have been in it.
                batch = {s for s in state.pending if self._unchecked_for(s) >= self.window_s()}
                batch |= self._due_soon()
            state.pending.clear()
            if not batch:
                return
            generation = self._generation
            try:
                async with db_slot():
                    await anyio.to_thread.run_sync(self._refresh_batch, list(batch), generation)
            except Exception:
                # The entries stay stale; requests past the grace period check for themselves.
                log.exception("refreshing the %s cache failed", self.name)

    def _unchecked_for(self, subject: Any) -> float:
        """Seconds since the subject's facts were last read (under the lock)."""
        entry = self._entries.get(subject)
        if entry is None or not entry.checked:
            return math.inf
        return self._clock() - entry.checked_at

    def _due_soon(self) -> set[Any]:
        """Subjects served since their check and past half their window (under the lock).

        Re-read with the ones already stale, they share one check time from then on, so a
        busy cache re-reads all its hot subjects in one query per window instead of a
        trickle of small ones, each a worker thread contending with the event loop.
        """
        half = self.window_s() / 2
        if half <= 0:
            return set()
        now = self._clock()
        return {
            subject
            for subject, entry in self._entries.items()
            if entry.asked and entry.checked and now - entry.checked_at >= half
        }

    # --- In worker threads ---------------------------------------------------------------

    def _refresh_batch(self, subjects: list[Any], generation: int) -> None:
        session = get_sessionmaker()()
        try:
            self._read_batches(session, subjects, generation)
        finally:
            session.close()

    def _read_batches(
        self, session: Session, subjects: list[Any], generation: int
    ) -> dict[Any, Hashable]:
        """Read and record the facts of ``subjects``, :data:`BATCH` to a query."""
        found: dict[Any, Hashable] = {}
        for start in range(0, len(subjects), BATCH):
            found.update(self._read_facts(session, subjects[start : start + BATCH]))
        self._update(subjects, found, generation)
        return found

    def check(self, session: Session, subject: Any) -> Hashable | None:
        """Read the subject's facts now; None when it does not exist."""
        # The generation is taken before the read, as by every other reader.
        return self._read_batches(session, [subject], self._generation).get(subject)

    def _update(self, subjects: Iterable[Any], facts: dict[Any, Hashable], generation: int) -> None:
        now = self._clock()
        with self._lock:
            trusted = generation == self._generation
            for subject in subjects:
                new = facts.get(subject)
                entry = self._entries.get(subject)
                if new is None:
                    self._entries.pop(subject, None)
                    continue
                if entry is None or entry.facts != new:
                    entry = self._entries[subject] = _Entry(facts=new, checked_at=now)
                else:
                    entry.checked_at, entry.asked = now, False
                entry.checked = trusted
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
            self._generation += 1
            for entry in self._entries.values():
                entry.checked = False

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._entries.clear()
        _front.forget(self)


def viewer_key(viewer: Any) -> tuple[int, str, bool] | None:
    """The part of a variant that says who asks, for answers that differ per viewer (an
    admin's token without the admin scope gets a researcher's answers: another key)."""
    return (viewer.id, viewer.role.value, viewer.admin_scope) if viewer is not None else None


_write_hooks: list[Callable[[], None]] = []


def on_local_write(hook: Callable[[], None]) -> None:
    """Have :func:`end_freshness` call ``hook`` too (other per-process caches)."""
    _write_hooks.append(hook)


def end_freshness() -> None:
    """After a write: every cached answer must be checked against the database again."""
    for cache in list(_caches):
        cache.end_freshness()
    for hook in _write_hooks:
        hook()


async def serve(
    cache: StampedCache,
    request: Request,
    session: Session,
    subject: Any,
    *,
    viewer: Any,
    variant: Callable[[Any], Hashable],
    authorize: Callable[[Any, Hashable], None],
    build: Callable[[], bytes],
    missing: Callable[[], object],
) -> Response:
    """A cached answer, or one built in a worker thread (see the module's docstring).

    ``viewer`` is the caller's user (None: anonymous). ``variant(viewer)`` must say all that
    the answer depends on besides the subject: the query parameters, and the viewer where
    answers differ per viewer. ``authorize(viewer, facts)`` raises when that viewer may not
    see the subject. Both may be called later with other viewers (by :class:`ReadFront`),
    so they may use only the viewer's columns and what the path and query string say.
    ``missing()`` raises the not-found error of a subject that does not exist; ``build()``
    makes the answer with the request's session, which must be the slot-less one
    (:data:`BareSessionDep`): the database work takes a connection slot only when it runs.

    Facts are read in reads shared by the requests that need them at the same time
    (:meth:`StampedCache.facts`), and an answer missing from the cache is built by one
    request for all that want it (:meth:`StampedCache.build_once`).

    How the answer was found is remembered by the raw path and query string, so that
    :class:`ReadFront` can give it again without routing.
    """

    def run(work: Callable[[], T]) -> Awaitable[T]:
        return run_in_slot(request, session, work)

    window_s, ttl_s = cache.window_s(), cache.ttl_s()
    key = variant(viewer)
    hit = cache.peek(subject, key, window_s, ttl_s)
    if hit is not None:
        facts, body = hit
    else:
        facts, body = await cache.facts(subject, session, run), None
        if facts is None:
            await run(missing)
            raise AssertionError("missing() must raise")
    authorize(viewer, facts)
    if body is None:
        body = await cache.build_once(subject, facts, key, ttl_s, lambda: run(build))
    _front.remember(
        request.scope, _Way(cache, subject, variant, authorize, request.scope.get("route"))
    )
    return Response(body, media_type="application/json")


# --- The read front ------------------------------------------------------------------------
#
# Most reads of a public benchmark are GETs of a few hot answers, anonymous or from scripts
# with a token. Routing one through FastAPI (matching a hundred routes, solving the
# dependencies, the exception layers) costs several times what sending its cached bytes
# does, and under load that is the whole latency. So the route itself, having answered,
# leaves behind how it did: which cache and subject the path and query string meant, and how
# the variant and the access check follow from the viewer. The next GET of the same path and
# query string whose caller is known without any I/O (anonymous, or a bearer token fresh in
# the token cache; see szbench.auth.dependencies.viewer_from_memory) is answered from there,
# with the same freshness rules and the same check on the cached facts. Anything else (a
# cookie, a token to read, a stale or missing answer, a refused check) goes through the
# route as before.

#: Who is calling, known from the request's headers without I/O: ``(True, user or None)``,
#: or ``(False, None)`` when the route must decide.
ViewerResolver = Callable[[Scope], tuple[bool, Any]]


@dataclass(frozen=True)
class _Way:
    """How a route answered one path and query string."""

    cache: StampedCache
    subject: Any
    variant: Callable[[Any], Hashable]
    authorize: Callable[[Any, Hashable], None]
    route: Any  # the matched route: the request metrics label requests by its template


class _Front:
    def __init__(self, kept: int = 16384) -> None:
        self._kept = kept
        self._ways: OrderedDict[tuple[str, bytes], _Way] = OrderedDict()

    def remember(self, scope: Scope, way: _Way) -> None:
        if scope.get("method") != "GET":
            return
        key = (scope["path"], scope.get("query_string", b""))
        if key not in self._ways:
            self._ways[key] = way
            while len(self._ways) > self._kept:
                self._ways.popitem(last=False)

    def answer(self, scope: Scope, resolve_viewer: ViewerResolver) -> tuple[_Way, bytes] | None:
        way = self._ways.get((scope["path"], scope.get("query_string", b"")))
        if way is None:
            return None
        known, viewer = resolve_viewer(scope)
        if not known:
            return None
        cache = way.cache
        hit = cache.peek(way.subject, way.variant(viewer), cache.window_s(), cache.ttl_s())
        if hit is None or hit[1] is None:
            return None
        try:
            way.authorize(viewer, hit[0])
        except Exception:
            return None  # the route renders the refusal
        return way, hit[1]

    def forget(self, cache: StampedCache) -> None:
        for key in [k for k, way in self._ways.items() if way.cache is cache]:
            del self._ways[key]


_front = _Front()

_JSON = (b"content-type", b"application/json")


class ReadFront:
    """ASGI middleware: answer a GET from the read caches without routing it.

    Add it innermost (first), so that the request id, metrics and error layers still see
    every request. Only a ``GET`` of a path and query string that a cached route has
    answered before, from a caller that ``resolve_viewer`` knows without I/O, is handled
    here; see the comment above :data:`ViewerResolver`.
    """

    def __init__(self, app: Any, resolve_viewer: ViewerResolver) -> None:
        self.app = app
        self.resolve_viewer = resolve_viewer

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            found = _front.answer(scope, self.resolve_viewer)
            if found is not None:
                way, body = found
                if way.route is not None:
                    scope["route"] = way.route
                headers = [(b"content-length", str(len(body)).encode()), _JSON]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


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
