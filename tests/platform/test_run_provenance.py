"""Issue 28.3 and 28.4: what a run's provenance tells a non-admin.

A held-out recording's checksum is the key of the worker fetch route and confirms a guessed
file: admins only. Worker host names are the platform's infrastructure: admins only. GPU
models and drivers appear as the runs are stored, so a coarse viewer gets them once the
evaluation is over.
"""

from __future__ import annotations

import csv
import io

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, Disclosure, EvaluationStatus, Role
from tests.platform import factories as f
from tests.web.conftest import PASSWORD, sign_in

CHECKSUM = "c0ffee" * 10 + "abcd"


def test_held_out_recording_checksums_and_hosts_are_for_admins(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    owner, admin = f.user(s), f.user(s, Role.ADMIN)
    # The recording level discloses per-recording results: the runs are listed to anyone.
    held = f.dataset_version(s, f.dataset(s, slug="held", disclosure=Disclosure.RECORDING))
    ev = f.evaluation(s, f.version(s, f.algorithm(s, owner)), held, recordings_total=1)
    f.run(s, ev, f.recording(s, held, checksum=CHECKSUM), worker_host="gpu-host-7")
    f.result(s, ev, {"01": {"event_f1": 0.5}})
    urls = [
        f"/api/v1/evaluations/{ev.id}/recordings",
        f"/api/v1/evaluations/{ev.id}/recordings/download?format=json",
        f"/api/v1/evaluations/{ev.id}/recordings/download?format=csv",
        f"/api/v1/evaluations/{ev.id}",
        f"/api/v1/evaluations/{ev.id}/result",
        "/api/v1/leaderboards/held",
        f"/evaluations/{ev.id}",
    ]
    for headers in ({}, f.headers(s, owner), f.headers(s, f.user(s))):
        for url in urls:
            answer = client.get(url, headers=headers)
            assert answer.status_code == 200, (url, answer.text[:200])
            assert CHECKSUM not in answer.text, url
            assert "gpu-host-7" not in answer.text, url
    admin_headers = f.headers(s, admin)
    runs = client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=admin_headers).json()
    (run,) = runs["items"]
    assert run["provenance"]["recording_checksum"] == CHECKSUM
    assert run["provenance"]["worker_host"] == "gpu-host-7"
    rows = list(
        csv.DictReader(
            io.StringIO(
                client.get(
                    f"/api/v1/evaluations/{ev.id}/recordings/download", headers=admin_headers
                ).text
            )
        )
    )
    assert rows[0]["worker_host"] == "gpu-host-7"
    detail = client.get(f"/api/v1/evaluations/{ev.id}", headers=admin_headers).json()
    assert detail["provenance"]["worker_hosts"] == ["gpu-host-7"]


def test_a_public_samples_checksums_stay_public_and_its_hosts_do_not(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    owner = f.user(s)
    sample = f.dataset_version(s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample"))
    ev = f.evaluation(s, f.version(s, f.algorithm(s, owner)), sample, recordings_total=1)
    f.run(s, ev, f.recording(s, sample, checksum=CHECKSUM), worker_host="gpu-host-7")
    body = client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=f.headers(s, owner)).json()
    (run,) = body["items"]
    assert run["provenance"]["recording_checksum"] == CHECKSUM
    assert run["provenance"]["worker_host"] is None


def test_gpu_models_reach_a_coarse_viewer_once_the_evaluation_is_over(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    owner = f.user(s, email="gpu-owner@example.org", password=PASSWORD)
    held = f.dataset_version(s, f.dataset(s, slug="held"))
    ev = f.evaluation(
        s, f.version(s, f.algorithm(s, owner)), held,
        status=EvaluationStatus.RUNNING, recordings_total=2, recordings_done=1,
    )  # fmt: skip
    f.run(s, ev, f.recording(s, held), gpu_model="NVIDIA H200", gpu_driver="580.1")
    headers = f.headers(s, owner)
    running = client.get(f"/api/v1/evaluations/{ev.id}", headers=headers).json()
    assert (running["provenance"]["gpu_models"], running["provenance"]["gpu_drivers"]) == ([], [])
    admin = client.get(f"/api/v1/evaluations/{ev.id}", headers=f.headers(s, f.user(s, Role.ADMIN)))
    assert admin.json()["provenance"]["gpu_models"] == ["NVIDIA H200"]
    sign_in(client, "gpu-owner@example.org")
    page = client.get(f"/evaluations/{ev.id}").text
    assert "H200" not in page
    assert "shown once the evaluation has finished" in page
    ev.status, ev.recordings_done = EvaluationStatus.DONE, 2
    s.flush()
    done = client.get(f"/api/v1/evaluations/{ev.id}", headers=headers).json()
    assert done["provenance"]["gpu_models"] == ["NVIDIA H200"]
    assert done["provenance"]["gpu_drivers"] == ["580.1"]
