"""A wall-clock deadline for one outbound call, held by shutting the call's sockets.

Socket timeouts bound each read or write, not the call: a server that sends its answer one
byte per second meets every per-read timeout and holds the caller for as long as it likes
(issue 28: a webhook receiver held an API thread for minutes that way). A :class:`Deadline`
is a moment on the monotonic clock. Every socket a call opens is registered with it
(:meth:`Deadline.guard`), and one watchdog thread per process shuts those sockets down when
the moment passes, which wakes any blocked ``connect``, ``recv``, ``send`` or TLS handshake
at once; the call fails and its code sees :attr:`Deadline.expired`. The watchdog keeps a
duplicate of each socket's descriptor, so a socket that a TLS layer later wraps (and so
detaches) is still cut. A step with no socket to cut (name resolution) runs in a helper
thread that the caller waits for only until the deadline (:meth:`Deadline.run`): the call
returns then, the lookup ends in its own time.

A long upload grows its deadline with the bytes it sends (:meth:`Deadline.extend`, or
:func:`paced` around its chunks): a registry push of 2 GB cannot have the deadline of a
webhook, yet a push that stops moving must still end.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# Name lookups in flight at once, per process; more wait for a free thread (still bounded by
# their caller's deadline). A lookup the resolver cannot answer takes its own timeout (about
# 5 s per server and try, /etc/resolv.conf), so a few threads suffice.
_LOOKUP_THREADS = 8


class DeadlineExceeded(TimeoutError):
    """The call did not end within its deadline."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


class Deadline:
    """``seconds`` from now, for everything one call does; use it as a context manager
    (leaving it releases the watchdog's hold on the call's sockets).

    >>> with Deadline(5) as deadline:
    ...     0 < deadline.remaining() <= 5
    True
    """

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a deadline needs a positive time, not {seconds!r}")
        self.seconds = float(seconds)
        self._end = time.monotonic() + self.seconds
        self._lock = threading.Lock()
        self._guarded: list[socket.socket] = []
        self._expired = False
        self._closed = False
        _watchdog.watch(self)

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def end(self) -> float:
        """The moment, on :func:`time.monotonic`'s clock."""
        return self._end

    @property
    def expired(self) -> bool:
        return self._expired or time.monotonic() >= self._end

    def remaining(self) -> float:
        """Seconds left (0 once passed)."""
        return max(0.0, self._end - time.monotonic())

    def timeout(self, wanted: float | None = None) -> float:
        """A timeout for the next blocking step: what is left, and no more than ``wanted``;
        :class:`DeadlineExceeded` when nothing is left."""
        left = self.remaining()
        if left <= 0 or self._expired:
            raise DeadlineExceeded(self.seconds)
        return left if wanted is None else max(min(wanted, left), 0.001)

    def extend(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later (an upload that has sent more bytes)."""
        with self._lock:
            if not self._expired:
                self._end += seconds
                self.seconds += seconds

    def guard(self, sock: socket.socket) -> None:
        """Cut ``sock``'s connection when the deadline passes (or now, if it has)."""
        copy = sock.dup()
        with self._lock:
            if not self._expired and not self._closed:
                self._guarded.append(copy)
                return
        _shut(copy)
        copy.close()
        raise DeadlineExceeded(self.seconds)

    def run(self, func: Callable[..., T], *args: object) -> T:
        """``func(*args)`` in a helper thread, waited for until the deadline at most."""
        future = _lookups().submit(func, *args)
        try:
            return future.result(timeout=self.timeout())
        except TimeoutError as exc:
            if future.done():
                raise  # func's own timeout, not the deadline's
            future.cancel()
            raise DeadlineExceeded(self.seconds) from exc

    def close(self) -> None:
        """The call is over: its sockets are no longer the watchdog's."""
        with self._lock:
            self._closed = True
            guarded, self._guarded = self._guarded, []
        for copy in guarded:
            copy.close()

    def _expire(self) -> bool:
        """The watchdog's visit at :attr:`end`: cut the sockets; False when the deadline
        was moved later meanwhile (look again then)."""
        with self._lock:
            if self._closed:
                return True
            if time.monotonic() < self._end:
                return False
            self._expired = True
            guarded, self._guarded = self._guarded, []
        for copy in guarded:
            _shut(copy)
            copy.close()
        return True


def paced(chunks: Iterable[bytes], deadline: Deadline, *, bytes_per_s: float) -> Iterator[bytes]:
    """``chunks`` as a call sends them, each giving ``deadline`` the time it may take at
    ``bytes_per_s``: an upload that keeps that pace is never cut, one that stalls is.

    >>> with Deadline(1) as d:
    ...     sent = b"".join(paced([b"x" * 1000, b"y" * 1000], d, bytes_per_s=1000))
    ...     round(d.seconds)
    3
    """
    for chunk in chunks:
        deadline.extend(len(chunk) / bytes_per_s)
        yield chunk


def _shut(sock: socket.socket) -> None:
    # shutdown() acts on the connection, not the descriptor: the call's own (original)
    # descriptor, blocked in recv or send in another thread, returns at once.
    with contextlib.suppress(OSError):  # already closed, or never connected
        sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One thread per process that visits each deadline when it passes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def watch(self, deadline: Deadline) -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline.end, next(self._order), deadline))
            # A forked process (a Celery pool child) has the parent's heap but not its thread.
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="szbench-outbound-deadlines", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                end, _, deadline = self._heap[0]
                wait_s = end - time.monotonic()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                heapq.heappop(self._heap)
            if not deadline._expire():
                self.watch(deadline)


_watchdog = _Watchdog()
_executor: tuple[int, ThreadPoolExecutor] | None = None
_executor_lock = threading.Lock()


def _lookups() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None or _executor[0] != os.getpid():
            pool = ThreadPoolExecutor(_LOOKUP_THREADS, thread_name_prefix="szbench-lookup")
            _executor = (os.getpid(), pool)
        return _executor[1]
