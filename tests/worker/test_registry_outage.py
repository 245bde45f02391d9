"""The image registry stopped for 2 minutes while a worker must pull: held, never charged,
finished by itself (issue 29 items 1 and 2), with the shipped timers.

Real parts: a registry on loopback (Debian's docker-registry) that the test stops and starts
again on the same port and storage, the shared Docker engine (the image, one of this test's
own, is removed from it so that the worker must pull), a ``celery worker`` process with
every timer at its shipped default (heartbeat 15 s), a Redis of the test's own and
PostgreSQL. A held-out evaluation and a new version's smoke test wait while the registry is
away: the evaluation says why on its page and in the API (without the registry's address),
the version is never rejected, no run counts an attempt; once the registry is back both
finish without anyone's doing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from szbench.algorithms import registry as registry_push
from szbench.app import create_app
from szbench.broker import broker_was_emptied
from szbench.config import Settings
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.evaluations.holds import platform_hold
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    Evaluation,
    EvaluationStatus,
    Role,
    RunOutcome,
    VersionStatus,
    WorkerHeartbeat,
)
from tests.platform import factories as f

from . import _live_services as live
from ._pipeline_factories import Rec, make_prepared_dataset, seed_world
from .test_pipeline_celery import LIMITS, SLOW_GOOD, Workers
from .test_reconcile_celery import OwnRedis

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

#: What the worker's heartbeat, the evaluation's hold and the smoke test say (no address).
REGISTRY_AWAY = "the image registry does not answer"
#: How long the registry is away (the issue's figure).
OUTAGE_S = 120.0
#: Every timer a worker reads, left at its shipped default for this test.
TIMERS = (
    "SZBENCH_WORKER_HEARTBEAT_INTERVAL_S",
    "SZBENCH_WORKER_HEARTBEAT_TIMEOUT_S",
    "SZBENCH_RECONCILE_INTERVAL_S",
    "SZBENCH_RECONCILE_STALE_S",
    "SZBENCH_RECONCILE_CLAIM_GRACE_S",
    "SZBENCH_TASK_RETRY_BACKOFF_MAX_S",
    "SZBENCH_TASK_MAX_RETRIES",
    "SZBENCH_QUEUE_VISIBILITY_TIMEOUT_S",
)


class Registry:
    """Debian's docker-registry on a loopback port, stopped and started on the same storage."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("docker-registry")
        assert binary, "docker-registry is not installed (scripts/test-services.sh)"
        self.binary = binary
        self.port = live.free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.config = root / "registry.yml"
        self.config.write_text(
            textwrap.dedent(
                f"""\
                version: 0.1
                log: {{level: warn}}
                storage: {{filesystem: {{rootdirectory: {root / "registry-data"}}}}}
                http: {{addr: "{self.address}"}}
                """
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "serve", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the registry did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def outage(
    pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[tuple[Workers, Registry, str, str]]:
    registry = Registry(tmp_path)
    registry.start()
    broker = OwnRedis(tmp_path)
    broker.start()
    # As a deployment's broker is: marked by an earlier reconciler pass (a fresh one would
    # make the worker's first pass send everything again, as after a broker's restart).
    broker_was_emptied(broker.url)
    host = f"registry-outage-{uuid.uuid4().hex[:8]}"
    # An image of this test's own (a unique id): removing it from the shared engine touches
    # no other test's image.
    context = tmp_path / "image"
    context.mkdir()
    (context / "run.py").write_text(SLOW_GOOD)
    (context / "Dockerfile").write_text(
        "FROM szbench/python-numpy:bookworm\nCOPY run.py /run.py\n"
        f'ENV MARK={uuid.uuid4().hex}\nCMD ["python3", "/run.py"]\n'
    )
    from szbench_worker.docker_runner import build_image

    tag = f"szbench-test/outage:{uuid.uuid4().hex[:8]}"
    image_id = build_image(context, tag, docker_client).digest
    archive = tmp_path / "image.tar"
    subprocess.run(["docker", "save", "-o", str(archive), tag], check=True)
    pushed = registry_push.push_archive(
        archive, image_id, Settings(registry=registry.address, data_dir=tmp_path)
    )
    docker_client.images.remove(image_id, force=True)
    for timer in TIMERS:
        settings_env.delenv(timer, raising=False)
    live.use_settings(
        settings_env,
        {
            "SZBENCH_DATABASE_URL": pg_url,
            "SZBENCH_BROKER_URL": broker.url,
            "SZBENCH_RUNNER_BACKEND": "docker",
            "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
            "SZBENCH_PIPELINE_WORK_DIR": str(tmp_path / "work"),
            "SZBENCH_WORKER_HOST": host,
            "SZBENCH_REGISTRY": registry.address,
            "SZBENCH_SMOKE_TEST_DATASET": "public-sample",
        },
    )
    workers = Workers(live.child_env(), live.log_dir_for(tmp_path, host))
    try:
        yield workers, registry, image_id, pushed.digest
    finally:
        workers.stop_all()
        broker.kill()
        registry.stop()
        live.remove_leftovers(docker_client, host)
        if _present(docker_client, image_id):
            docker_client.images.remove(image_id, force=True)


def _present(docker_client: Any, image_id: str) -> bool:
    try:
        docker_client.images.get(image_id)
    except Exception:
        return False
    return True


def _heartbeat_faults() -> list[tuple[str | None, str | None]]:
    with session_scope() as session:
        return [
            (b.fault, getattr(b, "fault_kind", None))
            for b in session.scalars(select(WorkerHeartbeat))
        ]


def test_a_registry_away_for_two_minutes_holds_the_work_and_spends_no_try(
    outage: tuple[Workers, Registry, str, str], tmp_path: Path
) -> None:
    workers, registry, image_id, manifest = outage
    held_recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in (1, 2)]
    sample_recs = [Rec("sub-09", "run-00", 600, ((100, 20),))]
    with session_scope() as session:
        world = seed_world(
            session,
            make_prepared_dataset(tmp_path / "held", held_recs),
            held_recs,
            digest=image_id,
            run_limits={**LIMITS, "timeout_s": 60},
        )
        sample = seed_world(
            session,
            make_prepared_dataset(tmp_path / "sample", sample_recs, seed=3),
            sample_recs,
            slug="public-sample",
            kind=DatasetKind.PUBLIC_SAMPLE,
            digest=image_id,
            status=VersionStatus.PENDING,
            run_limits={**LIMITS, "timeout_s": 60},
        )
        for version in (world.version, sample.version):
            version.registry_digest = manifest
            version.image_reference = None
        admin = f.user(session, Role.ADMIN)
        headers = f.headers(session, admin)
        registry.stop()
        stopped = time.monotonic()
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        ).id
        evaluations.request_smoke_test(session, sample.version)
        new_version_id = sample.version.id
    workers.start("outage", timeout_s=90)

    live.wait_for(
        lambda: (REGISTRY_AWAY, "registry") in _heartbeat_faults(),
        60,
        "the heartbeat to say the registry does not answer",
        logs=workers.logs,
    )
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        hold = platform_hold(session, evaluation)
        assert hold is not None
        assert REGISTRY_AWAY in hold
        assert evaluation.status == EvaluationStatus.RUNNING
        assert all(run.attempts == 0 for run in evaluation.runs), "no try spent"
    api = TestClient(create_app()).get(f"/api/v1/evaluations/{evaluation_id}", headers=headers)
    assert api.status_code == 200, api.text
    assert api.json()["progress"]["held_by"] == hold
    assert str(registry.port) not in api.text
    live.wait_for(
        lambda: _version(new_version_id).status_message.startswith("Smoke test waiting"),
        60,
        "the smoke test to say why it waits",
        logs=workers.logs,
    )
    version = _version(new_version_id)
    assert version.status == VersionStatus.SMOKE_TESTING, version.status_message
    assert REGISTRY_AWAY in version.status_message
    assert str(registry.port) not in version.status_message

    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
    registry.start()

    def finished() -> bool:
        with session_scope() as session:
            done = session.get_one(Evaluation, evaluation_id).status.finished
        return done and _version(new_version_id).status != VersionStatus.SMOKE_TESTING

    live.wait_for(finished, 240, "the evaluation and the smoke test", logs=workers.logs)
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        assert evaluation.status == EvaluationStatus.DONE, evaluation.message
        assert [run.outcome for run in evaluation.runs] == [RunOutcome.OK, RunOutcome.OK]
        assert [run.attempts for run in evaluation.runs] == [1, 1]
        assert all(run.event_tp == 1 for run in evaluation.runs)
        assert evaluation.reconcile_rounds == 0
    version = _version(new_version_id)
    assert version.status == VersionStatus.ACTIVE, version.status_message
    assert version.status_message == "Smoke test passed."
    log = (workers.log_dir / "outage.log").read_text(errors="replace")
    assert "handed back" in log
    assert "has its registry again" in log
    assert _heartbeat_faults() == [(None, None)]


def _version(version_id: int) -> AlgorithmVersion:
    with session_scope() as session:
        version = session.get_one(AlgorithmVersion, version_id)
        session.expunge(version)
        return version
