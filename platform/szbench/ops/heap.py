"""Keep the garbage collector's full passes short on a served API.

A warm API process holds a couple of hundred thousand long-lived objects (modules, routes,
models, compiled queries, cached answers and leaderboard statistics). CPython's full
collection walks all of them: 30-160 ms on the project's 2-core machine, during which the
event loop serves nobody. Under load these passes come about once a second, because every
young collection promotes the objects of the requests in flight to the old generation: it
was the largest part of the p99 latency of the read endpoints (docs/api.md, Speed).

:func:`gc.freeze` moves what exists into a generation that the collector never walks. The
objects stay alive as long as they are referenced and are freed by reference counting as
usual; only a reference cycle among frozen objects would never be collected. So the heap is
frozen when what exists is mostly long-lived state: at start-up, and after a full pass that
was slow (:class:`FreezeAfterSlowPass`), since a slow pass means that the long-lived heap
grew (caches filled, leaderboards computed). A pass over a frozen heap costs a few
milliseconds, so this does not repeat unless the heap grows again.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

_FULL = 2  # the oldest generation


def freeze() -> int:
    """Collect once, then exempt every object alive now from later collections.

    Returns how many objects are frozen in all.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class _PassTimer:
    """A :data:`gc.callbacks` entry that notes when a full pass took longer than a limit."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.started = 0.0
        self.slow = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != _FULL:
            return
        if phase == "start":
            self.started = time.perf_counter()
        elif time.perf_counter() - self.started > self.limit_s:
            self.slow = True


class FreezeAfterSlowPass:
    """ASGI middleware: after a full collection slower than ``slow_pass_s``, freeze the heap.

    The collector reports to a callback, which only notes it: the freeze itself runs on the
    event loop once the current request is done, between requests (the pass that was just
    made is the collection, so it costs no second pass). Costs one attribute read per
    request. ``slow_pass_s`` of 0 or less turns it off.
    """

    def __init__(self, app: Any, slow_pass_s: float) -> None:
        self.app = app
        self._timer: _PassTimer | None = None
        if slow_pass_s > 0:
            self._timer = _PassTimer(slow_pass_s)
            gc.callbacks.append(self._timer)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
        timer = self._timer
        if timer is not None and timer.slow:
            timer.slow = False
            asyncio.get_running_loop().call_soon(self._freeze)

    @staticmethod
    def _freeze() -> None:
        before = gc.get_freeze_count()
        gc.freeze()
        log.info(
            "slow full collection: %d more objects frozen out of the garbage collector's "
            "passes (%d in all)",
            gc.get_freeze_count() - before,
            gc.get_freeze_count(),
        )

    def close(self) -> None:
        """Stop watching the collector (tests build many apps)."""
        if self._timer is not None and self._timer in gc.callbacks:
            gc.callbacks.remove(self._timer)
