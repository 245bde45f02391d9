"""Uploads (resumable, streamed, size-limited) and submitting algorithm versions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.evaluations import service as evaluation_service
from szbench.models import (
    AlgorithmVersion,
    EvaluationKind,
    EvaluationStatus,
    Role,
    RunOutcome,
    VersionStatus,
)
from tests.platform import factories as f
from tests.platform.helpers import single_connection_pool
from tests.platform.images import docker_save


@pytest.fixture
def smoke_requests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record request_smoke_test calls (the pipeline's service is tested on its own)."""
    calls: list[int] = []
    monkeypatch.setattr(
        evaluation_service,
        "request_smoke_test",
        lambda session, version: calls.append(version.id),
    )
    return calls


def _upload(
    client: TestClient, h: dict[str, str], data: bytes, *, name: str = "img.tar", chunk: int = 0
) -> str:
    r = client.post("/api/v1/uploads", headers=h, json={"filename": name, "size_bytes": len(data)})
    assert r.status_code == 201, r.text
    upload_id = r.json()["id"]
    step = chunk or len(data)
    for start in range(0, len(data), step):
        r = client.put(
            f"/api/v1/uploads/{upload_id}",
            headers=h,
            params={"offset": start},
            content=data[start : start + step],
        )
        assert r.status_code == 200, r.text
    assert r.json()["complete"] is True
    return upload_id


def test_chunked_resumable_upload_then_submit(
    client: TestClient, db_session: Session, tmp_path: Path, smoke_requests: list[int]
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = client.post(
        "/api/v1/algorithms", headers=h, json={"name": "sz-detect", "licence": "MIT"}
    ).json()
    archive = tmp_path / "img.tar.gz"
    image_id = docker_save(archive, layout="oci", gzip=True)
    data = archive.read_bytes()
    r = client.post(
        "/api/v1/uploads", headers=h, json={"filename": "img.tar.gz", "size_bytes": len(data)}
    )
    upload_id = r.json()["id"]
    half = len(data) // 2
    # First chunk with Content-Range, then a "dropped connection": ask where to resume.
    r = client.put(
        f"/api/v1/uploads/{upload_id}",
        headers={**h, "Content-Range": f"bytes 0-{half - 1}/{len(data)}"},
        content=data[:half],
    )
    assert r.json()["offset"] == half
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["offset"] == half
    # Submitting too early names what is missing.
    r = client.post(
        f"/api/v1/algorithms/{algo['id']}/versions",
        headers=h,
        json={"version": "1.0", "upload_id": upload_id},
    )
    assert r.status_code == 409
    assert f"{half} of {len(data)} bytes" in r.json()["detail"]
    # A chunk at the wrong offset is refused with the offset to resume from.
    r = client.put(
        f"/api/v1/uploads/{upload_id}", headers=h, params={"offset": 0}, content=data[:10]
    )
    assert r.status_code == 409
    assert f"resume from {half}" in r.json()["detail"]
    r = client.put(
        f"/api/v1/uploads/{upload_id}", headers=h, params={"offset": half}, content=data[half:]
    )
    answer = r.json()
    assert answer.pop("expires_at").startswith("20")
    assert answer == {
        "id": upload_id,
        "filename": "img.tar.gz",
        "size_bytes": len(data),
        "offset": len(data),
        "complete": True,
        "state": "open",
        "steps": None,
    }
    r = client.post(
        f"/api/v1/algorithms/{algo['id']}/versions",
        headers=h,
        json={"version": "1.0", "upload_id": upload_id},
    )
    assert r.status_code == 201, r.text
    version = r.json()
    assert version["image_digest"] == image_id
    assert version["status"] == "pending"
    assert version["tarball_bytes"] == len(data)
    assert smoke_requests == [version["id"]]
    row = db_session.get(AlgorithmVersion, version["id"])
    assert row is not None
    stored = get_settings().effective_uploads_dir / str(row.tarball_path)
    assert stored.name == image_id.split(":")[1] + ".tar.gz"
    assert hashlib.sha256(stored.read_bytes()).digest() == hashlib.sha256(data).digest()
    # The session is consumed.
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).status_code == 404


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"arch": "arm64"}, "linux/arm64"),
        ({"user": "0"}, "runs as root"),
        ({"images": 2}, "exactly one"),
    ],
)
def test_bad_images_refused_with_clear_message(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    smoke_requests: list[int],
    kwargs: dict[str, object],
    fragment: str,
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar"
    docker_save(archive, **kwargs)  # type: ignore[arg-type]
    upload_id = _upload(client, h, archive.read_bytes(), chunk=700)
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload_id},
    )
    assert r.status_code == 422
    assert r.json()["error"] == "InvalidSubmission"
    assert fragment in r.json()["detail"]
    assert smoke_requests == []


