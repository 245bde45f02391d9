"""The server-side steps after an upload's last byte (issue 29.11): asked for, the server
answers at once and checks (and pushes) in the background; a poll of the upload shows the
step and its bytes; the version then takes their result without reading the archive again.

Through the real app on PostgreSQL (the API's test client); the steps' thread is the real
one, joined by name instead of slept on. The big archive through the served API, the CLI
and the registry: tests/worker/test_big_image.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.algorithms import intake
from szbench.config import get_settings
from szbench.models import Upload, UploadState
from szbench.uploads import steps as recorded
from tests.platform import factories as f
from tests.platform.archive_family import craft
from tests.platform.images import docker_save, member

MiB = 1024**2


def _upload(client: TestClient, h: dict[str, str], data: bytes) -> str:
    r = client.post(
        "/api/v1/uploads", headers=h, json={"filename": "a.tar", "size_bytes": len(data)}
    )
    assert r.status_code == 201, r.text
    upload_id = str(r.json()["id"])
    r = client.put(f"/api/v1/uploads/{upload_id}", headers=h, params={"offset": 0}, content=data)
    assert r.json()["complete"], r.text
    return upload_id


def _join(upload_id: str) -> None:
    """Wait for the steps' thread of ``upload_id`` to end (it exists, or has ended)."""
    for thread in threading.enumerate():
        if thread.name == f"upload-steps-{upload_id}":
            thread.join(60)
            assert not thread.is_alive()


def _part(upload_id: str) -> Path:
    return get_settings().effective_uploads_dir / "sessions" / f"{upload_id}.part"


