"""The API says what platform fault holds an unfinished evaluation (issue 21 point 9)."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import EvaluationStatus, Role, WorkerHeartbeat
from tests.platform import factories as f
from tests.redis_urls import redis_url


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _beat(session: Session, worker: str, fault: str | None) -> None:
    now = datetime.now(UTC)
    session.add(
        WorkerHeartbeat(
            id=worker, host="h", queues=["cpu"], started_at=now, last_seen_at=now, fault=fault
        )
    )
    session.flush()


@pytest.mark.redis
def test_the_evaluation_says_what_platform_fault_holds_it(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    admin = f.user(db_session, Role.ADMIN)
    version = f.version(db_session, f.algorithm(db_session, admin))
    dv = f.dataset_version(db_session, f.dataset(db_session))
    running = f.evaluation(db_session, version, dv, status=EvaluationStatus.RUNNING, queue="cpu")
    done = f.evaluation(db_session, version, dv)

    def held(evaluation_id: int) -> str | None:
        r = client.get(f"/api/v1/evaluations/{evaluation_id}", headers=f.headers(db_session, admin))
        assert r.status_code == 200, r.text
        polled = client.get(
            f"/api/v1/evaluations/{evaluation_id}/progress", headers=f.headers(db_session, admin)
        ).json()["held_by"]
        assert polled == r.json()["progress"]["held_by"]
        return polled

    settings_env.setenv("SZBENCH_BROKER_URL", f"redis://127.0.0.1:{_closed_port()}/0")
    get_settings.cache_clear()
    assert held(running.id) == (
        "The task queue is unreachable; the evaluation goes on when it is back."
    )
    assert held(done.id) is None
    settings_env.setenv("SZBENCH_BROKER_URL", redis_url(15))  # only pinged
    get_settings.cache_clear()
    assert held(running.id) == "No worker serves the cpu queue now; the evaluation waits for one."
    _beat(db_session, "h:1.1", "the container engine of this host does not answer")
    assert held(running.id) == (
        "The workers of the cpu queue cannot run containers now (the container engine of this "
        "host does not answer); the evaluation goes on when they recover."
    )
    _beat(db_session, "h:2.2", None)  # one healthy worker: nothing holds it
    assert held(running.id) is None
