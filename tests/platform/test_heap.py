"""The served API's garbage-collector policy: freeze the heap after a slow full pass."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from szbench.ops.heap import FreezeAfterSlowPass


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _request(app: Any) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app({"type": "http", "method": "GET", "path": "/"}, receive, send)
    await anyio.sleep(0)  # the freeze runs on the loop, right after the request


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the suite runs with a collector that sees everything


@pytest.mark.usefixtures("unfrozen")
def test_a_slow_full_pass_freezes_the_heap_after_the_request() -> None:
    middleware = FreezeAfterSlowPass(_ok, slow_pass_s=1e-9)  # every pass counts as slow
    try:
        kept = [{"n": i} for i in range(10_000)]  # long-lived state: tracked containers
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert gc.get_freeze_count() == 0  # only noted: nothing is frozen inside the collector
        anyio.run(_request, middleware)
        assert gc.get_freeze_count() >= len(kept)
        frozen = gc.get_freeze_count()
        anyio.run(_request, middleware)  # no full pass since: nothing more to do
        assert gc.get_freeze_count() == frozen
    finally:
        middleware.close()
    assert all(callback is not middleware._timer for callback in gc.callbacks)


@pytest.mark.usefixtures("unfrozen")
def test_quick_passes_and_a_zero_limit_freeze_nothing() -> None:
    quick = FreezeAfterSlowPass(_ok, slow_pass_s=60.0)
    off = FreezeAfterSlowPass(_ok, slow_pass_s=0)
    try:
        assert off._timer is None
        gc.collect()
        anyio.run(_request, quick)
        anyio.run(_request, off)
        assert gc.get_freeze_count() == 0
    finally:
        quick.close()
        off.close()
