"""Admin data needs the admin scope: an admin's token without it sees what a researcher sees
(hidden EEG, annotations, held-out detections, full logs, run limits, others' uploads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, Role
from szbench.uploads import service as uploads
from tests.platform import factories as f

ADMIN_LOG = "container log: secret host details"
SCOPELESS = ["read", "write"]


@dataclass
class HeldOut:
    base: str
    key: str
    evaluation_id: int
    run_id: int
    slug: str
    version: str


@pytest.fixture
def held_out(db_session: Session, tmp_path: Path) -> HeldOut:
    s = db_session
    owner = f.user(s)
    ds = f.dataset(s, DatasetKind.HELD_OUT, run_limits={"memory_bytes": 123})
    dv = f.dataset_version(s, ds, path=str(tmp_path), version="1.0")
    rec = f.recording(s, dv)
    (tmp_path / rec.eeg_path).parent.mkdir(parents=True)
    (tmp_path / rec.eeg_path).write_bytes(b"hidden EEG bytes")
    (tmp_path / rec.annotations_path).parent.mkdir(parents=True)
    (tmp_path / rec.annotations_path).write_text("onset\tduration\teventType\n1234\t66\tsz\n")
    ev = f.evaluation(s, f.version(s, f.algorithm(s, owner)), dv, published=True)
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    run = f.run(s, ev, rec, detections_tsv="held-out detections\n", admin_log=ADMIN_LOG)
    return HeldOut(
        base=f"/api/v1/datasets/{ds.slug}/versions/1.0/recordings",
        key=rec.key,
        evaluation_id=ev.id,
        run_id=run.id,
        slug=ds.slug,
        version="1.0",
    )


def _admin_headers(db_session: Session) -> tuple[dict[str, str], dict[str, str]]:
    admin = f.user(db_session, Role.ADMIN)
    return f.headers(db_session, admin, SCOPELESS), f.headers(db_session, admin)


def test_hidden_eeg_and_annotations_need_the_admin_scope(
    client: TestClient, db_session: Session, held_out: HeldOut
) -> None:
    scopeless, scoped = _admin_headers(db_session)
    for path in (
        held_out.base,
        f"{held_out.base}/{held_out.key}/eeg",
        f"{held_out.base}/{held_out.key}/annotations",
    ):
        r = client.get(path, headers=scopeless)
        assert r.status_code == 403, (path, r.text)
        assert "held out" in r.json()["detail"]
        assert client.get(path, headers=scoped).status_code == 200, path
    assert client.get(f"{held_out.base}/{held_out.key}/eeg", headers=scoped).content == (
        b"hidden EEG bytes"
    )


def test_held_out_detections_and_logs_need_the_admin_scope(
    client: TestClient, db_session: Session, held_out: HeldOut
) -> None:
    scopeless, scoped = _admin_headers(db_session)
    detections = (
        f"/api/v1/evaluations/{held_out.evaluation_id}/recordings/{held_out.run_id}/detections"
    )
    runs = f"/api/v1/evaluations/{held_out.evaluation_id}/recordings"
    # The admin's answer first: a cached admin answer must not reach the scope-less token.
    r = client.get(runs, headers=scoped)
    assert r.status_code == 200
    assert r.json()["items"][0]["admin_log"] == ADMIN_LOG
    assert client.get(detections, headers=scoped).text == "held-out detections\n"
    r = client.get(runs, headers=scopeless)
    assert ADMIN_LOG not in r.text
    r = client.get(detections, headers=scopeless)
    assert r.status_code == 403
    assert "held-out detections" not in r.text


def test_run_limits_of_a_dataset_need_the_admin_scope(
    client: TestClient, db_session: Session, held_out: HeldOut
) -> None:
    scopeless, scoped = _admin_headers(db_session)
    path = f"/api/v1/datasets/{held_out.slug}"
    assert client.get(path, headers=scoped).json()["run_limits"] == {"memory_bytes": 123}
    assert client.get(path, headers=scopeless).json()["run_limits"] is None


def test_others_uploads_need_the_admin_scope(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    researcher = f.user(db_session)
    upload = uploads.create_upload(db_session, researcher, filename="a.tar", size_bytes=5)
    scopeless, scoped = _admin_headers(db_session)
    assert client.get(f"/api/v1/uploads/{upload.id}", headers=scoped).status_code == 200
    assert client.get(f"/api/v1/uploads/{upload.id}", headers=scopeless).status_code == 404


def test_a_token_cannot_mint_a_scope_it_lacks(client: TestClient, db_session: Session) -> None:
    scopeless, scoped = _admin_headers(db_session)
    r = client.post("/api/v1/tokens", headers=scopeless, json={"scopes": ["read", "admin"]})
    assert r.status_code == 403
    assert "lacks 'admin'" in r.json()["detail"]
    r = client.post("/api/v1/tokens", headers=scopeless, json={"name": "default"})
    assert r.status_code == 201
    assert r.json()["scopes"] == ["read", "write"]
    r = client.post("/api/v1/tokens", headers=scoped, json={"scopes": ["read", "admin"]})
    assert r.status_code == 201
    # A read-only token cannot write at all (unchanged), so it mints nothing.
    readonly = f.headers(db_session, f.user(db_session), ["read"])
    assert client.post("/api/v1/tokens", headers=readonly, json={}).status_code == 403
