"""Phases with dates: submissions only between opens_at and closes_at, set through the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench import queue
from szbench.evaluations import service as evaluation_service
from szbench.models import DatasetKind, Disclosure, Role
from tests.platform import factories as f

NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def no_smoke_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluation_service, "request_smoke_test", lambda session, version: None)


def _submit(client: TestClient, db_session: Session, phase: str, version: str) -> tuple[int, str]:
    owner = f.user(db_session)
    algo = f.algorithm(db_session, owner)
    body = {"version": version, "phase": phase, "image_reference": "a@sha256:" + version * 64}
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions", headers=f.headers(db_session, owner), json=body
    )
    return r.status_code, r.json().get("detail", "")


def test_submissions_only_between_the_dates(client: TestClient, db_session: Session) -> None:
    f.phase(db_session, slug="later", opens_at=NOW + timedelta(days=1))
    f.phase(db_session, slug="over", closes_at=NOW - timedelta(minutes=1))
    f.phase(
        db_session,
        slug="now",
        opens_at=NOW - timedelta(days=1),
        closes_at=NOW + timedelta(days=1),
    )
    status, detail = _submit(client, db_session, "later", "1")
    assert status == 409
    assert detail.startswith("phase: 'later' opens for submissions at ")
    assert detail.endswith(" UTC")
    status, detail = _submit(client, db_session, "over", "2")
    assert status == 409
    assert detail.startswith("phase: 'over' closed for submissions at ")
    assert _submit(client, db_session, "now", "3")[0] == 201


def test_admins_set_dates_and_the_answer_says_whether_it_takes_submissions(
    client: TestClient, db_session: Session
) -> None:
    h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))
    closes = (NOW + timedelta(days=7)).replace(microsecond=0)
    r = client.post(
        "/api/v1/phases",
        headers=h,
        json={"slug": "spring", "closes_at": closes.isoformat(), "submission_quota": 3},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert datetime.fromisoformat(body["closes_at"]) == closes
    assert body["opens_at"] is None
    assert body["accepting"] is True
    # A date without an offset is UTC.
    r = client.patch("/api/v1/phases/spring", headers=h, json={"opens_at": "2099-01-01T10:00:00"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("closes_at: ")
    assert "is not after opens_at 2099-01-01 10:00 UTC" in r.json()["detail"]
    r = client.patch(
        "/api/v1/phases/spring",
        headers=h,
        json={"opens_at": (NOW + timedelta(days=1)).replace(tzinfo=None).isoformat()},
    )
    assert r.status_code == 200
    assert r.json()["accepting"] is False
    assert datetime.fromisoformat(r.json()["opens_at"]).utcoffset() == timedelta(0)
    # Leaving a date out keeps it; null removes it.
    r = client.patch("/api/v1/phases/spring", headers=h, json={"title": "Spring"})
    assert r.json()["opens_at"] is not None
    r = client.patch("/api/v1/phases/spring", headers=h, json={"opens_at": None})
    assert r.json()["opens_at"] is None
    assert r.json()["accepting"] is True
    r = client.patch("/api/v1/phases/spring", headers=h, json={"is_open": False})
    assert r.json()["accepting"] is False


def test_creating_with_dates_in_the_wrong_order_is_refused(
    client: TestClient, db_session: Session
) -> None:
    h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))
    r = client.post(
        "/api/v1/phases",
        headers=h,
        json={
            "slug": "backwards",
            "opens_at": "2030-02-01T00:00:00Z",
            "closes_at": "2030-01-01T00:00:00Z",
        },
    )
    assert r.status_code == 400
    assert r.json()["detail"] == (
        "closes_at: 2030-01-01 00:00 UTC is not after opens_at 2030-02-01 00:00 UTC"
    )
    assert client.get("/api/v1/phases/backwards", headers=h).status_code == 404


@pytest.mark.parametrize("closed", [{"is_open": False}, {"closes_at": NOW - timedelta(hours=1)}])
def test_a_closed_phase_takes_no_held_out_work_but_from_admins(
    client: TestClient, db_session: Session, closed: dict[str, object]
) -> None:
    """Issue 20.2: no new evaluation, re-run or re-score of a closed phase's versions on
    held-out data for non-admins (API, pages), whatever the phase discloses."""
    s = db_session
    queue.set_sender(lambda name, q, kwargs: None)
    try:
        owner, admin = f.user(s), f.user(s, role=Role.ADMIN)
        phase = f.phase(s, disclosure=Disclosure.RECORDING, **closed)
        version = f.version(s, f.algorithm(s, owner), phase_id=phase.id)
        held = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
        sample = f.dataset_version(s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="pub"), "1")
        phase.dataset_versions = [held]
        for dv in (held, sample):
            f.recording(s, dv)
        done = f.evaluation(s, version, held)
        f.result(s, done, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
        mine, theirs = f.headers(s, owner), f.headers(s, admin)
        new = {"algorithm_version_id": version.id, "dataset": "held"}
        requests = [
            ("/api/v1/evaluations", new),
            (f"/api/v1/evaluations/{done.id}/rerun", None),
            (f"/api/v1/evaluations/{done.id}/rescore", {"scoring_params": {"min_overlap": 0.5}}),
        ]
        for path, body in requests:
            r = client.post(path, headers=mine, json=body)
            assert r.status_code == 409, (path, r.text)
            assert r.json()["detail"].startswith(f"phase: {phase.slug!r} ")
            assert "no new evaluation, re-run or re-score on held-out data" in r.json()["detail"]
        # The public sample is free, and an admin may start held-out work.
        r = client.post("/api/v1/evaluations", headers=mine, json={**new, "dataset": "pub"})
        assert r.status_code == 201, r.text
        for path, body in requests:
            assert client.post(path, headers=theirs, json=body).status_code == 201, path
        # The pages offer no re-run, and the web route refuses it too.
        page = client.get(f"/evaluations/{done.id}", headers=mine).text
        assert 'id="rerun-refused"' in page
        assert f'action="/evaluations/{done.id}/rerun"' not in page
        listing = client.get("/submissions", headers=mine).text
        assert "closed-phase-note" in listing
        assert f'action="/evaluations/{done.id}/rerun"' not in listing
    finally:
        queue.set_sender(None)
