"""A broker (Redis) that is down when the API sends a task: a 503 with Retry-After.

What the request committed stays (the evaluation is ``queued``); the reconciler sends its
start task once the broker is back (tests/worker/test_reconcile.py). The outage is real:
the broker URL names a port where nothing listens.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import queue
from szbench.config import get_settings
from szbench.models import DatasetKind, Evaluation, EvaluationStatus, VersionStatus
from tests.platform import factories as f


@pytest.fixture
def broker_down(settings_env: pytest.MonkeyPatch) -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Closed again: connections to it are refused, as to a Redis that is restarting.
    settings_env.setenv("SZBENCH_BROKER_URL", f"redis://127.0.0.1:{port}/0")
    get_settings.cache_clear()
    queue.set_sender(None)
    queue.reset_celery()
    yield
    queue.reset_celery()


def test_a_post_while_the_broker_is_down_is_a_503_and_keeps_the_evaluation_queued(
    broker_down: None, client: TestClient, db_session: Session
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    version = f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.ACTIVE)
    ds = f.dataset(db_session, DatasetKind.HELD_OUT, slug="outage-ds")
    dv = f.dataset_version(db_session, ds, version="1")
    f.recording(db_session, dv)
    r = client.post(
        "/api/v1/evaluations",
        headers=h,
        json={"algorithm_version_id": version.id, "dataset": "outage-ds"},
    )
    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "5"
    body = r.json()
    assert body["error"] == "ServiceUnavailable"
    assert "task queue" in body["detail"]
    # Committed before the send: the reconciler finds it and sends its start task later.
    statuses = db_session.scalars(
        select(Evaluation.status).where(Evaluation.algorithm_version_id == version.id)
    ).all()
    assert statuses == [EvaluationStatus.QUEUED]
