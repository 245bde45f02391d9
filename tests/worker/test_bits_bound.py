"""What an adversarial image can carry out of held-out data through the released figures,
measured against the bound docs/security.md states (issue 20.3).

A real Docker engine runs ``tests/worker/images/leaker`` through the pipeline (its smoke test
on the public sample, then the held-out evaluation it queues). On one held-out recording it
reads a secret from the EDF header and encodes k = 9 bits of it as the seconds it marks as
seizure from the start (the ``bits`` mode): the exact pooled sample false-positive count
would carry them whole. The other recording gets no detection. The test then reads the
evaluation as its owner, a non-admin (result, leaderboard, download, the algorithm's
results), and decodes: for each of the 2**k secrets it scores the output the image would
write with the real scorer, releases the report as the platform does for that viewer, and
counts the distinct answers. log2 of that count is the most this image can tell per
evaluation; it must stay within the documented bound and below k. The same decoding on what
an admin reads (exact figures, pooled counts) recovers all k bits: the channel is real.
"""

from __future__ import annotations

import importlib.util
import json
import math
import uuid
from collections.abc import Iterator
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
from szbench.disclosure import bits as capacity
from szbench.disclosure import decision, release
from szbench.disclosure import facts as rule_facts
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Role,
    User,
    VersionStatus,
)
from szbench_scoring import (
    SCORER_VERSION,
    ScoringParams,
    aggregate,
    parse_annotations,
    score_recording,
)
from szbench_scoring.report import RecordingResult
from szbench_worker import pipeline
from szbench_worker.pipeline.report import report_dict

from ._pipeline_factories import Rec, truncate_all
from .test_side_channels import _deliver, _prepared

pytestmark = [pytest.mark.docker, pytest.mark.slow]

K = 9
SECRET = "0a7"  # its first 9 bits: 167 seconds
HELD = [
    # The seizure lies past anything the image marks (at most 511 s, tolerances included).
    Rec("sub-01", "run-00", 600, ((570.0, 20.0),)),
    Rec("sub-02", "run-00", 600, ((100.0, 40.0),)),
]
LEAKER = Path(__file__).resolve().parent / "images" / "leaker" / "run.py"
METRICS = ("sensitivity", "precision", "f1", "fp_rate")


