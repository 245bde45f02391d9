"""An adversarial image on held-out data: nothing it reads reaches anyone but admins.

End to end on the real parts: a real Docker engine runs ``tests/worker/images/leaker``
through the pipeline (its smoke test on the public sample, which it passes, then the full
evaluation it queues on held-out data); the app (real PostgreSQL) is then read through the
API, the downloads and the web pages as its owner, anonymously once published, and as an
admin. Each held-out recording's EDF header carries a secret and the mode the leaker picks
from it (bad output header, exit code, output duration, no output, timeout, valid output).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from szbench import db, queue
from szbench.auth import service as auth
from szbench.config import get_settings
from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.db import session_scope
from szbench.disclosure.decision import OUTCOME_TEXT
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    Role,
    RunOutcome,
    User,
    VersionStatus,
)
from szbench_worker import pipeline

from ._pipeline_factories import Rec, make_prepared_dataset, truncate_all

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MODES = ("header", "exit", "duration", "nooutput", "timeout", "ok")
HELD = [
    Rec("sub-01", "run-00", 600, ((100, 40),)),
    Rec("sub-01", "run-01", 600, ((300, 20),)),
    Rec("sub-02", "run-00", 600, ((300, 60), (500, 20))),
    Rec("sub-02", "run-01", 600, ()),
    Rec("sub-03", "run-00", 600, ((50, 30),)),
    Rec("sub-03", "run-01", 600, ((1, 30),)),
]
EXPECTED = {
    "header": RunOutcome.INVALID_OUTPUT,
    "exit": RunOutcome.CRASHED,
    "duration": RunOutcome.INVALID_OUTPUT,
    "nooutput": RunOutcome.NO_OUTPUT,
    "timeout": RunOutcome.TIMEOUT,
    "ok": RunOutcome.OK,
}


def _set_patient(edf: Path, patient: str) -> None:
    raw = bytearray(edf.read_bytes())
    raw[8:88] = patient.ljust(80).encode("ascii")
    edf.write_bytes(bytes(raw))


def _prepared(root: Path, recs: list[Rec], patients: list[str]) -> Path:
    """A prepared dataset whose EDF headers carry ``patients`` (checksums kept right)."""
    make_prepared_dataset(root, recs)
    manifest = json.loads((root / "manifest.json").read_text())
    for entry, patient in zip(manifest["recordings"], patients, strict=True):
        edf = root / entry["eeg_path"]
        _set_patient(edf, patient)
        entry["checksum"] = "sha256:" + hashlib.sha256(edf.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


@dataclass
class Leak:
    client: TestClient
    owner: dict[str, str]
    admin: dict[str, str]
    algorithm_id: int
    evaluation_id: int
    secrets: dict[str, str]  # mode -> the secret in that recording's header
    exit_code: int
    encoded_duration: str

    def forbidden_texts(self) -> list[str]:
        return ["LEAK", *self.secrets.values(), self.encoded_duration]


@pytest.fixture
def leak(
    pg_url: str,
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
    test_images: dict[str, str],
    docker_client: Any,
) -> Iterator[Leak]:
    for key, value in {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_WORKER_HOST": f"leak-test-{uuid.uuid4().hex[:8]}",
        "SZBENCH_SMOKE_TEST_DATASET": "leak-sample",
        "SZBENCH_RESULTS_FRESH_S": "0",
        "SZBENCH_LEADERBOARD_FRESH_S": "0",
        "SZBENCH_TOKEN_FRESH_S": "0",
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
    }.items():
        settings_env.setenv(key, value)
    get_settings.cache_clear()
    db.reset_engine()
    from szbench.app import create_app
    from szbench_worker.runner_backend import make_runner

    sent: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    pipeline.set_dependencies(
        pipeline.Dependencies(
            runner=make_runner(get_settings()), resolve_image=lambda v: v.image_digest
        )
    )
    secrets = {mode: uuid.uuid4().hex[:12] for mode in MODES}
    sample = _prepared(tmp_path / "sample", [Rec("sub-90", "run-00", 600)], ["X X X X PUBLIC"])
    held = _prepared(tmp_path / "held", HELD, [f"X X X X LEAK-{m}-{secrets[m]}" for m in MODES])
    try:
        with session_scope() as session:
            owner = User(email="leaker@example.org", name="Leaker")
            admin = User(email="admin@example.org", name="Admin", role=Role.ADMIN)
            session.add_all([owner, admin])
            phase = Phase(slug="leak-phase", hidden=True)
            session.add(phase)
            session.flush()
            algorithm = Algorithm(owner_id=owner.id, name="leaker")
            session.add(algorithm)
            session.flush()
            version = AlgorithmVersion(
                algorithm_id=algorithm.id,
                version="1",
                phase_id=phase.id,
                image_digest=test_images["leaker"],
                image_reference="szbench-test/leaker:latest",
                status=VersionStatus.PENDING,
                created_by_id=owner.id,
            )
            session.add(version)
            sample_ds = create_dataset(
                session, slug="leak-sample", kind=DatasetKind.PUBLIC_SAMPLE, confirm_public=True
            )
            register_dataset_version(session, sample_ds, version="1", prepared_path=sample)
            held_ds = create_dataset(session, slug="leak-held", run_limits={"timeout_s": 3})
            register_dataset_version(session, held_ds, version="1", prepared_path=held)
            session.flush()
            _, owner_secret = auth.create_token(session, owner, name="t")
            _, admin_secret = auth.create_token(session, admin, name="t")
            version_id, algorithm_id = version.id, algorithm.id
        # The smoke test on the public sample passes and queues the held-out evaluation.
        outcome = pipeline.smoke_test(version_id)
        assert outcome.status == VersionStatus.ACTIVE, outcome
        _deliver(sent)
        with session_scope() as session:
            evaluation = session.scalars(
                select(Evaluation).where(
                    Evaluation.algorithm_version_id == version_id,
                    Evaluation.kind == EvaluationKind.FULL,
                )
            ).one()
            assert evaluation.status == EvaluationStatus.DONE, evaluation.message
            assert not evaluation.published
            evaluation_id = evaluation.id
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            yield Leak(
                client=client,
                owner={"Authorization": f"Bearer {owner_secret}"},
                admin={"Authorization": f"Bearer {admin_secret}"},
                algorithm_id=algorithm_id,
                evaluation_id=evaluation_id,
                secrets=secrets,
                exit_code=64 + sum(secrets["exit"].encode()) % 64,
                encoded_duration=str(100_000 + int(secrets["duration"][:4], 16)),
            )
    finally:
        queue.set_sender(None)
        pipeline.set_dependencies(None)
        with session_scope() as session:
            truncate_all(session)


DISPATCH: dict[str, Callable[..., Any]] = {
    queue.TASK_START_EVALUATION: lambda evaluation_id: pipeline.start_evaluation(evaluation_id),
    queue.TASK_RUN_RECORDING: lambda run_id: pipeline.run_recording(run_id),
    queue.TASK_FINALIZE: lambda evaluation_id: pipeline.finalize_evaluation(evaluation_id),
}


def _deliver(sent: list[tuple[str, str, dict[str, Any]]]) -> None:
    for _ in range(100):
        if not sent:
            return
        name, _queue, kwargs = sent.pop(0)
        DISPATCH[name](**kwargs)
    raise AssertionError("tasks keep enqueueing each other")


def _reads(leak: Leak, headers: dict[str, str]) -> dict[str, Any]:
    """Every read of the evaluation a viewer has: API, downloads and web pages."""
    e, a = leak.evaluation_id, leak.algorithm_id
    paths = [
        f"/api/v1/evaluations/{e}",
        f"/api/v1/evaluations/{e}/progress",
        f"/api/v1/evaluations/{e}/result",
        f"/api/v1/evaluations/{e}/subjects",
        f"/api/v1/evaluations/{e}/subjects/download?format=json",
        f"/api/v1/evaluations/{e}/recordings",
        f"/api/v1/evaluations/{e}/recordings/download?format=csv",
        f"/api/v1/evaluations?algorithm_id={a}",
        f"/api/v1/algorithms/{a}/results",
        "/api/v1/leaderboards/leak-held",
        f"/evaluations/{e}",
        f"/algorithms/{a}?evaluation={e}",
    ]
    if headers:
        paths += ["/submissions", "/submissions/progress.json"]
    return {p: leak.client.get(p, headers=headers) for p in paths}


def _assert_nothing_leaks(leak: Leak, reads: dict[str, Any], who: str) -> None:
    for path, response in reads.items():
        assert response.status_code < 500, (who, path, response.text)
        for text in leak.forbidden_texts():
            assert text not in response.text, (who, path, text)
        # The exit code and the outcome of each run are channels too.
        assert f"code {leak.exit_code}" not in response.text, (who, path)
        assert f'"exit_code":{leak.exit_code}' not in response.text.replace(" ", ""), (who, path)


def _outcome_words(text: str) -> set[str]:
    words = {"invalid_output", "invalid output", "no_output", "no output", "timeout", "crashed"}
    return {w for w in words if w in text}


def test_held_out_side_channels_reach_only_admins(leak: Leak) -> None:
    client, e = leak.client, leak.evaluation_id

    # --- the owner, at the default disclosure (aggregate) ---------------------------------
    owner_reads = _reads(leak, leak.owner)
    _assert_nothing_leaks(leak, owner_reads, "owner")
    detail = owner_reads[f"/api/v1/evaluations/{e}"].json()
    # An evaluation-level count of failed runs, nothing per run.
    assert detail["progress"]["outcomes"] == {"ok": 1, "failed": 5}
    assert detail["provenance"]["wall_time_s"] is None
    assert detail["provenance"]["peak_memory_bytes"] is None
    for path in (
        f"/api/v1/evaluations/{e}/subjects",
        f"/api/v1/evaluations/{e}/subjects/download?format=json",
        f"/api/v1/evaluations/{e}/recordings",
        f"/api/v1/evaluations/{e}/recordings/download?format=csv",
    ):
        assert owner_reads[path].status_code == 403, path
        assert "aggregate" in owner_reads[path].json()["detail"]
    for path in (f"/evaluations/{e}", f"/algorithms/{leak.algorithm_id}?evaluation={e}"):
        assert owner_reads[path].status_code == 200, path
        assert _outcome_words(owner_reads[path].text) == set(), path
    snapshot = owner_reads["/submissions/progress.json"].json()
    (mine,) = [x for x in snapshot["evaluations"] if x["id"] == e]
    assert mine["outcomes"] == {"ok": 1, "failed": 5}
    assert _outcome_words(owner_reads["/submissions"].text) == set()

    # --- the admin sees everything -----------------------------------------------------------
    runs = client.get(f"/api/v1/evaluations/{e}/recordings", headers=leak.admin).json()["items"]
    assert {r["outcome"] for r in runs} == {o.value for o in EXPECTED.values()}
    everything = json.dumps(runs)
    for secret in leak.secrets.values():
        assert secret in everything  # in the stdout/stderr of every mode's admin log
    assert leak.exit_code in {r["exit_code"] for r in runs}
    assert any(leak.secrets["header"] in r["submitter_message"] for r in runs)
    assert any(leak.encoded_duration in r["submitter_message"] for r in runs)
    admin_page = client.get(f"/evaluations/{e}", headers=leak.admin).text
    assert leak.secrets["header"] in admin_page

    # --- anonymous, once an admin publishes the phase -----------------------------------------
    assert client.get(f"/api/v1/evaluations/{e}").status_code == 404  # hidden phase
    r = client.post("/api/v1/phases/leak-phase/publish", headers=leak.admin)
    assert r.status_code == 200, r.text
    anonymous_reads = _reads(leak, {})
    assert anonymous_reads[f"/api/v1/evaluations/{e}"].status_code == 200
    _assert_nothing_leaks(leak, anonymous_reads, "anonymous")
    assert anonymous_reads[f"/api/v1/evaluations/{e}/recordings"].status_code == 401
    assert _outcome_words(anonymous_reads[f"/evaluations/{e}"].text) == set()

    # --- per-recording disclosure (e.g. after the phase): outcomes, still no run bytes --------
    r = client.patch(
        "/api/v1/datasets/leak-held", json={"disclosure": "recording"}, headers=leak.admin
    )
    assert r.status_code == 200, r.text
    for who, headers in (("owner", leak.owner), ("anonymous", {})):
        reads = _reads(leak, headers)
        _assert_nothing_leaks(leak, reads, who)
        items = reads[f"/api/v1/evaluations/{e}/recordings"].json()["items"]
        by_outcome = {r["outcome"]: r for r in items}
        assert set(by_outcome) == {o.value for o in EXPECTED.values()}
        for item in items:
            assert item["submitter_message"] == OUTCOME_TEXT[RunOutcome(item["outcome"])]
            assert item["exit_code"] is None
            assert item["admin_log"] is None
            assert item["provenance"]["wall_time_s"] is None
        # The reference facts are disclosed at this level.
        assert {r["event_ref_true"] for r in items} >= {1, 2}
        assert reads[f"/api/v1/evaluations/{e}/recordings/download?format=csv"].status_code == 200
        assert "invalid output" in reads[f"/evaluations/{e}"].text
