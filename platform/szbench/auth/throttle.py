"""Sign-in throttling: exponential backoff per account and per client address.

Every password check (API and web sign-in, a password change's current password) first
calls :func:`begin`, which counts the attempt as a failure *before* the password is
checked, and refuses it (:class:`~szbench.errors.TooManyAttempts`, 429 with Retry-After)
while an earlier failure's wait has not ended. A right password then calls
:func:`succeeded`, which clears the account's failures and takes the attempt back from the
client's. Counting in advance is what bounds parallel guessing: N concurrent attempts are
N failures at once, so an attacker cannot run many guesses inside one wait.

Past ``free`` failures (:data:`FREE_FAILURES_PER_ACCOUNT`, :data:`FREE_FAILURES_PER_CLIENT`)
the k-th further failure blocks the key for ``base * 2**(k-1)`` seconds, at most ``max``
(:data:`BACKOFF_BASE_S`, :data:`BACKOFF_MAX_S`). A key's failures are forgotten after
:data:`FAILURE_MEMORY_S` without an attempt; such rows are deleted as attempts come.

The state lives in the database (table ``signin_throttle``), not in Redis: it must hold
across requests and API processes, and the database is the one store every deployment has,
the embedded one included (Redis is only the broker, absent there). The row locks make the
counts exact under concurrency, and a sign-in costs a password hash anyway, so the few
row writes are noise. Keys are sha256 digests: no typed email (or a password typed into the
email field) is stored.

The account key is the normalised email as typed, whether or not such a user exists, so a
throttled answer tells nothing about which emails have accounts. The client key is the
request's client address as :mod:`szbench.api.proxies` settles it (the entry a trusted
proxy appended to ``X-Forwarded-For``, else the peer), an IPv6 address's /64 (one host
usually holds a whole /64). Sign-ups (:func:`begin_signup`) and reset e-mails
(:func:`spaced`) use the same table in key spaces of their own.

Time comes from :data:`clock`, which tests set instead of sleeping.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from szbench.errors import TooManyAttempts
from szbench.models import SigninThrottle, as_utc

# The numbers docs/security.md ("Sign-in and credentials", "Sign-ups") states its bounds
# with. They are not settings: a bound the docs promise must not move with an environment
# variable nobody sees. Sign-ins: 5 free failures per account is a typo-and-forgotten-caps-
# lock allowance; after it a guesser waits 1 s, 2 s, 4 s, ... up to 15 min per try, so one
# account takes at most about 100 guesses a day. 20 per client address lets a lab behind one
# address mistype without locking each other out, and still doubles a sprayer's waits.
FREE_FAILURES_PER_ACCOUNT = 5
FREE_FAILURES_PER_CLIENT = 20
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 900.0
# A key's failures (and a client's sign-ups) are forgotten after a quiet day: long enough
# that waiting out the cap does not reset the count, short enough that last week's typos
# are gone.
FAILURE_MEMORY_S = 86400.0
# Sign-ups: each account brings its own held-out quota, so sign-ups per address bound what
# one submitter learns per day. 2 free, then 2 h doubling up to a day: at most 6 accounts
# from one address in any 24 h (3 at once, then after 2 h, 6 h and 14 h).
SIGNUP_FREE_PER_CLIENT = 2
SIGNUP_BACKOFF_BASE_S = 7200.0
SIGNUP_BACKOFF_MAX_S = 86400.0


class Clock:
    """The throttle's idea of now: the system clock, or a moment a test sets and advances."""

    def __init__(self) -> None:
        self._fixed: datetime | None = None

    def now(self) -> datetime:
        return self._fixed if self._fixed is not None else datetime.now(UTC)

    def set(self, moment: datetime | None) -> None:
        """Freeze the clock at ``moment``; ``None`` goes back to the system clock."""
        self._fixed = moment

    def advance(self, seconds: float) -> None:
        self._fixed = self.now() + timedelta(seconds=seconds)


clock = Clock()
_SWEEP_BATCH = 100


@dataclass(frozen=True)
class _Counted:
    key: str
    blocked_until: datetime | None  # what this attempt set (None: it set no wait)


@dataclass(frozen=True)
class Attempt:
    """A sign-in attempt counted by :func:`begin`, for :func:`succeeded`."""

    account: _Counted
    client: _Counted | None


def _digest(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}:{value}".encode()).hexdigest()


def account_key(email: str) -> str:
    return _digest("account", email.strip().lower())