class _Gate:
    """Counts the real archive checks and can hold one after its first progress report,
    so that a test sees the steps while they run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: bool) -> None:
        self.calls = 0
        self.reported = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        real = intake.check_image_archive

        def check(path: Path, **kw: Any) -> Any:
            self.calls += 1
            told = kw.pop("progress")

            def progress(step: str, done: int, total: int) -> None:
                told(step, done, total)
                if done > 0:
                    self.reported.set()
                    assert self.release.wait(60)

            return real(path, progress=progress, **kw)

        monkeypatch.setattr(intake, "check_image_archive", check)


@pytest.fixture
def owner(db_session: Session, client: TestClient) -> tuple[dict[str, str], int]:
    user = f.user(db_session)
    h = f.headers(db_session, user)
    algo = client.post("/api/v1/algorithms", headers=h, json={"name": "big"}).json()
    return h, int(algo["id"])


def _archive(tmp_path: Path, mib: int = 4) -> tuple[bytes, str]:
    path = tmp_path / "algo.tar"
    image_id = docker_save(path, layers=[[(member("app/weights"), os.urandom(mib * MiB))]])
    return path.read_bytes(), image_id


def test_the_server_answers_at_once_and_the_version_takes_the_steps_result(
    client: TestClient,
    owner: tuple[dict[str, str], int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, algorithm_id = owner
    data, image_id = _archive(tmp_path)
    gate = _Gate(monkeypatch, hold=True)
    upload_id = _upload(client, h, data)
    versions = f"/api/v1/algorithms/{algorithm_id}/versions"

    started = client.post(f"/api/v1/uploads/{upload_id}/check", headers=h)
    assert started.status_code == 202, started.text
    assert started.json()["steps"]["running"] is True
    assert started.json()["steps"]["step"] == "checking"
    assert gate.reported.wait(60)
    polled = client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"]
    assert polled["step"] == "checking"
    assert polled["running"] is True
    assert 0 < polled["done_bytes"] < polled["total_bytes"] == len(data)
    # While it runs: asking again starts nothing more, a version waits for the steps.
    assert client.post(f"/api/v1/uploads/{upload_id}/check", headers=h).status_code == 202
    early = client.post(versions, headers=h, json={"version": "1", "upload_id": upload_id})
    assert early.status_code == 409
    assert "is being checked (checking," in early.json()["detail"]

    gate.release.set()
    _join(upload_id)
    done = client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"]
    assert done == {
        "step": "done",
        "done_bytes": done["done_bytes"],
        "total_bytes": len(data),
        "running": False,
        "detail": None,
        "image_digest": image_id,
    }
    created = client.post(versions, headers=h, json={"version": "1", "upload_id": upload_id})
    assert created.status_code == 201, created.text
    assert created.json()["image_digest"] == image_id
    assert gate.calls == 1  # the version took the steps' result
    assert not recorded.record_path(_part(upload_id)).exists()


def test_a_refusal_in_the_steps_deletes_the_bytes_and_refuses_the_upload(
    client: TestClient,
    db_session: Session,
    owner: tuple[dict[str, str], int],
    tmp_path: Path,
) -> None:
    h, algorithm_id = owner
    data = craft("exploit", tmp_path, ["x/victim:1", "x/new:1"]).path.read_bytes()
    upload_id = _upload(client, h, data)
    assert client.post(f"/api/v1/uploads/{upload_id}/check", headers=h).status_code == 202
    _join(upload_id)
    assert not _part(upload_id).exists()
    answer = client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()
    assert answer["state"] == "refused"
    assert answer["steps"]["step"] == "refused"
    assert "archive member 'd/manifest.json'" in answer["steps"]["detail"]
    db_session.expire_all()
    row = db_session.get(Upload, upload_id)
    assert row is not None
    assert row.state == UploadState.REFUSED
    assert "archive member 'd/manifest.json'" in row.refused_because
    version = client.post(
        f"/api/v1/algorithms/{algorithm_id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload_id},
    )
    assert version.status_code == 409
    assert "archive member 'd/manifest.json'" in version.json()["detail"]
    assert client.delete(f"/api/v1/uploads/{upload_id}", headers=h).status_code == 409


def test_interrupted_steps_start_again_and_a_failed_push_keeps_the_check(
    client: TestClient,
    owner: tuple[dict[str, str], int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings_env: pytest.MonkeyPatch,
) -> None:
    h, algorithm_id = owner
    data, image_id = _archive(tmp_path, mib=1)
    gate = _Gate(monkeypatch, hold=False)
    upload_id = _upload(client, h, data)
    part = _part(upload_id)
    # A process that died while checking: its record says checking, nobody holds the lock.
    recorded.write(part, recorded.Steps(step="checking", done_bytes=10, total_bytes=len(data)))
    steps = client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"]
    assert (steps["step"], steps["running"]) == ("interrupted", False)

    # Started again, with a registry that does not answer: the push fails, the check stays.
    settings_env.setenv("SZBENCH_REGISTRY", "127.0.0.1:9")
    get_settings.cache_clear()
    assert client.post(f"/api/v1/uploads/{upload_id}/check", headers=h).status_code == 202
    _join(upload_id)
    steps = client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"]
    assert steps["step"] == "failed"
    assert "the image registry did not take the image" in steps["detail"]
    assert "127.0.0.1" not in steps["detail"]  # the registry's address stays in the log
    assert steps["image_digest"] == image_id

    # Asked again once the registry is (here: no longer) needed: no second check.
    settings_env.setenv("SZBENCH_REGISTRY", "")
    get_settings.cache_clear()
    assert client.post(f"/api/v1/uploads/{upload_id}/check", headers=h).status_code == 202
    _join(upload_id)
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"]["step"] == "done"
    assert gate.calls == 1
    created = client.post(
        f"/api/v1/algorithms/{algorithm_id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload_id},
    )
    assert created.status_code == 201, created.text


def test_a_submit_without_the_steps_still_checks_in_the_request(
    client: TestClient, owner: tuple[dict[str, str], int], tmp_path: Path
) -> None:
    """Clients that never ask for the steps (scripts, older CLIs) submit as before."""
    h, algorithm_id = owner
    data, image_id = _archive(tmp_path, mib=1)
    upload_id = _upload(client, h, data)
    assert client.get(f"/api/v1/uploads/{upload_id}", headers=h).json()["steps"] is None
    created = client.post(
        f"/api/v1/algorithms/{algorithm_id}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload_id},
    )
    assert created.status_code == 201, created.text
    assert created.json()["image_digest"] == image_id
