"""The pipeline's services (datasets, evaluations) and the queue's enqueue-after-commit.

Database tests run in a rolled-back transaction on real PostgreSQL; what would be sent to
the broker is captured by ``queue.set_sender``. One test sends to the real Redis.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session

from szbench import queue
from szbench.config import Settings, get_settings
from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.errors import BadRequest, Conflict
from szbench.evaluations import service as evaluations
from szbench.models import (
    DatasetKind,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    VersionStatus,
)
from tests.redis_urls import redis_url
from tests.worker._pipeline_factories import Rec, make_prepared_dataset, seed_world

RECS = [Rec("sub-01", "run-00"), Rec("sub-02", "run-00", seizures=((10, 5),))]


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    captured: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: captured.append((name, q, kwargs)))
    yield captured
    queue.set_sender(None)


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    return make_prepared_dataset(tmp_path / "prepared", RECS)


def test_register_dataset_version_creates_recordings(db_session: Session, prepared: Path) -> None:
    dataset = create_dataset(db_session, slug="chb-mit", title="CHB-MIT")
    dv = register_dataset_version(db_session, dataset, version="2024", prepared_path=prepared)
    assert [r.key for r in dv.recordings] == [r.key for r in RECS]
    rec = dv.recordings[1]
    assert rec.subject == "sub-02"
    assert rec.duration_s == 600.0
    assert rec.checksum.startswith("sha256:")
    assert (prepared / rec.eeg_path).is_file()
    assert dv.manifest_checksum.startswith("sha256:")
    with pytest.raises(Conflict, match="already has a version '2024'"):
        register_dataset_version(db_session, dataset, version="2024", prepared_path=prepared)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m.pop("recordings"), "'recordings' must be a non-empty list"),
        (lambda m: m["recordings"][1].pop("subject"), r"recordings\[1\]\.subject: missing"),
        (lambda m: m["recordings"][0].update(duration_s=-1), r"recordings\[0\]\.duration_s"),
        (lambda m: m["recordings"][0].update(eeg_path="../x.edf"), r"\[0\]\.eeg_path: .*inside"),
        (lambda m: m["recordings"][1].update(eeg_path="eeg/x.edf"), r"\[1\]\.eeg_path: .*exist"),
        (lambda m: m["recordings"][1].update(id=m["recordings"][0]["id"]), "listed twice"),
        (lambda m: m["recordings"][0].pop("checksum"), r"recordings\[0\]\.checksum: missing"),
    ],
)
def test_bad_manifest_is_refused_naming_the_field(
    db_session: Session, prepared: Path, mutate: Any, message: str
) -> None:
    manifest = json.loads((prepared / "manifest.json").read_text())
    mutate(manifest)
    (prepared / "manifest.json").write_text(json.dumps(manifest))
    dataset = create_dataset(db_session, slug="bad")
    with pytest.raises(BadRequest, match=message):
        register_dataset_version(db_session, dataset, version="1", prepared_path=prepared)


def test_manifest_that_is_not_json(db_session: Session, prepared: Path) -> None:
    (prepared / "manifest.json").write_text("{not json")
    dataset = create_dataset(db_session, slug="bad")
    with pytest.raises(BadRequest, match=r"manifest.json: not valid JSON \(line 1"):
        register_dataset_version(db_session, dataset, version="1", prepared_path=prepared)


def test_create_dataset_validates_slug_and_limits(db_session: Session) -> None:
    with pytest.raises(BadRequest, match="slug"):
        create_dataset(db_session, slug="Not A Slug")
    with pytest.raises(BadRequest, match=r"run_limits: unknown key\(s\) gpus"):
        create_dataset(db_session, slug="x", run_limits={"gpus": 2})
    with pytest.raises(BadRequest, match=r"run_limits.timeout_s: must be a positive number"):
        create_dataset(db_session, slug="x", run_limits={"timeout_s": 0})
    with pytest.raises(BadRequest, match=r"run_limits\.queue"):
        create_dataset(db_session, slug="x", run_limits={"queue": "tpu"})
    create_dataset(db_session, slug="x", run_limits={"timeout_s": 60, "queue": "gpu"})
    with pytest.raises(Conflict, match="already exists"):
        create_dataset(db_session, slug="x")


def test_evaluation_is_sent_only_after_commit(
    db_session: Session, prepared: Path, sent: list[Any]
) -> None:
    world = seed_world(db_session, prepared, RECS)
    evaluation = evaluations.create_evaluation(
        db_session, algorithm_version=world.version, dataset_version=world.dataset_version
    )
    assert sent == []
    assert evaluation.status == EvaluationStatus.QUEUED
    assert evaluation.recordings_total == 2
    assert evaluation.official is True
    assert evaluation.scoring_params["tolerance_start_s"] == 30.0
    db_session.commit()
    assert sent == [(queue.TASK_START_EVALUATION, "cpu", {"evaluation_id": evaluation.id})]


def test_rollback_sends_nothing(db_session: Session, prepared: Path, sent: list[Any]) -> None:
    world = seed_world(db_session, prepared, RECS)
    db_session.commit()
    evaluations.create_evaluation(
        db_session, algorithm_version=world.version, dataset_version=world.dataset_version
    )
    db_session.rollback()
    db_session.commit()
    assert sent == []


def test_create_evaluation_checks(db_session: Session, prepared: Path, sent: list[Any]) -> None:
    world = seed_world(db_session, prepared, RECS, status=VersionStatus.PENDING)
    with pytest.raises(Conflict, match="pending"):
        evaluations.create_evaluation(
            db_session, algorithm_version=world.version, dataset_version=world.dataset_version
        )
    world.version.status = VersionStatus.ACTIVE
    with pytest.raises(BadRequest, match=r"scoring_params: unknown parameter\(s\) nope"):
        evaluations.create_evaluation(
            db_session,
            algorithm_version=world.version,
            dataset_version=world.dataset_version,
            scoring_params={"nope": 1},
        )
    custom = evaluations.create_evaluation(
        db_session,
        algorithm_version=world.version,
        dataset_version=world.dataset_version,
        scoring_params={"tolerance_start_s": 10.0},
    )
    assert custom.official is False
    world.version.image_digest = None
    with pytest.raises(Conflict, match="no image digest"):
        evaluations.create_evaluation(
            db_session, algorithm_version=world.version, dataset_version=world.dataset_version
        )


def test_hidden_phase_results_are_unpublished_and_gpu_routing(
    db_session: Session, prepared: Path, sent: list[Any]
) -> None:
    world = seed_world(db_session, prepared, RECS)
    phase = Phase(slug="final", hidden=True)
    db_session.add(phase)
    db_session.flush()
    world.version.phase_id = phase.id
    world.version.wants_gpu = True
    db_session.flush()
    db_session.refresh(world.version)
    evaluation = evaluations.create_evaluation(
        db_session, algorithm_version=world.version, dataset_version=world.dataset_version
    )
    assert evaluation.published is False
    assert evaluation.queue == "gpu"
    db_session.commit()
    assert sent[-1][1] == "gpu"


def test_rescore_needs_a_done_source(db_session: Session, prepared: Path, sent: list[Any]) -> None:
    world = seed_world(db_session, prepared, RECS)
    evaluation = evaluations.create_evaluation(
        db_session, algorithm_version=world.version, dataset_version=world.dataset_version
    )
    with pytest.raises(Conflict, match="only done ones are re-scored"):
        evaluations.rescore_evaluation(db_session, evaluation, scoring_params={})
    evaluation.status = EvaluationStatus.DONE
    rescore = evaluations.rescore_evaluation(
        db_session, evaluation, scoring_params={"tolerance_end_s": 0.0}
    )
    assert rescore.kind == EvaluationKind.RESCORE
    assert rescore.source_evaluation_id == evaluation.id
    assert rescore.official is False
    # A re-score of a re-score goes back to the evaluation that owns the detections.
    rescore.status = EvaluationStatus.DONE
    again = evaluations.rescore_evaluation(db_session, rescore, scoring_params={})
    assert again.source_evaluation_id == evaluation.id
    assert again.official is True
    db_session.commit()
    # Scoring needs no container: its own queue, behind no run (issue 29.9).
    assert sent[-1][:2] == (queue.TASK_RESCORE, queue.QUEUE_SCORE)


def test_continuous_benchmark_plans_active_versions_without_evaluations(
    db_session: Session, prepared: Path, sent: list[Any]
) -> None:
    first = seed_world(db_session, prepared, RECS, slug="held-a")
    second = seed_world(db_session, prepared, RECS, slug="held-b", digest="sha256:" + "b" * 64)
    seed_world(
        db_session,
        prepared,
        RECS,
        slug="held-c",
        status=VersionStatus.RETIRED,
        digest="sha256:" + "c" * 64,
    )
    dv = first.dataset_version
    planned = evaluations.plan_continuous_benchmark(db_session, dv)
    assert [v.id for v in planned] == [first.version.id, second.version.id]
    assert sent == []  # a plan is a dry run
    queued = evaluations.queue_continuous_benchmark(db_session, dv)
    assert len(queued) == 2
    assert evaluations.plan_continuous_benchmark(db_session, dv) == []
    queued[0].status = EvaluationStatus.CANCELLED
    db_session.flush()
    assert [v.id for v in evaluations.plan_continuous_benchmark(db_session, dv)] == [
        first.version.id
    ]
    db_session.commit()
    assert [name for name, _, _ in sent] == [queue.TASK_START_EVALUATION] * 2


def test_smoke_test_request_and_cancel(
    db_session: Session, prepared: Path, sent: list[Any]
) -> None:
    world = seed_world(
        db_session, prepared, RECS, status=VersionStatus.PENDING, kind=DatasetKind.PUBLIC_SAMPLE
    )
    evaluations.request_smoke_test(db_session, world.version)
    db_session.commit()
    assert sent == [(queue.TASK_SMOKE_TEST, "cpu", {"algorithm_version_id": world.version.id})]
    world.version.status = VersionStatus.ACTIVE
    with pytest.raises(Conflict, match="active"):
        evaluations.request_smoke_test(db_session, world.version)
    evaluation = evaluations.create_evaluation(
        db_session, algorithm_version=world.version, dataset_version=world.dataset_version
    )
    cancelled = evaluations.cancel_evaluation(db_session, evaluation)
    assert cancelled.status == EvaluationStatus.CANCELLED
    assert cancelled.finished_at is not None
    with pytest.raises(Conflict, match="already cancelled"):
        evaluations.cancel_evaluation(db_session, evaluation)


def test_celery_config_reliability_settings(tmp_path: Path) -> None:
    conf = queue.celery_config(Settings(data_dir=tmp_path, broker_url=redis_url(9)))
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert {q.name for q in conf["task_queues"]} == {"cpu", "gpu", "maintenance", "score"}
    assert conf["broker_transport_options"]["visibility_timeout"] == 7200
    # The reconciler runs every minute, the phase lifecycle and the notifications tick every
    # 30 s, each its own task, on their own queue (never behind a backlog of runs).
    schedule = conf["beat_schedule"]
    assert {name: e["task"] for name, e in schedule.items()} == {
        "reconcile": queue.TASK_RECONCILE,
        "phases": queue.TASK_PHASES_TICK,
        "notifications": queue.TASK_NOTIFY_TICK,
        "federation": queue.TASK_FEDERATION_TICK,
    }
    assert schedule["reconcile"]["schedule"] == 60
    assert schedule["phases"]["schedule"] == 30
    assert schedule["federation"]["schedule"] == queue.FEDERATION_TICK_S
    assert schedule["notifications"]["schedule"] == 30
    for entry in schedule.values():
        assert entry["options"]["queue"] == queue.QUEUE_MAINTENANCE
        assert entry["options"]["expires"] == entry["schedule"]
    embedded = queue.celery_config(Settings(data_dir=tmp_path, broker_url=""))
    assert embedded["broker_url"] == f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    assert embedded["beat_schedule"] == {}
    with pytest.raises(ValueError, match="unknown queue"):
        queue.send_task(queue.TASK_FINALIZE, queue="tpu", evaluation_id=1)


def test_send_task_reaches_redis(settings_env: pytest.MonkeyPatch) -> None:
    url = redis_url(9)
    settings_env.setenv("SZBENCH_BROKER_URL", url)
    get_settings.cache_clear()
    queue.reset_celery()
    client = redis.Redis.from_url(url)
    client.delete("gpu")
    try:
        queue.send_task(queue.TASK_RUN_RECORDING, queue="gpu", run_id=42)
        raw = client.lpop("gpu")
        assert raw is not None
        message = json.loads(raw)
        assert message["headers"]["task"] == queue.TASK_RUN_RECORDING
        assert message["headers"]["kwargsrepr"] == "{'run_id': 42}"
    finally:
        client.delete("gpu")
        client.close()
        queue.reset_celery()


def test_the_smoke_test_evaluation_comes_from_the_service_once(
    db_session: Session, prepared: Path, sent: list[Any]
) -> None:
    world = seed_world(
        db_session,
        prepared,
        RECS,
        status=VersionStatus.SMOKE_TESTING,
        kind=DatasetKind.PUBLIC_SAMPLE,
    )
    world.version.wants_gpu = True
    recording = world.dataset_version.recordings[0]
    evaluation = evaluations.smoke_test_evaluation(
        db_session, algorithm_version=world.version, recording=recording
    )
    assert (evaluation.kind, evaluation.status) == (
        EvaluationKind.SMOKE_TEST,
        EvaluationStatus.RUNNING,
    )
    assert evaluation.started_at is not None
    assert (evaluation.official, evaluation.published, evaluation.reuse_runs) == (False,) * 3
    assert evaluation.recordings_total == 1
    assert evaluation.queue == evaluations.smoke_test_queue(world.version) == "gpu"
    assert evaluation.image_digest == world.version.image_digest
    assert evaluation.scoring_params == evaluations.scoring_params_dict(None)[0]
    # A second delivery of the smoke-test task finds the same one; a finished one is not
    # taken again.
    again = evaluations.smoke_test_evaluation(
        db_session, algorithm_version=world.version, recording=recording
    )
    assert again.id == evaluation.id
    evaluation.status = EvaluationStatus.FAILED
    db_session.flush()
    fresh = evaluations.smoke_test_evaluation(
        db_session, algorithm_version=world.version, recording=recording
    )
    assert fresh.id != evaluation.id
    db_session.commit()
    assert sent == []  # the smoke-test task runs it itself: no start task
