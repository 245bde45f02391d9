"""/healthz, /readyz and /metrics against real databases and Redis; the error envelope."""

from __future__ import annotations

import socket
import uuid
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from szbench import db, migrate
from szbench.app import create_app
from szbench.config import get_settings
from szbench.models import DatasetKind, EvaluationStatus, Role, RunOutcome, WorkerHeartbeat
from tests.platform import factories as f
from tests.platform.helpers import single_connection_pool
from tests.redis_urls import redis_url


def _client(monkeypatch: pytest.MonkeyPatch, **env: str) -> TestClient:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    return TestClient(create_app(), raise_server_exceptions=False)


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_postgres_and_redis(settings_env: pytest.MonkeyPatch, pg_url: str) -> None:
    client = _client(settings_env, SZBENCH_DATABASE_URL=pg_url, SZBENCH_BROKER_URL=redis_url(15))
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}
    client = _client(settings_env, SZBENCH_BROKER_URL="redis://127.0.0.1:1/0")
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["broker"].startswith("broker unreachable")
    assert r.json()["checks"]["database"] == "ok"


def test_readyz_unmigrated_database(settings_env: pytest.MonkeyPatch, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    migrate.upgrade(url, "0001")
    client = _client(settings_env, SZBENCH_DATABASE_URL=url)
    r = client.get("/readyz")
    assert r.status_code == 503
    assert "migrations at" in r.json()["checks"]["database"]
    migrate.upgrade(url)
    assert client.get("/readyz").status_code == 200


def test_metrics_read_from_the_database(settings_env: pytest.MonkeyPatch, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    migrate.upgrade(url)
    client = _client(settings_env, SZBENCH_DATABASE_URL=url, SZBENCH_METRICS_TOKEN="scrape-me")
    with db.session_scope() as s:
        owner = f.user(s)
        version = f.version(s, f.algorithm(s, owner))
        dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT))
        done = f.evaluation(s, version, dv)
        running = f.evaluation(s, version, dv, status=EvaluationStatus.RUNNING, queue="gpu")
        for i, outcome in enumerate([RunOutcome.OK, RunOutcome.OK, RunOutcome.TIMEOUT]):
            f.run(
                s,
                done,
                f.recording(s, dv, subject=f"{i}"),
                outcome=outcome,
                wall_time_s=30.0 * (i + 1),
            )
        f.run(s, running, f.recording(s, dv), outcome=None, wall_time_s=None,
              started_at=datetime.now(UTC), gpu_model="H100", worker_host="gpu-host-1")  # fmt: skip
        f.run(s, running, f.recording(s, dv), outcome=None, wall_time_s=None)
    assert client.get("/api/v1/algorithms").status_code == 200
    client.get("/api/v1/evaluations/12345")
    text = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
    assert 'szbench_runs_finished_total{outcome="ok"} 2.0' in text
    assert 'szbench_runs_finished_total{outcome="timeout"} 1.0' in text
    assert 'szbench_runs_waiting{queue="gpu"} 1.0' in text
    assert 'szbench_runs_running{queue="gpu"} 1.0' in text
    assert 'szbench_gpus_in_use{host="gpu-host-1"} 1.0' in text
    assert 'szbench_evaluations{status="running"} 1.0' in text
    assert 'szbench_run_duration_seconds_bucket{le="60.0"} 2.0' in text
    assert "szbench_run_duration_seconds_count 3.0" in text
    assert "szbench_metrics_db_up 1.0" in text
    # Requests are labelled by route template, not by raw path.
    assert 'route="/api/v1/algorithms",status="200"' in text
    assert 'route="/api/v1/evaluations/{evaluation_id}",status="404"' in text
    assert "12345" not in text


def test_metrics_survive_a_dead_database(settings_env: pytest.MonkeyPatch) -> None:
    client = _client(
        settings_env,
        SZBENCH_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/x",
        SZBENCH_METRICS_TOKEN="scrape-me",
    )
    r = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert r.status_code == 200
    assert "szbench_metrics_db_up 0.0" in r.text


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.redis
def test_metrics_report_the_database_while_only_the_broker_is_down(
    settings_env: pytest.MonkeyPatch, tmp_path
) -> None:
    """Issue 29 item 8: a broker outage drops the queue lengths, not the database's figures."""
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    migrate.upgrade(url)
    client = _client(
        settings_env,
        SZBENCH_DATABASE_URL=url,
        SZBENCH_BROKER_URL=f"redis://127.0.0.1:{_closed_port()}/0",
        SZBENCH_METRICS_TOKEN="scrape-me",
    )
    with db.session_scope() as s:
        version = f.version(s, f.algorithm(s, f.user(s)))
        dv = f.dataset_version(s, f.dataset(s, DatasetKind.HELD_OUT))
        f.evaluation(s, version, dv, status=EvaluationStatus.RUNNING, queue="gpu")
    text = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
    assert "szbench_metrics_db_up 1.0" in text
    assert "szbench_metrics_broker_up 0.0" in text
    assert 'szbench_evaluations{status="running"}' in text
    assert "szbench_runs_finished_total" in text
    assert "szbench_queue_length" not in text
    client = _client(settings_env, SZBENCH_BROKER_URL=redis_url(15))
    text = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
    assert "szbench_metrics_broker_up 1.0" in text
    assert 'szbench_queue_length{queue="gpu"}' in text


