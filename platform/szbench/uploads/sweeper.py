"""The served API's periodic upload sweep (:func:`szbench.uploads.service.sweep`).

Nothing else in the deployment runs on a timer, and the API is the one part that owns the
uploads folder and always runs, so each API process sweeps at start-up and then every
``upload_sweep_interval_s``. Sweeps are idempotent: several API processes sweeping at once
only find less to do. ``szbench upload sweep`` runs one by hand (or from cron when the
interval is 0).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI

from szbench.db import session_scope
from szbench.uploads.service import SweepReport, sweep

log = logging.getLogger(__name__)


def sweep_once() -> SweepReport:
    """One sweep in its own transaction."""
    with session_scope() as session:
        return sweep(session)


async def _sweep_forever(interval_s: float) -> None:
    while True:
        try:
            await anyio.to_thread.run_sync(sweep_once)
        except Exception:
            # A database that is down now may be back at the next round.
            log.exception("upload sweep failed")
        await anyio.sleep(interval_s)


def install_upload_sweeper(app: FastAPI, interval_s: float) -> None:
    """Sweep uploads while ``app`` is served: at start-up, then every ``interval_s`` seconds
    (0 or less: never)."""
    if interval_s <= 0:
        return
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: Any) -> AsyncIterator[Any]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_sweep_forever, interval_s)
            async with inner(served) as state:
                yield state
            tasks.cancel_scope.cancel()

    app.router.lifespan_context = lifespan