def client_key(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return _digest("client", address)  # not an address (a test client's name): as given
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _digest("client", str(ip.ipv4_mapped))
        return _digest("client", str(ipaddress.ip_network(f"{ip}/64", strict=False)))
    return _digest("client", str(ip))


def _locked_row(session: Session, key: str, now: datetime) -> SigninThrottle:
    """The key's row, created when missing, locked until the transaction ends."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    # Two tries: a concurrent sweep may delete a stale row between the insert and the read.
    for _ in range(2):
        session.execute(
            insert(SigninThrottle)
            .values(key=key, failures=0, last_attempt_at=now)
            .on_conflict_do_nothing(index_elements=["key"])
        )
        row = session.scalar(
            select(SigninThrottle)
            .where(SigninThrottle.key == key)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        if row is not None:
            return row
    raise RuntimeError("sign-in throttle row vanished twice")  # pragma: no cover


def wait_words(seconds: int, until: datetime) -> str:
    """A wait as a person reads it: ``in 40 seconds``, ``in 2 hours (at 21:40 UTC)``; the
    Retry-After header keeps the seconds for programs.

    >>> from datetime import datetime, UTC
    >>> wait_words(7200, datetime(2025, 5, 1, 21, 40, tzinfo=UTC))
    'in 2 hours (at 21:40 UTC)'
    >>> wait_words(1, datetime(2025, 5, 1, 21, 40, tzinfo=UTC))
    'in 1 second'
    """
    if seconds < 90:
        return f"in {seconds} second{'s' if seconds != 1 else ''}"
    minutes = round(seconds / 60)
    if minutes < 90:
        amount = f"{minutes} minutes"
    else:
        hours = round(minutes / 60, 1)
        amount = f"{hours:g} hour{'s' if hours != 1 else ''}"
    return f"in {amount} (at {until:%H:%M} UTC)"


def _wait_s(failures: int, free: int, base_s: float, max_s: float) -> float | None:
    over = failures - free
    if over <= 0:
        return None
    # min() first: 2**over overflows a float for large counts.
    exponent = min(over - 1, 64)
    return min(base_s * 2.0**exponent, max_s)


def _sweep(session: Session, now: datetime) -> datetime:
    """Delete a bounded batch of forgotten rows; the moment before which rows are forgotten.
    Rows another attempt holds are skipped, so that sweeping never waits or deadlocks."""
    forget_before = now - timedelta(seconds=FAILURE_MEMORY_S)
    stale = (
        select(SigninThrottle.key)
        .where(SigninThrottle.last_attempt_at < forget_before)
        .limit(_SWEEP_BATCH)
        .with_for_update(skip_locked=True)
    )
    session.execute(
        delete(SigninThrottle)
        .where(SigninThrottle.key.in_(stale.scalar_subquery()))
        .execution_options(synchronize_session=False)
    )
    return forget_before


def _count(
    session: Session, keys: list[tuple[str, int]], *, base_s: float, max_s: float, what: str
) -> list[_Counted]:
    """Count one attempt on each ``(key, free)``, or raise :class:`TooManyAttempts` (naming
    ``what``) while any key's wait runs. Past ``free`` attempts the k-th further one blocks
    its key for ``base_s * 2**(k-1)`` seconds, at most ``max_s``."""
    now = clock.now()
    forget_before = _sweep(session, now)
    # Always in the same order, so two attempts never wait for each other's locks crosswise.
    rows = {key: _locked_row(session, key, now) for key, _ in sorted(keys)}
    waits = [
        as_utc(row.blocked_until)
        for row in rows.values()
        if row.blocked_until is not None and as_utc(row.blocked_until) > now
    ]
    if waits:
        until = max(waits)
        retry_after_s = max(1, math.ceil((until - now).total_seconds()))
        raise TooManyAttempts(
            f"too many {what}; try again {wait_words(retry_after_s, until)}",
            retry_after_s=retry_after_s,
        )
    counted = []
    for key, free in keys:
        row = rows[key]
        if as_utc(row.last_attempt_at) < forget_before:
            row.failures = 0
        row.failures += 1
        row.last_attempt_at = now
        wait_s = _wait_s(row.failures, free, base_s, max_s)
        row.blocked_until = now + timedelta(seconds=wait_s) if wait_s is not None else None
        counted.append(_Counted(key, row.blocked_until))
    session.flush()
    return counted


def begin(session: Session, *, email: str, client: str | None) -> Attempt:
    """Count a sign-in attempt for ``email`` from ``client`` (an address; None: not over
    the network, e.g. a test) as a failure, or raise :class:`TooManyAttempts` while a wait is
    on. Flushes only: the caller commits before checking the password, so that the count
    holds whatever happens next."""
    keys = [(account_key(email), FREE_FAILURES_PER_ACCOUNT)]
    if client:
        keys.append((client_key(client), FREE_FAILURES_PER_CLIENT))
    counted = _count(
        session,
        keys,
        base_s=BACKOFF_BASE_S,
        max_s=BACKOFF_MAX_S,
        what="failed sign-ins",
    )
    return Attempt(account=counted[0], client=counted[1] if len(counted) > 1 else None)


def begin_signup(session: Session, *, client: str | None) -> None:
    """Count a sign-up from ``client`` (its own key space: signing up never slows sign-ins),
    or raise :class:`TooManyAttempts` while the client's wait runs. Each account brings its
    own quotas (docs/security.md, "Sign-ups"), so past :data:`SIGNUP_FREE_PER_CLIENT` the
    waits double from :data:`SIGNUP_BACKOFF_BASE_S` up to :data:`SIGNUP_BACKOFF_MAX_S`."""
    if not client:
        return
    try:
        _count(
            session,
            [(_signup_key(client), SIGNUP_FREE_PER_CLIENT)],
            base_s=SIGNUP_BACKOFF_BASE_S,
            max_s=SIGNUP_BACKOFF_MAX_S,
            what="new accounts from your network's address",
        )
    except TooManyAttempts as exc:
        raise TooManyAttempts(
            f"{exc.detail}. {_SHARED_ADDRESS}", retry_after_s=exc.retry_after_s
        ) from None


#: What people behind one address (a lab, a hospital's network) can do about the sign-up
#: throttle, which counts addresses, not people.
_SHARED_ADDRESS = (
    "People who share one internet address (a lab, an institute) are counted together: "
    "each new account frees its place once its owner confirms their e-mail address, and an "
    "administrator can make accounts for a whole group"
)


def _signup_key(client: str) -> str:
    return _digest("signup", client_key(client))


def signup_confirmed(session: Session, *, client: str | None) -> None:
    """An account made by sign-up has confirmed its e-mail address, from ``client``: take
    one sign-up back from that address's count, so that people behind one address (a lab)
    are held to one place per *unconfirmed* account, not one per person. What the throttle
    guards (each account brings its own quotas) is then guarded by the mailbox: held-out
    work needs a confirmed address (docs/security.md, "Sign-ups")."""
    if not client:
        return
    now = clock.now()
    row = session.scalar(
        select(SigninThrottle).where(SigninThrottle.key == _signup_key(client)).with_for_update()
    )
    if row is None or row.failures <= 0:
        return
    row.failures -= 1
    wait_s = _wait_s(
        row.failures,
        SIGNUP_FREE_PER_CLIENT,
        SIGNUP_BACKOFF_BASE_S,
        SIGNUP_BACKOFF_MAX_S,
    )
    row.blocked_until = now + timedelta(seconds=wait_s) if wait_s is not None else None
    session.flush()


def spaced(session: Session, *, kind: str, value: str, interval_s: float) -> bool:
    """Whether an event of ``kind`` for ``value`` may happen now, at most one per
    ``interval_s``; when it may, its interval starts (row locked until the transaction ends,
    so of concurrent requests exactly one gets it)."""
    now = clock.now()
    _sweep(session, now)
    row = _locked_row(session, _digest(kind, value), now)
    if row.blocked_until is not None and as_utc(row.blocked_until) > now:
        return False
    row.failures += 1
    row.last_attempt_at = now
    row.blocked_until = now + timedelta(seconds=interval_s)
    session.flush()
    return True


def within_rate(
    session: Session, *, kind: str, value: str, limit: int, window_s: float, what: str
) -> None:
    """Count one request of ``kind`` by ``value``, or raise :class:`TooManyAttempts` (naming
    ``what``) past ``limit`` in the current window of ``window_s`` seconds. In this key
    space ``blocked_until`` is the end of the window and ``failures`` the requests in it."""
    now = clock.now()
    _sweep(session, now)
    row = _locked_row(session, _digest(kind, value), now)
    if row.blocked_until is None or as_utc(row.blocked_until) <= now:
        row.failures = 0
        row.blocked_until = now + timedelta(seconds=window_s)
    if row.failures >= limit:
        retry_after_s = max(1, math.ceil((as_utc(row.blocked_until) - now).total_seconds()))
        raise TooManyAttempts(
            f"too many {what}; try again in {retry_after_s} s", retry_after_s=retry_after_s
        )
    row.failures += 1
    row.last_attempt_at = now
    session.flush()


def succeeded(session: Session, attempt: Attempt) -> None:
    """The attempt's password was right: the account starts afresh, and the client's count
    loses this attempt (other clients' failures from the same address stay)."""
    now = clock.now()
    counted = [attempt.account] if attempt.client is None else [attempt.account, attempt.client]
    # Locked in the order begin() uses, so that this and a concurrent begin() never deadlock.
    rows = {c.key: _locked_row(session, c.key, now) for c in sorted(counted, key=lambda c: c.key)}
    account = rows[attempt.account.key]
    account.failures = 0
    account.blocked_until = None
    if attempt.client is not None:
        client = rows[attempt.client.key]
        client.failures = max(0, client.failures - 1)
        # Lift only the wait this attempt set; a later failure's wait stays.
        mine = attempt.client.blocked_until
        if client.blocked_until is not None and as_utc(client.blocked_until) == mine:
            client.blocked_until = None
    session.flush()
