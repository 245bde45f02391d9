"""Upload sessions against abuse: per-user caps, Content-Range checked against the body,
refused and expired uploads removed (at once, by their owner, by the sweep), and one upload
giving at most one version under concurrent submits on real PostgreSQL."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from szbench.algorithms import image_check
from szbench.config import get_settings
from szbench.evaluations import service as evaluation_service
from szbench.models import Algorithm, AlgorithmVersion, Upload, User
from szbench.uploads import service as uploads
from tests.platform import factories as f
from tests.platform.images import docker_save, member


@pytest.fixture
def smoke_requests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    monkeypatch.setattr(
        evaluation_service, "request_smoke_test", lambda session, version: calls.append(version.id)
    )
    return calls


def _open(client: TestClient, h: dict[str, str], size: int, name: str = "a.tar") -> dict:
    r = client.post("/api/v1/uploads", headers=h, json={"filename": name, "size_bytes": size})
    return {"status": r.status_code, **r.json()}


def _setting(settings_env: pytest.MonkeyPatch, name: str, value: object) -> None:
    settings_env.setenv(name, str(value))
    get_settings.cache_clear()


def _part(upload_id: str) -> Path:
    return get_settings().effective_uploads_dir / "sessions" / f"{upload_id}.part"


def _age(db_session: Session, upload_id: str, seconds: float) -> None:
    row = db_session.get_one(Upload, upload_id)
    row.created_at = datetime.now(UTC) - timedelta(seconds=seconds)
    db_session.flush()


def _refused_ago(db_session: Session, upload_id: str, seconds: float) -> None:
    row = db_session.get_one(Upload, upload_id)
    row.refused_at = datetime.now(UTC) - timedelta(seconds=seconds)
    db_session.flush()


# --- per-user caps ------------------------------------------------------------------------


def test_open_sessions_are_capped_per_user(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    _setting(settings_env, "SZBENCH_UPLOAD_MAX_OPEN_SESSIONS", 2)
    alice, bob = f.user(db_session), f.user(db_session)
    ha, hb = f.headers(db_session, alice), f.headers(db_session, bob)
    first = _open(client, ha, 10)
    assert _open(client, ha, 10)["status"] == 201
    third = _open(client, ha, 10)
    assert third["status"] == 429
    assert third["error"] == "QuotaExceeded"
    assert "SZBENCH_UPLOAD_MAX_OPEN_SESSIONS=2" in third["detail"]
    assert _open(client, hb, 10)["status"] == 201  # another user's count is their own
    # The user at the cap can see which sessions hold it (their own only).
    listed = client.get("/api/v1/uploads", headers=ha).json()
    assert listed["total"] == 2
    assert first["id"] in {u["id"] for u in listed["items"]}
    assert "GET /api/v1/uploads" in third["detail"]
    # Deleting one frees its place.
    assert client.delete(f"/api/v1/uploads/{first['id']}", headers=ha).status_code == 204
    assert _open(client, ha, 10)["status"] == 201


def test_declared_bytes_are_capped_per_user(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    _setting(settings_env, "SZBENCH_UPLOAD_MAX_OPEN_BYTES", 100)
    h = f.headers(db_session, f.user(db_session))
    assert _open(client, h, 60)["status"] == 201
    over = _open(client, h, 41)
    assert over["status"] == 429
    assert "101 bytes" in over["detail"]
    assert "SZBENCH_UPLOAD_MAX_OPEN_BYTES" in over["detail"]
    assert _open(client, h, 40)["status"] == 201


def test_concurrent_opens_against_the_session_cap_accept_exactly_the_cap(
    pg_url: str, settings_env: pytest.MonkeyPatch
) -> None:
    """Six opens of one user released together, each in its own transaction on PostgreSQL,
    against a cap of two: the user-row lock decides them one after the other."""
    from szbench import db
    from szbench.errors import QuotaExceeded

    n, cap = 6, 2
    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    _setting(settings_env, "SZBENCH_UPLOAD_MAX_OPEN_SESSIONS", cap)
    db.reset_engine()
    with db.session_scope() as s:
        user_id = f.user(s).id
    start = threading.Barrier(n, timeout=30)
    outcomes: list[str] = []

    def open_one() -> None:
        try:
            with db.session_scope() as s:
                user = s.get_one(User, user_id)
                start.wait()
                uploads.create_upload(s, user, filename="a.tar", size_bytes=10)
            outcomes.append("opened")
        except QuotaExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=open_one) for _ in range(n)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes) == ["opened"] * cap + ["refused"] * (n - cap)
        with db.session_scope() as s:
            opened = s.scalar(select(func.count(Upload.id)).where(Upload.owner_id == user_id))
        assert opened == cap
    finally:
        with db.session_scope() as s:
            s.execute(delete(Upload).where(Upload.owner_id == user_id))
            s.execute(delete(User).where(User.id == user_id))
        db.reset_engine()


def test_expired_sessions_count_no_more_and_are_swept_on_the_next_open(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    _setting(settings_env, "SZBENCH_UPLOAD_MAX_OPEN_SESSIONS", 1)
    h = f.headers(db_session, f.user(db_session))
    old = _open(client, h, 10)
    _age(db_session, old["id"], get_settings().upload_session_ttl_s + 60)
    assert _open(client, h, 10)["status"] == 201
    assert db_session.get(Upload, old["id"]) is None
    assert not _part(old["id"]).exists()


# --- Content-Range ------------------------------------------------------------------------


def test_content_range_is_checked_against_the_body_and_the_declared_size(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    h = f.headers(db_session, f.user(db_session))
    upload = _open(client, h, 30)
    url = f"/api/v1/uploads/{upload['id']}"

    def put(header: str, body: bytes) -> tuple[int, str]:
        r = client.put(url, headers={**h, "Content-Range": header}, content=body)
        return r.status_code, r.json().get("detail", "")

    # A 30-byte body under a 10-byte range: refused, nothing kept.
    status, detail = put("bytes 0-9/30", b"x" * 30)
    assert status == 400
    assert "Content-Range" in detail
    assert "10 bytes" in detail
    # A body shorter than its range: refused too.
    status, detail = put("bytes 0-19/30", b"x" * 10)
    assert (status, "Content-Range" in detail) == (400, True)
    assert "has 10 bytes" in detail
    # A range past the declared size (with an unknown total).
    status, detail = put("bytes 0-39/*", b"x" * 40)
    assert status == 400
    assert "past the declared size 30" in detail
    assert client.get(url, headers=h).json()["offset"] == 0
    # Exact ranges are accepted.
    assert put("bytes 0-9/30", b"a" * 10)[0] == 200
    assert put("bytes 10-29/30", b"b" * 20)[0] == 200
    assert client.get(url, headers=h).json()["complete"] is True
    assert _part(upload["id"]).read_bytes() == b"a" * 10 + b"b" * 20


# --- refused and expired uploads ------------------------------------------------------------


def test_a_refused_upload_loses_its_bytes_at_once(
    client: TestClient, db_session: Session, tmp_path: Path, smoke_requests: list[int]
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar"
    docker_save(archive, arch="arm64")
    data = archive.read_bytes()
    upload = _open(client, h, len(data))
    url = f"/api/v1/uploads/{upload['id']}"
    assert client.put(url, headers=h, params={"offset": 0}, content=data).status_code == 200
    submit = {"version": "1", "upload_id": upload["id"]}
    r = client.post(f"/api/v1/algorithms/{algo.id}/versions", headers=h, json=submit)
    assert r.status_code == 422
    assert not _part(upload["id"]).exists()
    answer = client.get(url, headers=h).json()
    assert answer["state"] == "refused"
    # Submitting it again says why it was refused, and that its bytes are gone.
    r = client.post(f"/api/v1/algorithms/{algo.id}/versions", headers=h, json=submit)
    assert r.status_code == 409
    assert "linux/arm64" in r.json()["detail"]
    assert "start a new upload" in r.json()["detail"]
    assert client.put(url, headers=h, params={"offset": 0}, content=b"x").status_code == 409
    assert smoke_requests == []


def test_refused_uploads_count_against_their_uploader_for_a_while(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    settings_env: pytest.MonkeyPatch,
    smoke_requests: list[int],
) -> None:
    """Each refusal cost the API the reading of an archive: it holds one of the uploader's
    open sessions for uploads.REFUSAL_MEMORY_S, and deleting it does not free it."""
    _setting(settings_env, "SZBENCH_UPLOAD_MAX_OPEN_SESSIONS", 2)
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar"
    docker_save(archive, arch="arm64")
    data = archive.read_bytes()
    refused = []
    for i in range(2):
        upload = _open(client, h, len(data))
        assert upload["status"] == 201, upload
        client.put(f"/api/v1/uploads/{upload['id']}", headers=h, params={"offset": 0}, content=data)
        r = client.post(
            f"/api/v1/algorithms/{algo.id}/versions",
            headers=h,
            json={"version": str(i), "upload_id": upload["id"]},
        )
        assert r.status_code == 422, r.text
        refused.append(upload["id"])
    again = _open(client, h, len(data))
    assert again["status"] == 429, again
    assert "2 recently refused uploads" in again["detail"]
    assert "a refused one counts for 3600 s after its refusal" in again["detail"]
    gone = client.delete(f"/api/v1/uploads/{refused[0]}", headers=h)
    assert gone.status_code == 409
    assert "counts against your open uploads until" in gone.json()["detail"]
    assert _open(client, h, len(data))["status"] == 429
    # Once the first refusal is forgotten, its place is free again.
    _refused_ago(db_session, refused[0], uploads.REFUSAL_MEMORY_S + 1)
    assert _open(client, h, len(data))["status"] == 201
    assert db_session.get(Upload, refused[0]) is None
    assert smoke_requests == []


def test_an_archive_over_a_limit_is_refused_with_413_naming_the_setting(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    settings_env: pytest.MonkeyPatch,
    smoke_requests: list[int],
) -> None:
    settings_env.setattr(image_check, "ARCHIVE_MAX_MEMBERS", 20)
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar.gz"
    docker_save(archive, gzip=True, extra=[member(f"pad/{i}") for i in range(50)])
    data = archive.read_bytes()
    upload = _open(client, h, len(data), name="img.tar.gz")
    client.put(f"/api/v1/uploads/{upload['id']}", headers=h, params={"offset": 0}, content=data)
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload["id"]},
    )
    assert r.status_code == 413
    assert r.json()["error"] == "PayloadTooLarge"
    assert "more than 20 members (limit ARCHIVE_MAX_MEMBERS)" in r.json()["detail"]
    assert not _part(upload["id"]).exists()
    versions = select(func.count(AlgorithmVersion.id)).where(
        AlgorithmVersion.algorithm_id == algo.id
    )
    assert db_session.scalar(versions) == 0
    assert smoke_requests == []


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_with_413_at_the_default_limits(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    settings_env: pytest.MonkeyPatch,
    smoke_requests: list[int],
) -> None:
    """Issue 21 point 3: a small upload whose image expands about 1000 times is refused by
    the expansion ratio (every absolute default would let it through)."""
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar.gz"
    docker_save(archive, gzip=True, layers=[[(member("app/zeros.bin"), bytes(160 * 1024**2))]])
    data = archive.read_bytes()
    assert len(data) < 1024**2
    upload = _open(client, h, len(data), name="img.tar.gz")
    client.put(f"/api/v1/uploads/{upload['id']}", headers=h, params={"offset": 0}, content=data)
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload["id"]},
    )
    assert r.status_code == 413
    assert r.json()["error"] == "PayloadTooLarge"
    assert "limit ARCHIVE_MAX_EXPANSION_RATIO" in r.json()["detail"]
    assert smoke_requests == []


def test_an_expired_upload_can_be_deleted_by_its_owner_only(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    alice, bob = f.user(db_session), f.user(db_session)
    ha, hb = f.headers(db_session, alice), f.headers(db_session, bob)
    upload = _open(client, ha, 10)
    url = f"/api/v1/uploads/{upload['id']}"
    client.put(url, headers=ha, params={"offset": 0}, content=b"12345")
    _age(db_session, upload["id"], get_settings().upload_session_ttl_s + 60)
    assert "expired" in client.get(url, headers=ha).json()["detail"]
    assert client.put(url, headers=ha, params={"offset": 5}, content=b"6").status_code == 404
    assert client.delete(url, headers=hb).status_code == 404
    assert client.delete(url, headers=ha).status_code == 204
    assert db_session.get(Upload, upload["id"]) is None
    assert not _part(upload["id"]).exists()


def test_the_sweep_removes_expired_refused_and_stray_uploads_only(
    db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    user = f.user(db_session)
    fresh = uploads.create_upload(db_session, user, filename="fresh.tar", size_bytes=10)
    expired = uploads.create_upload(db_session, user, filename="old.tar", size_bytes=10)
    refused = uploads.create_upload(db_session, user, filename="bad.tar", size_bytes=10)
    for upload in (fresh, expired, refused):
        _part(upload.id).write_bytes(b"0123456789")
    ttl = get_settings().upload_session_ttl_s
    uploads.refuse_upload(db_session, refused.id, "not an image")
    # A refusal is kept (counting against its owner) until it is forgotten.
    assert uploads.sweep(db_session).refused == 0
    assert db_session.get(Upload, refused.id) is not None
    _refused_ago(db_session, refused.id, uploads.REFUSAL_MEMORY_S + 60)
    _age(db_session, expired.id, ttl + 60)
    sessions = _part(fresh.id).parent
    # Files of no session: one from before the table (metadata beside it), old; one new.
    old_stray = [sessions / ("a" * 32 + ".part"), sessions / ("a" * 32 + ".json")]
    for path in old_stray:
        path.write_bytes(b"x" * 100)
        os.utime(path, (time.time() - ttl - 60,) * 2)
    young_stray = sessions / ("b" * 32 + ".part")
    young_stray.write_bytes(b"y")

    report = uploads.sweep(db_session)

    assert (report.expired, report.refused, report.stray_files) == (1, 1, 2)
    assert report.bytes_freed == 10 + 200  # the refused one's bytes went at once
    left = set(db_session.scalars(select(Upload.id).where(Upload.owner_id == user.id)))
    assert left == {fresh.id}
    assert _part(fresh.id).exists()
    assert not _part(expired.id).exists()
    assert not any(path.exists() for path in old_stray)
    assert young_stray.exists()  # may be a session being opened right now
    assert uploads.sweep(db_session).expired == 0


def _sqlite(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> str:
    from szbench import db, migrate

    url = f"sqlite:///{tmp_path / 'sweep.sqlite3'}"
    migrate.upgrade(url)
    settings_env.setenv("SZBENCH_DATABASE_URL", url)
    get_settings.cache_clear()
    db.reset_engine()
    return url


def _expired_and_fresh() -> tuple[str, str]:
    from szbench import db

    with db.session_scope() as s:
        user = f.user(s)
        old = uploads.create_upload(s, user, filename="old.tar", size_bytes=10).id
        new = uploads.create_upload(s, user, filename="new.tar", size_bytes=10).id
        s.get_one(Upload, old).created_at = datetime.now(UTC) - timedelta(days=30)
    return old, new


def _ids() -> set[str]:
    from szbench import db

    with db.session_scope() as s:
        return set(s.scalars(select(Upload.id)))


def test_the_served_api_sweeps_at_start_up(
    settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from szbench.app import create_app
    from szbench.uploads.sweeper import install_upload_sweeper

    _sqlite(settings_env, tmp_path)
    old, new = _expired_and_fresh()
    app = create_app()
    install_upload_sweeper(app, 3600)
    with TestClient(app):
        deadline = time.monotonic() + 20
        while old in _ids() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ids() == {new}
    assert not _part(old).exists()


def test_the_sweep_from_the_cli(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from szbench.cli.main import app

    _sqlite(settings_env, tmp_path)
    _, new = _expired_and_fresh()
    result = CliRunner().invoke(app, ["upload", "sweep", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "expired": 1,
        "refused": 0,
        "stray_files": 0,
        "bytes_freed": 0,
    }
    assert _ids() == {new}


# --- one upload, one version ----------------------------------------------------------------


def test_concurrent_submits_of_one_upload_make_one_version(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, smoke_requests: list[int]
) -> None:
    """Every submit passes the archive check before any records its version (a barrier in
    the check): only the atomic claim of the upload row keeps them to one version."""
    import anyio
    import httpx

    from szbench import db
    from szbench.algorithms import service as algorithms
    from szbench.app import create_app

    n = 6
    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    get_settings.cache_clear()
    db.reset_engine()
    archive = tmp_path / "img.tar"
    image_id = docker_save(archive)
    with db.session_scope() as s:
        owner = f.user(s)
        _, secret = f.token(s, owner)
        owner_id = owner.id
        algo_id = f.algorithm(s, owner, name="raced").id
        upload_id = uploads.import_file(s, owner, archive).id
    all_checked = threading.Barrier(n, timeout=30)
    real_check = algorithms.check_image_archive

    def gated_check(path: Path, **kw: object) -> object:
        info = real_check(path, **kw)  # type: ignore[arg-type]
        all_checked.wait()
        return info

    settings_env.setattr(algorithms, "check_image_archive", gated_check)
    headers = {"Authorization": f"Bearer {secret}"}

    async def main() -> list[tuple[int, dict]]:
        answers: list[tuple[int, dict]] = []
        transport = httpx.ASGITransport(app=create_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:

            async def submit(i: int) -> None:
                r = await client.post(
                    f"/api/v1/algorithms/{algo_id}/versions",
                    headers=headers,
                    json={"version": f"1.{i}", "upload_id": upload_id},
                )
                answers.append((r.status_code, r.json()))

            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(submit, i)
        return answers

    try:
        answers = anyio.run(main)
        statuses = sorted(status for status, _ in answers)
        assert statuses == [201] + [409] * (n - 1), answers
        assert all(
            "already been submitted" in body["detail"] for status, body in answers if status == 409
        )
        with db.session_scope() as s:
            versions = list(
                s.scalars(select(AlgorithmVersion).where(AlgorithmVersion.algorithm_id == algo_id))
            )
            assert [v.image_digest for v in versions] == [image_id]
            assert s.get(Upload, upload_id) is None
        stored = get_settings().effective_uploads_dir / str(versions[0].tarball_path)
        assert stored.read_bytes() == archive.read_bytes()
        assert len(smoke_requests) == 1
    finally:
        with db.session_scope() as s:
            s.execute(delete(AlgorithmVersion).where(AlgorithmVersion.algorithm_id == algo_id))
            s.execute(delete(Algorithm).where(Algorithm.id == algo_id))
            s.execute(delete(Upload).where(Upload.owner_id == owner_id))
            s.execute(delete(User).where(User.id == owner_id))
        db.reset_engine()


def test_a_submit_that_finds_the_bytes_taken_is_a_conflict(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    smoke_requests: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A concurrent submit that won moved the bytes before this one read them: a conflict,
    not an unreadable archive (and the upload is not marked refused)."""
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = f.algorithm(db_session, owner)
    archive = tmp_path / "img.tar"
    docker_save(archive)
    data = archive.read_bytes()
    upload = _open(client, h, len(data))
    client.put(f"/api/v1/uploads/{upload['id']}", headers=h, params={"offset": 0}, content=data)
    real_completed_file = uploads.completed_file

    def taken_meanwhile(session_: uploads.UploadSession) -> Path:
        path = real_completed_file(session_)
        path.rename(tmp_path / "taken.tar")  # the winner's move, between read and check
        return path

    monkeypatch.setattr(uploads, "completed_file", taken_meanwhile)
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload["id"]},
    )
    assert r.status_code == 409
    assert "already been submitted" in r.json()["detail"]
    assert db_session.get_one(Upload, upload["id"]).state == "open"
