"""The routers over the pipeline's write services (real services; tasks captured at send)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench import queue
from szbench.models import DatasetKind, DatasetVersion, Evaluation, Role, VersionStatus
from tests.platform import factories as f


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict]]]:
    """Tasks sent to the broker (after their request's commit)."""
    calls: list[tuple[str, str, dict]] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


def _prepared(root: Path, keys: list[tuple[str, str]]) -> Path:
    (root / "eeg").mkdir(parents=True)
    (root / "annotations").mkdir()
    recordings = []
    for key, subject in keys:
        (root / "eeg" / f"{key}.edf").write_bytes(b"0")
        (root / "annotations" / f"{key}_events.tsv").write_text("onset\n")
        recordings.append(
            {
                "id": key,
                "subject": subject,
                "checksum": "sha256:" + key.encode().hex().ljust(64, "0")[:64],
                "duration_s": 3600,
                "eeg": f"eeg/{key}.edf",
                "annotations": f"annotations/{key}_events.tsv",
            }
        )
    (root / "manifest.json").write_text(json.dumps({"recordings": recordings}))
    return root


def test_submission_requests_a_real_smoke_test(
    client: TestClient, db_session: Session, sent: list
) -> None:
    owner = f.user(db_session)
    algo = f.algorithm(db_session, owner)
    body = {"version": "1", "image_reference": "reg:5000/a@sha256:" + "e" * 64, "wants_gpu": True}
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions", headers=f.headers(db_session, owner), json=body
    )
    assert r.status_code == 201, r.text
    assert sent == [(queue.TASK_SMOKE_TEST, "gpu", {"algorithm_version_id": r.json()["id"]})]


def test_dataset_registration_dry_run_then_continuous_benchmark(
    client: TestClient, db_session: Session, tmp_path: Path, sent: list
) -> None:
    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    owner = f.user(db_session)
    active = f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.ACTIVE)
    f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.REJECTED)
    r = client.post(
        "/api/v1/datasets", headers=admin, json={"slug": "tuh-heldout", "kind": "held_out"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["versions"] == []
    prepared = _prepared(tmp_path / "prep", [("sub-01_run-00", "01"), ("sub-02_run-00", "02")])
    body = {"version": "2025.1", "prepared_path": str(prepared)}
    r = client.post(
        "/api/v1/datasets/tuh-heldout/versions", headers=admin, json=body, params={"dry_run": True}
    )
    assert r.status_code == 201, r.text
    dry = r.json()
    assert dry["dry_run"] is True
    assert (dry["recordings"], dry["subjects"]) == (2, 2)
    assert [p["algorithm_version_id"] for p in dry["benchmark"]] == [active.id]
    assert dry["dataset_version_id"] is None
    # Nothing was stored and nothing was sent.
    assert (
        db_session.scalar(
            select(func.count(DatasetVersion.id)).where(DatasetVersion.version == "2025.1")
        )
        == 0
    )
    assert sent == []
    r = client.post("/api/v1/datasets/tuh-heldout/versions", headers=admin, json=body)
    assert r.status_code == 201, r.text
    real = r.json()
    assert len(real["evaluation_ids"]) == 1
    assert sent == [
        (queue.TASK_START_EVALUATION, "cpu", {"evaluation_id": real["evaluation_ids"][0]})
    ]
    # The plan is now empty, and registering the same version again is a conflict.
    plan = client.get(
        "/api/v1/datasets/tuh-heldout/versions/2025.1/benchmark-plan", headers=admin
    ).json()
    assert plan == []
    assert (
        client.post("/api/v1/datasets/tuh-heldout/versions", headers=admin, json=body).status_code
        == 409
    )
    # A bad manifest is named.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{")
    r = client.post(
        "/api/v1/datasets/tuh-heldout/versions",
        headers=admin,
        json={"version": "x", "prepared_path": str(tmp_path / "bad")},
    )
    assert r.status_code == 400
    assert "manifest.json" in r.json()["detail"]


def test_evaluation_create_cancel_rerun_rescore(
    client: TestClient, db_session: Session, sent: list
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    version = f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.ACTIVE)
    ds = f.dataset(db_session, DatasetKind.HELD_OUT, slug="eval-ds")
    dv = f.dataset_version(db_session, ds, version="1")
    f.recording(db_session, dv)
    r = client.post(
        "/api/v1/evaluations",
        headers=h,
        json={"algorithm_version_id": version.id, "dataset": "eval-ds"},
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["status"] == "queued"
    assert created["progress"]["recordings_total"] == 1
    assert created["provenance"]["image_digest"] == version.image_digest
    assert sent[-1] == (queue.TASK_START_EVALUATION, "cpu", {"evaluation_id": created["id"]})
    r = client.post(f"/api/v1/evaluations/{created['id']}/cancel", headers=h)
    assert r.status_code == 200
    assert r.json()["status"] == "cancelled"
    r = client.post(f"/api/v1/evaluations/{created['id']}/cancel", headers=h)
    assert r.status_code == 409
    r = client.post(f"/api/v1/evaluations/{created['id']}/rerun", headers=h)
    assert r.status_code == 201, r.text
    assert r.json()["id"] != created["id"]
    # Re-score a finished evaluation with other parameters: not official.
    done = f.evaluation(db_session, version, dv)
    r = client.post(
        f"/api/v1/evaluations/{done.id}/rescore",
        headers=h,
        json={"scoring_params": {"nonsense": 1}},
    )
    assert r.status_code == 400
    assert "nonsense" in r.json()["detail"]
    r = client.post(
        f"/api/v1/evaluations/{done.id}/rescore", headers=h, json={"scoring_params": {}}
    )
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "rescore"
    assert r.json()["official"] is True
    # Others cannot touch it.
    other = f.headers(db_session, f.user(db_session))
    assert client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=other).status_code == 403
    # Unknown dataset / version are named.
    r = client.post(
        "/api/v1/evaluations",
        headers=h,
        json={"algorithm_version_id": version.id, "dataset": "nope"},
    )
    assert r.status_code == 404
    assert db_session.get(Evaluation, done.id) is not None