def test_metrics_count_the_workers_taking_no_runs_by_what_they_lack(
    settings_env: pytest.MonkeyPatch, tmp_path
) -> None:
    """Issue 29 item 2: a sick host says why in /metrics too."""
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    migrate.upgrade(url)
    client = _client(settings_env, SZBENCH_DATABASE_URL=url, SZBENCH_METRICS_TOKEN="scrape-me")
    tag = uuid.uuid4().hex[:8]
    with db.session_scope() as s:
        now = datetime.now(UTC)
        for i, kind in enumerate([None, "registry", "registry", "recording_cache"]):
            s.add(
                WorkerHeartbeat(
                    id=f"{tag}:{i}", host=tag, queues=[f"q{tag}"], started_at=now,
                    last_seen_at=now, fault=kind and "sick", fault_kind=kind,
                )
            )  # fmt: skip
    text = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
    assert f'szbench_workers_live{{queue="q{tag}"}} 4.0' in text
    assert f'szbench_workers_sick{{queue="q{tag}",reason="registry"}} 2.0' in text
    assert f'szbench_workers_sick{{queue="q{tag}",reason="recording_cache"}} 1.0' in text


@pytest.mark.slow
def test_metrics_only_for_the_scraper_token(settings_env: pytest.MonkeyPatch, tmp_path) -> None:
    # Run counters by outcome would show each held-out run's outcome on a quiet platform.
    url = f"sqlite:///{tmp_path / 'm.sqlite3'}"
    migrate.upgrade(url)
    client = _client(settings_env, SZBENCH_DATABASE_URL=url)
    off = client.get("/metrics")
    assert off.status_code == 404
    assert "SZBENCH_METRICS_TOKEN" in off.json()["detail"]
    client = _client(settings_env, SZBENCH_DATABASE_URL=url, SZBENCH_METRICS_TOKEN="scrape-me")
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "scrape-me"}).status_code == 401
    r = client.get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert r.status_code == 200
    assert "szbench_runs_finished_total" in r.text
    assert "/metrics" not in client.get("/api/v1/openapi.json").text


def test_error_envelope_everywhere(client: TestClient, db_session) -> None:
    r = client.get("/api/v1/no/such/route")
    assert r.status_code == 404
    assert r.json() == {"error": "NotFound", "detail": "no such route: GET /api/v1/no/such/route"}
    r = client.delete("/api/v1/leaderboards")
    assert r.status_code == 405
    assert r.json()["error"] == "MethodNotAllowed"
    r = client.get("/api/v1/algorithms", params={"limit": 100000})
    assert r.status_code == 422
    assert r.json()["error"] == "ValidationError"
    assert "query.limit" in r.json()["detail"]
    h = f.headers(db_session, f.user(db_session, Role.ADMIN))
    r = client.post(
        "/api/v1/phases", headers={**h, "Content-Type": "application/json"}, content=b"{not json"
    )
    assert r.status_code == 422
    assert r.json()["error"] == "ValidationError"
    r = client.post("/api/v1/phases", headers=h, json={"slug": "Bad Slug!"})
    assert r.status_code == 422
    assert "body.slug" in r.json()["detail"]
    r = client.get("/api/v1/evaluations/not-a-number")
    assert r.status_code == 422
    assert "path.evaluation_id" in r.json()["detail"]


@pytest.mark.slow
def test_openapi_documents_every_route(app) -> None:
    schema = app.openapi()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert op.get("description") or op.get("summary"), f"{method} {path}"
            if path.startswith("/api/v1"):
                assert "422" in op["responses"] or "404" in op["responses"], f"{method} {path}"


@pytest.mark.slow
def test_openapi_declares_the_bearer_token(app) -> None:
    """So that the docs page offers "Authorize" and clients generated from it send tokens."""
    schema = app.openapi()
    assert schema["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
    assert {"token": []} in schema["paths"]["/api/v1/auth/me"]["get"]["security"]
    assert {"token": []} in schema["paths"]["/api/v1/leaderboards/{slug}"]["get"]["security"]


def test_unreachable_database_is_503_not_500(settings_env: pytest.MonkeyPatch) -> None:
    client = _client(
        settings_env, SZBENCH_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/x"
    )
    r = client.get("/api/v1/algorithms")
    assert r.status_code == 503
    assert r.json()["error"] == "ServiceUnavailable"
    assert r.headers["retry-after"] == "5"


def test_requests_queue_for_a_one_connection_pool_without_deadlock(
    settings_env: pytest.MonkeyPatch, tmp_path
) -> None:
    """With a pool of one connection and no overflow, 100 concurrent requests (more than
    the worker threads; signed in: the token check and the route each in a thread; half of
    them a sync route that queries, half a cached read) all succeed: nobody holds the
    connection while waiting for a thread."""
    import collections

    import anyio
    import httpx

    url = f"sqlite:///{tmp_path / 'pool.sqlite3'}"
    migrate.upgrade(url)
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    with db.session_scope() as s:
        _, secret = f.token(s, f.user(s))
    engine, out = single_connection_pool(settings_env, url)

    async def main() -> list[int]:
        transport = httpx.ASGITransport(app=create_app())
        headers = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            statuses: list[int] = []

            async def one(path: str) -> None:
                statuses.append((await client.get(path, headers=headers)).status_code)

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(one, "/api/v1/algorithms" if i % 2 else "/api/v1/leaderboards/x")
            return statuses

    try:
        statuses = anyio.run(main)
    finally:
        engine.dispose()
    assert sorted(statuses) == [200] * 50 + [404] * 50, collections.Counter(statuses)
    assert out["most"] == 1
