"""Signed-in callers resolved without a database round trip on every request.

Each request that carries a bearer token (or the web session cookie) must learn whose token
it is. Read from the database every time, that is a worker thread, a pooled connection and
a query per API call of a researcher's script; under load each of those threads then waits
for the busy event loop to hand over the GIL at every step, and signed-in reads ran at a
fiftieth of the anonymous ones (docs/api.md, Speed).

So each process remembers, per token hash, what it last read: the token's row and its
user's, as detached copies. For ``SZBENCH_TOKEN_FRESH_S`` seconds after that read, a request
with the same secret is resolved from memory: the expiry is checked against the clock, and
the copies are merged into the request's session without a query, so that routes get
session-bound objects exactly as before. A token asked for past half its window is read
again in the background (which also keeps its last-used time), so that one in steady use
never runs out; one not asked for until after its window is read by the request that
needs it (one read for all the requests with that token at that moment). A revoke, a
deactivation or a role change made through this process ends every window at once (the
read caches' write hook); made through another process, it is seen within the window.
Nothing is served from a read older than the window. A window of 0 reads on every request.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import anyio
from sqlalchemy import inspect
from sqlalchemy.orm import Session, make_transient_to_detached

from szbench.api.cache import Runner, SingleFlight, in_background, on_local_write
from szbench.api.deps import db_slot
from szbench.auth import service
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import ApiToken, User

Row = TypeVar("Row", ApiToken, User)

log = logging.getLogger(__name__)


def _detached_copy(obj: Row) -> Row:
    """A copy of ``obj``'s columns, detached: mergeable into any session without a query."""
    values = {
        attr.key: copy.copy(getattr(obj, attr.key)) for attr in inspect(obj).mapper.column_attrs
    }
    clone = type(obj)(**values)
    make_transient_to_detached(clone)
    return clone


def _attach(session: Session, copy: Row) -> Row:
    """``copy`` as an object of ``session``, without a query. The session's own object
    when it has one: it was read by this unit of work, and merging the copy into it would
    overwrite what it read with what the cache read earlier."""
    key = inspect(copy).key
    present = session.identity_map.get(key) if key is not None else None
    if present is not None:
        return present
    return session.merge(copy, load=False)


@dataclass(frozen=True)
class _Known:
    token: ApiToken
    user: User
    read_at: float


class TokenCache:
    """Live tokens by hash, as last read (see the module's docstring)."""

    def __init__(
        self,
        *,
        window_s: Callable[[], float],
        kept: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.window_s = window_s
        self._now = now
        self._kept = kept
        self._clock = clock
        self._lock = threading.Lock()
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._generation = 0
        self._reads: SingleFlight[str, _Known | None] = SingleFlight("tokens")
        self._refreshing: set[str] = set()
        #: Where background re-reads get their session (tests point it at theirs).
        self.session_scope: Callable[[], AbstractContextManager[Session]] = session_scope

    def _fresh(self, digest: str, secret: str) -> _Known | None:
        """What is known of the token, if read within the window. Past half the window, a
        background task reads it again (``secret`` is needed for that), so that a token in
        steady use never runs out: otherwise, once per window, every request carrying it
        would wait for the one that reads it."""
        window_s = self.window_s()
        with self._lock:
            known = self._known.get(digest)
        if known is None:
            return None
        age = self._clock() - known.read_at
        if age >= window_s:
            return None
        if age >= window_s / 2:
            self._refresh_soon(digest, secret)
        return known

    def _refresh_soon(self, digest: str, secret: str) -> None:
        with self._lock:
            if digest in self._refreshing:
                return
            self._refreshing.add(digest)
        in_background(self._refresh(digest, secret))

    async def _refresh(self, digest: str, secret: str) -> None:
        try:
            async with db_slot():
                await anyio.to_thread.run_sync(self._read_in_own_session, secret, digest)
        except Exception:
            # It stays as it is; once the window ends, requests read it for themselves.
            log.exception("re-reading a token in the background failed")
        finally:
            with self._lock:
                self._refreshing.discard(digest)

    def _read_in_own_session(self, secret: str, digest: str) -> None:
        with self.session_scope() as session:  # commits the token's last-used time
            self._read(session, secret, digest)

    async def resolve(
        self, session: Session, secret: str, run: Runner
    ) -> tuple[ApiToken, User] | None:
        """The live token for ``secret`` and its user, bound to ``session``; None when the
        secret is no live token. ``run(work)`` runs blocking work on ``session`` in a worker
        thread (:func:`szbench.api.deps.run_in_slot`)."""
        digest = service.hash_token(secret)
        known = self._fresh(digest, secret)
        if known is None:
            # One read per token at a time; the others with the same token wait for it.
            known = await self._reads.run(
                digest, lambda: run(lambda: self._read(session, secret, digest))
            )
            if known is None:
                return None
        if self._expired(known):
            return None
        return _attach(session, known.token), _attach(session, known.user)

    def peek(self, secret: str) -> tuple[ApiToken, User] | None:
        """The live token for ``secret`` and its user when known without reading: detached
        copies, for reading their columns only (:data:`szbench.api.cache.ViewerResolver`)."""
        known = self._fresh(service.hash_token(secret), secret)
        if known is None or self._expired(known):
            return None
        return known.token, known.user

    def _expired(self, known: _Known) -> bool:
        return service.is_expired(known.token, self._now())

    def _read(self, session: Session, secret: str, digest: str) -> _Known | None:
        generation, started = self._generation, self._clock()
        token = service.resolve_token(session, secret)
        if token is None:
            with self._lock:
                self._known.pop(digest, None)
            return None
        # The window counts from before the read: what it found is at least that fresh.
        known = _Known(_detached_copy(token), _detached_copy(token.user), started)
        with self._lock:
            # A write in this process while the row was read: give this request what it read,
            # but let the next one read again.
            if generation == self._generation:
                self._known[digest] = known
                self._known.move_to_end(digest)
                while len(self._known) > self._kept:
                    self._known.popitem(last=False)
        return known

    def end_freshness(self) -> None:
        with self._lock:
            self._generation += 1
            self._known.clear()


tokens = TokenCache(window_s=lambda: get_settings().token_fresh_s)
on_local_write(tokens.end_freshness)