def _encoder() -> Any:
    """The image's own encoder (its script, loaded as a module: one encoding, not a copy)."""
    spec = importlib.util.spec_from_file_location("leaker_run", LEAKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Bits:
    client: TestClient
    owner: dict[str, str]
    admin: dict[str, str]
    algorithm_id: int
    evaluation_id: int
    held: Path


@pytest.fixture
def bits(
    pg_url: str,
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
    test_images: dict[str, str],
    docker_client: Any,
) -> Iterator[Bits]:
    for key, value in {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_WORKER_HOST": f"bits-test-{uuid.uuid4().hex[:8]}",
        "SZBENCH_SMOKE_TEST_DATASET": "bits-sample",
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
    sample = _prepared(tmp_path / "sample", [Rec("sub-90", "run-00", 600)], ["X X X X PUBLIC"])
    patients = [f"X X X X LEAK-bits-{SECRET}{uuid.uuid4().hex[:6]}", "X X X X LEAK-quiet-0"]
    held = _prepared(tmp_path / "held", HELD, patients)
    try:
        with session_scope() as session:
            owner = User(email="bits@example.org", name="Bits")
            admin = User(email="bits-admin@example.org", name="Admin", role=Role.ADMIN)
            session.add_all([owner, admin])
            session.flush()
            algorithm = Algorithm(owner_id=owner.id, name="bits")
            session.add(algorithm)
            session.flush()
            version = AlgorithmVersion(
                algorithm_id=algorithm.id,
                version="1",
                image_digest=test_images["leaker"],
                image_reference="szbench-test/leaker:latest",
                status=VersionStatus.PENDING,
                created_by_id=owner.id,
            )
            session.add(version)
            sample_ds = create_dataset(
                session, slug="bits-sample", kind=DatasetKind.PUBLIC_SAMPLE, confirm_public=True
            )
            register_dataset_version(session, sample_ds, version="1", prepared_path=sample)
            held_ds = create_dataset(session, slug="bits-held")
            register_dataset_version(session, held_ds, version="1", prepared_path=held)
            session.flush()
            _, owner_secret = auth.create_token(session, owner, name="t")
            _, admin_secret = auth.create_token(session, admin, name="t")
            version_id, algorithm_id = version.id, algorithm.id
        assert pipeline.smoke_test(version_id).status == VersionStatus.ACTIVE
        _deliver(sent)
        with session_scope() as session:
            evaluation = session.scalars(
                select(Evaluation).where(
                    Evaluation.algorithm_version_id == version_id,
                    Evaluation.kind == EvaluationKind.FULL,
                )
            ).one()
            assert evaluation.status == EvaluationStatus.DONE, evaluation.message
            evaluation_id = evaluation.id
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            yield Bits(
                client=client,
                owner={"Authorization": f"Bearer {owner_secret}"},
                admin={"Authorization": f"Bearer {admin_secret}"},
                algorithm_id=algorithm_id,
                evaluation_id=evaluation_id,
                held=held,
            )
    finally:
        queue.set_sender(None)
        pipeline.set_dependencies(None)
        with session_scope() as session:
            truncate_all(session)


def _metrics(report: Any) -> dict[str, float | None]:
    out = {}
    for scoring, mean in (("event", report.event_mean), ("sample", report.sample_mean)):
        for name in METRICS:
            value = getattr(mean, name)
            out[f"{scoring}_{name}"] = None if math.isnan(value) else float(value)
    return out


def _answer(result: dict[str, Any]) -> str:
    """The figures of a /result answer, as a comparable text."""
    figures = {k: v for k, v in result.items() if k not in ("evaluation_id", "provenance")}
    return json.dumps(figures, sort_keys=True)


def _simulated(held: Path, view: decision.View) -> dict[str, list[int]]:
    """Each answer a viewer with ``view`` can get, and the secrets (0 to 2**K - 1) giving it:
    the image's outputs scored by the real scorer, the report stored as the pipeline stores
    it, released as the platform releases it."""
    encoder = _encoder()
    manifest = json.loads((held / "manifest.json").read_text())
    params = ScoringParams()
    references = {
        entry["id"]: (
            entry["subject"],
            parse_annotations((held / entry["annotations_path"]).read_text(), source="ref"),
        )
        for entry in manifest["recordings"]
    }
    answers: dict[str, list[int]] = {}
    for secret in range(2**K):
        results = []
        for i, (key, (subject, reference)) in enumerate(references.items()):
            hex_secret = f"{secret:03x}" if i == 0 else "000"
            text = encoder.HEADER + "\n" + encoder.bits_rows(hex_secret, 600.0)
            hypothesis = parse_annotations(text, source="hyp")
            score = score_recording(reference, hypothesis, params)
            results.append(RecordingResult(subject=subject, recording=key, score=score))
        report = aggregate(results, params=params)
        stored = report_dict(report, scorer_version=SCORER_VERSION)
        metrics = _metrics(report)
        answer = {
            "subjects": len(report.subjects),
            "recordings": len(report.recordings),
            "missing_hypotheses": report.n_missing,
            "release": view.release.value,
            "report": release.released_report(view, stored),
            **release.released_metrics(view, metrics),
        }
        answers.setdefault(json.dumps(answer, sort_keys=True), []).append(secret)
    return answers


def test_an_image_encoding_k_bits_gets_no_more_than_the_bound(bits: Bits) -> None:
    client, e = bits.client, bits.evaluation_id
    bound = capacity.bits_per_evaluation(recordings=len(HELD), subjects=len(HELD))
    secret = int(SECRET, 16) % 2**K

    # --- what the owner reads --------------------------------------------------------------
    result = client.get(f"/api/v1/evaluations/{e}/result", headers=bits.owner).json()
    assert result["release"] == "rounded"
    board = client.get("/api/v1/leaderboards/bits-held", headers=bits.owner).json()
    (entry,) = board["items"]
    side = client.get(f"/api/v1/algorithms/{bits.algorithm_id}/results", headers=bits.owner)
    (row,) = side.json()["items"]
    download = client.get("/api/v1/leaderboards/bits-held/download?format=json", headers=bits.owner)
    (line,) = download.json()
    figures = {k: v for k, v in result.items() if k.startswith(("event_", "sample_"))}
    for other in (entry, row, line):
        assert {k: other[k] for k in figures} == figures  # one release, everywhere
    # Every number released is on the documented grid, and no raw count is there.
    for metric, value in figures.items():
        if value is None:
            continue
        if metric.endswith("fp_rate"):
            assert value == release.round_fp_rate(value), metric
        else:
            assert value == round(value, decision.RELEASED_DECIMALS), metric
    assert "pooled_counts" not in json.dumps([result, board, side.json(), download.json()])

    # --- decoding: the answers this image can cause, and which secrets give the one read ---
    view = decision.decide(
        None,
        rule_facts.Facts(held_out=True, dataset_level=Disclosure.AGGREGATE, subjects=2),
    )
    answers = _simulated(bits.held, view)
    read = _answer(result)
    assert read in answers, "the simulation releases what the platform released"
    assert secret in answers[read]
    recovered = math.log2(len(answers))
    assert recovered <= bound, (recovered, bound)
    assert recovered < K, recovered  # the 9 bits no longer come through whole

    # --- the control: exact figures and pooled counts carry every bit -----------------------
    exact = client.get(f"/api/v1/evaluations/{e}/result", headers=bits.admin).json()
    admin_view = decision.decide(
        User(role=Role.ADMIN),
        rule_facts.Facts(held_out=True, dataset_level=Disclosure.AGGREGATE, subjects=2),
    )
    exact_answers = _simulated(bits.held, admin_view)
    assert exact_answers[_answer(exact)] == [secret]
    assert math.log2(len(exact_answers)) == K
    print(
        f"bits per evaluation: this image {recovered:.2f} of {K} encoded; stated bound "
        f"{bound:.1f}; exact release {math.log2(len(exact_answers)):.0f}"
    )
