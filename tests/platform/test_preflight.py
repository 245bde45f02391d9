"""Issue 23.6: a submission is checked before any byte of its archive is sent
(``POST /api/v1/algorithms/preflight``): quotas, the phase and its dates, the version label,
the archive's name and size; nothing is written, and a new algorithm's name that the caller
already has (a retry after a refused first version) answers that algorithm."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import Algorithm, Upload
from tests.platform import factories as f

URL = "/api/v1/algorithms/preflight"


def _counts(s: Session) -> tuple[int, int]:
    return (
        s.scalar(select(func.count(Algorithm.id))) or 0,
        s.scalar(select(func.count(Upload.id))) or 0,
    )


def test_preflight_refuses_what_the_submit_would(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    s = db_session
    user = f.user(s)
    h = f.headers(s, user)
    before = _counts(s)
    ok = client.post(URL, json={"name": "fresh", "version": "1.0", "filename": "a.tar",
                                "size_bytes": 1000}, headers=h)  # fmt: skip
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"ok": True, "existing_algorithm_id": None}
    # A retry after a refused first version: the algorithm that try made is offered.
    algo = f.algorithm(s, user, name="again")
    retry = client.post(URL, json={"name": "again", "version": "1.0"}, headers=h)
    assert retry.json()["existing_algorithm_id"] == algo.id
    f.version(s, algo, version="1.0")
    taken = client.post(URL, json={"algorithm_id": algo.id, "version": "1.0"}, headers=h)
    assert taken.status_code == 409
    assert "already has a version '1.0'" in taken.json()["detail"]
    big = get_settings().max_upload_bytes + 1
    r = client.post(URL, json={"name": "x", "version": "1", "filename": "a.tar",
                               "size_bytes": big}, headers=h)  # fmt: skip
    assert r.status_code == 413
    r = client.post(URL, json={"name": "x", "version": "1", "filename": "a.zip",
                               "size_bytes": 10}, headers=h)  # fmt: skip
    assert r.status_code == 400
    assert "filename" in r.json()["detail"]
    # A phase that has not opened yet, or has closed, is refused before the upload.
    later = f.phase(s, opens_at=datetime.now(UTC) + timedelta(days=2))
    r = client.post(URL, json={"name": "x", "version": "1", "phase": later.slug}, headers=h)
    assert r.status_code == 409
    # The daily quota, spent: "0 of N left" before a byte, not after the upload.
    settings_env.setenv("SZBENCH_SUBMISSIONS_PER_DAY", "1")
    get_settings.cache_clear()
    r = client.post(URL, json={"name": "x", "version": "1"}, headers=h)
    assert r.status_code == 429
    assert "you have used all 1 submissions" in r.json()["detail"]
    # Nothing was made by any of these answers beyond the rows this test made itself.
    assert _counts(s) == (before[0] + 1, before[1])
