"""Test notifications to a receiver that drips (issue 28.5): do other routes stay fast?

Before, 45 parallel ``POST /users/me/notifications/test`` from one researcher, each to a
webhook receiver that sends its answer one byte per second, held every API thread and made
every sync route time out for everyone. This measures, in one run, on a scratch PostgreSQL
database, with the shipped defaults (``SZBENCH_WEBHOOK_TIMEOUT_S`` 10 s):

- the baseline: latency of a sync route that reads the database
  (``GET /api/v1/users/me/notifications``), 4 clients at once, on an idle app;
- the same route while 50 test sends are under way, to a loopback receiver that drips its
  answer (one byte every 50 ms: its headers alone would take about 23 s),
  (a) 50 from one account (rate-limited: one at a time), (b) one from each of 50 accounts
  (the senders' pool is busy for several deadlines);
- how long the test requests took to be answered, against the deadline.

It prints the latency ratios (loaded / idle, p50 and p90): the figure to compare between
runs and machines. The app runs in this process behind httpx's ASGI transport, so its
threads and event loop are those a uvicorn worker has.

Run: ``python benchmarks/outbound_tests.py`` (PostgreSQL on 127.0.0.1:5432, trust auth).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "platform"), str(ROOT / "scoring"), str(ROOT / "worker"), str(ROOT)]

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BASE = "/api/v1/users/me/notifications"
SAMPLES = 80


async def _latencies(client: httpx.AsyncClient, headers: dict[str, str]) -> list[float]:
    times: list[float] = []

    async def one() -> None:
        start = time.perf_counter()
        r = await client.get(BASE, headers=headers)
        assert r.status_code == 200, r.text
        times.append(time.perf_counter() - start)

    for _ in range(SAMPLES // 4):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(one)
    return times


async def _under_load(
    client: httpx.AsyncClient, reader: dict[str, str], senders: list[dict[str, str]], drip: object
) -> tuple[list[float], list[float], list[int]]:
    answered: list[float] = []
    statuses: list[int] = []
    start = time.perf_counter()

    async def send(headers: dict[str, str]) -> None:
        r = await client.post(f"{BASE}/test", headers=headers)
        statuses.append(r.status_code)
        answered.append(time.perf_counter() - start)

    async with anyio.create_task_group() as tg:
        for headers in senders:
            tg.start_soon(send, headers)
        await anyio.to_thread.run_sync(_first_call, drip)
        loaded = await _latencies(client, reader)
    return loaded, answered, statuses


def _first_call(drip: object) -> None:
    with drip.changed:  # type: ignore[attr-defined]
        drip.changed.wait_for(lambda: drip.connections >= 1, 60)  # type: ignore[attr-defined]


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    name = f"szbench_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    data = tempfile.mkdtemp(prefix="szbench-bench-")
    os.environ.update(
        SZBENCH_DATABASE_URL=url,
        SZBENCH_DATA_DIR=data,
        SZBENCH_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32",
        SZBENCH_WEBHOOK_ALLOW_HTTP="true",
        SZBENCH_PASSWORD_SCRYPT_N="1024",
    )
    try:
        run(url)
    finally:
        from szbench import db

        db.reset_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run(url: str) -> None:
    from szbench import migrate
    from szbench.app import create_app
    from szbench.config import get_settings
    from szbench.db import session_scope
    from szbench.notifications import preferences
    from tests.platform import factories as f
    from tests.platform.dripping_receiver import dripping_receiver

    migrate.upgrade(url)
    deadline_s = get_settings().webhook_timeout_s
    with dripping_receiver(interval_s=0.05) as drip:
        with session_scope() as session:
            accounts = []
            for _ in range(51):
                user = f.user(session)
                preferences.update_preferences(session, user, webhook_url=drip.url())
                accounts.append(f.headers(session, user))
        reader, one_account, many = accounts[0], [accounts[1]] * 50, accounts[1:]

        async def scenario() -> dict[str, object]:
            transport = httpx.ASGITransport(app=create_app())
            async with httpx.AsyncClient(
                transport=transport, base_url="http://bench", timeout=120
            ) as client:
                await _latencies(client, reader)  # warm-up
                idle = await _latencies(client, reader)
                a = await _under_load(client, reader, one_account, drip)
                b = await _under_load(client, reader, many, drip)
            return {"idle": idle, "one account": a, "50 accounts": b}

        results = asyncio.run(scenario())
    idle = results.pop("idle")
    assert isinstance(idle, list)
    p50, p90 = _pct(idle, 50), _pct(idle, 90)
    print(f"deadline per call: {deadline_s:g} s (shipped default)")
    print(f"idle GET {BASE}: p50 {p50 * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms (the baseline)")
    for label, value in results.items():
        loaded, answered, statuses = value  # type: ignore[misc]
        print(
            f"50 test sends from {label}: GET p50 x{_pct(loaded, 50) / p50:.2f}, "
            f"p90 x{_pct(loaded, 90) / p90:.2f} the baseline; tests answered "
            f"{statuses.count(200)} sent, {statuses.count(429)} refused (429), the last after "
            f"{max(answered) / deadline_s:.2f} deadlines"
        )


if __name__ == "__main__":
    main()
