"""Answers kept per process and validated against the database by a cheap *stamp*.

A read whose answer is costly and rarely changes (a leaderboard, an evaluation's results, an
algorithm's results side by side) belongs to a *subject* (a dataset version, an evaluation,
an algorithm). Each subject has *facts*: a small named tuple read by one query on every
request: who may see it (owner, visibility, published), the rules that decide what they
learn, and the explicit change counters that every service changing what is shown bumps in
its own transaction (:mod:`szbench.changes`), with the rules that change with time alone (a
phase's closing date) read as they stand now. The access check is made on the facts; the
answer is built again only when they changed, or after a time to live. Since every request
reads the facts, a write is seen by the next read, in every process.

Variants (the query parameters, and who asks or what they may learn where answers differ per
viewer) are part of each answer's key. Errors are never cached. Each answer carries an ETag
made from the variant and its bytes only, never from the facts: a change the viewer cannot
see (someone else's private evaluation finishing) rebuilds the answer but leaves its tag,
so polling the tag tells nothing of it. Browsers and reverse proxies revalidate with it
(:mod:`szbench.api.cache` turns it into HTTP headers). Nothing here knows about HTTP.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from sqlalchemy.orm import Session

from szbench.models import User

#: Answers kept per subject (variants: query parameters, and viewers where answers differ).
ANSWERS_PER_SUBJECT = 64

S = TypeVar("S", bound=Hashable)  # a subject
F = TypeVar("F", bound=Hashable)  # its facts


class Answer(NamedTuple):
    """A serialised answer and its entity tag (quoted, as HTTP writes it)."""

    body: bytes
    etag: str


@dataclass
class _Entry:
    facts: Hashable
    answers: dict[Hashable, tuple[float, Answer]] = field(default_factory=dict)


def _etag(name: str, subject: Hashable, variant: Hashable, body: bytes) -> str:
    # What the viewer asked and what they got, nothing they cannot see (the facts hold
    # counters moved by other users' evaluations). repr() of the variant (ints, strings,
    # enums, frozen dataclasses of those) is the same in every process, so every server of
    # one deployment gives the same tag.
    digest = hashlib.blake2b(repr((name, subject, variant)).encode(), digest_size=16)
    digest.update(body)
    return f'"{digest.hexdigest()}"'


class StampedCache(Generic[S, F]):
    """Answers per subject and variant, valid while the subject's facts are unchanged.

    ``read_facts(session, subject)`` returns the subject's facts, or None when it does not
    exist. Thread-safe: sync routes run in a thread pool.
    """

    def __init__(
        self,
        name: str,
        read_facts: Callable[[Session, S], F | None],
        *,
        kept: int = 4096,
        ttl_s: Callable[[], float] = lambda: math.inf,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._read_facts = read_facts
        self._kept = kept
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[S, _Entry] = OrderedDict()

    def facts(self, session: Session, subject: S) -> F | None:
        """The subject's facts, read now; None when it does not exist."""
        return self._read_facts(session, subject)

    def answer(self, subject: S, facts: F, variant: Hashable, build: Callable[[], bytes]) -> Answer:
        """The answer for ``(subject, variant)`` under ``facts``: kept, or built now.

        Two requests missing the same answer at once both build it: rare, and cheaper to
        allow than to coordinate.
        """
        now = self._clock()
        with self._lock:
            entry = self._entries.get(subject)
            hit = entry.answers.get(variant) if entry is not None and entry.facts == facts else None
        if hit is not None and now - hit[0] < self._ttl_s():
            return hit[1]
        body = build()
        found = Answer(body, _etag(self.name, subject, variant, body))
        with self._lock:
            entry = self._entries.get(subject)
            if entry is None or entry.facts != facts:
                entry = self._entries[subject] = _Entry(facts)
            entry.answers.pop(variant, None)
            entry.answers[variant] = (self._clock(), found)
            # Answers per viewer could grow without end on a busy subject: keep the newest
            # few (a dict keeps insertion order).
            while len(entry.answers) > ANSWERS_PER_SUBJECT:
                del entry.answers[next(iter(entry.answers))]
            self._entries.move_to_end(subject)
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)
        return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def viewer_key(viewer: User | None) -> tuple[int, str, bool] | None:
    """The part of a variant that says who asks, for answers that differ per viewer (an
    admin's token without the admin scope gets a researcher's answers: another key)."""
    if viewer is None:
        return None
    return (viewer.id, viewer.role.value, viewer.admin_scope)