def test_root_image_accepted_when_settings_allow(
    client: TestClient, db_session: Session, tmp_path: Path, smoke_requests: list[int], settings_env
) -> None:
    settings_env.setenv("SZBENCH_ALLOW_ROOT_IMAGES", "true")
    get_settings.cache_clear()
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar"
    docker_save(archive, user=None)
    upload_id = _upload(client, h, archive.read_bytes())
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload_id},
    )
    assert r.status_code == 201, r.text


def test_size_limits(client: TestClient, db_session: Session, settings_env) -> None:
    settings_env.setenv("SZBENCH_MAX_UPLOAD_BYTES", "1000")
    get_settings.cache_clear()
    h = f.headers(db_session, f.user(db_session))
    r = client.post("/api/v1/uploads", headers=h, json={"filename": "big.tar", "size_bytes": 1001})
    assert r.status_code == 413
    assert r.json()["error"] == "PayloadTooLarge"
    r = client.post("/api/v1/uploads", headers=h, json={"filename": "ok.tar", "size_bytes": 100})
    upload_id = r.json()["id"]
    # More bytes than declared: refused and cut back, so the session stays resumable.
    r = client.put(
        f"/api/v1/uploads/{upload_id}", headers=h, params={"offset": 0}, content=b"x" * 150
    )
    assert r.status_code == 413
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["offset"] == 0
    r = client.post("/api/v1/uploads", headers=h, json={"filename": "notes.zip", "size_bytes": 10})
    assert r.status_code == 400
    assert ".tar" in r.json()["detail"]


def test_upload_sessions_are_private(client: TestClient, db_session: Session) -> None:
    alice, bob = f.user(db_session), f.user(db_session)
    r = client.post(
        "/api/v1/uploads",
        headers=f.headers(db_session, alice),
        json={"filename": "a.tar", "size_bytes": 5},
    )
    upload_id = r.json()["id"]
    hb = f.headers(db_session, bob)
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=hb).status_code == 404
    assert (
        client.put(
            f"/api/v1/uploads/{upload_id}", headers=hb, params={"offset": 0}, content=b"12345"
        ).status_code
        == 404
    )
    assert client.delete(f"/api/v1/uploads/{upload_id}", headers=hb).status_code == 404
    assert client.get("/api/v1/uploads/not-a-hex-id", headers=hb).status_code == 404


def test_image_reference_must_be_pinned(
    client: TestClient, db_session: Session, smoke_requests: list[int]
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    digest = "sha256:" + "ab" * 32
    url = f"/api/v1/algorithms/{algo.id}/versions"
    r = client.post(
        url, headers=h, json={"version": "1", "image_reference": "localhost:5000/team/algo:1.0"}
    )
    assert r.status_code == 400
    assert "@sha256" in r.json()["detail"]
    r = client.post(
        url,
        headers=h,
        json={"version": "1", "image_reference": f"localhost:5000/team/algo:1.0@{digest}"},
    )
    assert r.status_code == 201, r.text
    assert r.json()["image_digest"] == digest
    r = client.post(url, headers=h, json={"version": "1", "image_reference": f"algo@{digest}"})
    assert r.status_code == 409  # the version name is taken
    r = client.post(
        url,
        headers=h,
        json={"version": "2", "image_reference": f"algo@{digest}", "upload_id": "a" * 32},
    )
    assert r.status_code == 400


def test_others_cannot_submit_to_my_algorithm(
    client: TestClient, db_session: Session, smoke_requests: list[int]
) -> None:
    owner, other = f.user(db_session), f.user(db_session)
    algo = f.algorithm(db_session, owner)
    body = {"version": "1", "image_reference": "a@sha256:" + "0" * 64}
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions", headers=f.headers(db_session, other), json=body
    )
    assert r.status_code == 403
    centre = f.user(db_session, Role.CENTRE)
    r = client.post("/api/v1/algorithms", headers=f.headers(db_session, centre), json={"name": "x"})
    assert r.status_code == 403


def test_phase_quota_and_infrastructure_failures(
    client: TestClient, db_session: Session, smoke_requests: list[int]
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    phase = f.phase(db_session, slug="final", submission_quota=1)
    url = f"/api/v1/algorithms/{algo.id}/versions"

    def submit(version: str) -> int:
        body = {"version": version, "phase": "final", "image_reference": "a@sha256:" + version * 64}
        return client.post(url, headers=h, json=body).status_code

    assert submit("1") == 201
    assert submit("2") == 429
    # The first version's smoke test failed only because of the infrastructure: not counted.
    first = db_session.query(AlgorithmVersion).filter_by(algorithm_id=algo.id, version="1").one()
    first.status = VersionStatus.PENDING
    sample = f.dataset_version(db_session, f.dataset(db_session))
    smoke = f.evaluation(
        db_session, first, sample, status=EvaluationStatus.FAILED, kind=EvaluationKind.SMOKE_TEST
    )
    f.run(
        db_session, smoke, f.recording(db_session, sample), outcome=RunOutcome.INFRASTRUCTURE_ERROR
    )
    db_session.flush()
    assert submit("3") == 201
    assert submit("4") == 429
    # Closed phases take nothing; unknown phases are named.
    phase.is_open = False
    db_session.flush()
    body = {"version": "5", "phase": "final", "image_reference": "a@sha256:" + "5" * 64}
    r = client.post(url, headers=h, json=body)
    assert r.status_code == 409
    assert "closed" in r.json()["detail"]
    body["phase"] = "nope"
    assert client.post(url, headers=h, json=body).status_code == 404


def test_allowed_images_and_centre_mode(
    client: TestClient, db_session: Session, smoke_requests: list[int], settings_env
) -> None:
    settings_env.setenv("SZBENCH_ALLOWED_IMAGES", "localhost:5000/approved/")
    settings_env.setenv("SZBENCH_CENTRE_MODE", "true")
    get_settings.cache_clear()
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    url = f"/api/v1/algorithms/{algo.id}/versions"
    digest = "@sha256:" + "d" * 64
    r = client.post(
        url, headers=h, json={"version": "1", "image_reference": "elsewhere/x" + digest}
    )
    assert r.status_code == 422
    assert "SZBENCH_ALLOWED_IMAGES" in r.json()["detail"]
    r = client.post(
        url,
        headers=h,
        json={"version": "1", "image_reference": "localhost:5000/approved/x" + digest},
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/api/v1/auth/signup", json={"email": "c@example.org", "password": "longenough"}
    )
    assert r.status_code == 403


def test_the_archive_check_holds_no_database_connection(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, smoke_requests: list[int]
) -> None:
    """With a pool of one connection, other requests are answered while a submission's
    archive is being checked (it reads the whole archive: long for a large image)."""
    import threading

    import anyio
    import httpx

    from szbench import db, migrate
    from szbench.algorithms import service as algorithms
    from szbench.app import create_app
    from szbench.uploads import service as uploads

    url = f"sqlite:///{tmp_path / 'submit.sqlite3'}"
    migrate.upgrade(url)
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    archive = tmp_path / "img.tar"
    image_id = docker_save(archive)
    with db.session_scope() as s:
        owner = f.user(s)
        _, secret = f.token(s, owner)
        algo_id = f.algorithm(s, owner, name="slow-check").id
        upload_id = uploads.import_file(s, owner, archive).id
    engine, connections = single_connection_pool(settings_env, url)
    checking, release = threading.Event(), threading.Event()
    real_check = algorithms.check_image_archive

    def slow_check(path: Path, **kw: object) -> object:
        checking.set()
        assert release.wait(20), "the test never released the check"
        return real_check(path, **kw)  # type: ignore[arg-type]

    settings_env.setattr(algorithms, "check_image_archive", slow_check)
    headers = {"Authorization": f"Bearer {secret}"}

    async def main() -> tuple[int, list[int], dict[str, object]]:
        meanwhile: list[int] = []
        submitted: dict[str, object] = {}
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def submit() -> None:
                r = await client.post(
                    f"/api/v1/algorithms/{algo_id}/versions",
                    headers=headers,
                    json={"version": "1.0", "upload_id": upload_id},
                )
                submitted.update(status=r.status_code, body=r.json())

            async with anyio.create_task_group() as tg:
                tg.start_soon(submit)
                await anyio.to_thread.run_sync(checking.wait, 20)
                for _ in range(3):  # each needs the one connection
                    r = await client.get("/api/v1/algorithms", headers=headers)
                    meanwhile.append(r.status_code)
                still_checking = not release.is_set() and not submitted
                release.set()
        return int(still_checking), meanwhile, submitted

    try:
        still_checking, meanwhile, submitted = anyio.run(main)
    finally:
        engine.dispose()
    assert still_checking == 1
    assert meanwhile == [200, 200, 200]
    assert submitted["status"] == 201, submitted
    assert submitted["body"]["image_digest"] == image_id  # type: ignore[index]
    assert connections["most"] == 1
    assert len(smoke_requests) == 1


def test_a_registry_that_does_not_answer_keeps_the_upload(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    smoke_requests: list[int],
    settings_env: pytest.MonkeyPatch,
) -> None:
    """With SZBENCH_REGISTRY set, an accepted archive must reach the registry before its
    version exists: when it cannot, 503 (the platform's fault), and the upload stays."""
    settings_env.setenv("SZBENCH_REGISTRY", "127.0.0.1:9")
    get_settings.cache_clear()
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = client.post("/api/v1/algorithms", headers=h, json={"name": "pushed"}).json()
    archive = tmp_path / "img.tar"
    docker_save(archive)
    upload_id = _upload(client, h, archive.read_bytes())
    r = client.post(
        f"/api/v1/algorithms/{algo['id']}/versions",
        headers=h,
        json={"version": "1.0", "upload_id": upload_id},
    )
    assert r.status_code == 503
    assert r.json()["error"] == "ServiceUnavailable"
    # Said without the registry's address, an internal one (issue 29 item 1).
    assert "image registry is unavailable" in r.json()["detail"]
    assert "127.0.0.1" not in r.text
    assert smoke_requests == []
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["complete"] is True
