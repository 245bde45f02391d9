"""Images that cannot start are the submitter's fault; an engine in trouble is not.

Against the real Docker engine: each image under tests/worker/images that cannot start (no
command, a missing entrypoint, an unknown USER, a VOLUME through a symbolic link into /data,
a WORKDIR under /proc/self/fd) ends ``crashed`` with a fixed message and the engine's words in
the admin log only. Engine refusals that the image does not explain (a name taken, a bind
source gone, an operator's user the image lacks, no engine at all) stay infrastructure faults.
Through real Celery workers, such a run ends after exactly one attempt.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from sqlalchemy import select

from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import (
    DatasetKind,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    RunOutcome,
    VersionStatus,
)
from szbench_worker.docker_runner import (
    CANNOT_START_MESSAGES,
    LABEL_OWNER,
    DockerRunner,
    cannot_start_cause,
    config_refusal,
)
from szbench_worker.docker_runner import run as docker_run
from szbench_worker.runner import Limits, RunnerError

from ._pipeline_factories import Rec, make_prepared_dataset, seed_world
from .conftest import LIMITS
from .test_pipeline_celery import LIMITS as PIPELINE_LIMITS
from .test_pipeline_celery import (  # noqa: F401 (celery_env, direct_docker: fixtures)
    Workers,
    add_version,
    all_finished,
    celery_env,
    direct_docker,
    wait_until,
)

CANNOT_START = {
    "nocommand": "command",
    "noentrypoint": "entrypoint",
    "unknownuser": "user",
    "volumesymlink": "mount",
    "workdirproc": "workdir",
}
# What the admin log must hold for each: the engine's (or the check's) own words.
ADMIN_DETAIL = {
    "nocommand": "neither Entrypoint nor Cmd",
    "noentrypoint": "/app/missing-binary",
    "unknownuser": "unable to find user algorithm",
    "volumesymlink": 'rootfs at "/link/cache"',
    "workdirproc": "/proc/self/fd/7",
}


@pytest.fixture
def runner(docker_client: object, tmp_path: Path) -> DockerRunner:
    return DockerRunner(docker_client, work_dir=tmp_path / "work", host="test-host")


def our_containers(client: Any, runner: DockerRunner) -> list[Any]:
    return client.containers.list(  # type: ignore[no-any-return]
        all=True, filters={"label": f"{LABEL_OWNER}={runner.owner}"}, ignore_removed=True
    )


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(CANNOT_START))
def test_image_that_cannot_start_is_crashed_with_a_fixed_message(
    docker_client: Any,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    name: str,
) -> None:
    result = runner.run(
        image=test_images[name], recording=recording, output_dir=tmp_path / "out", limits=LIMITS
    )

    assert result.outcome is RunOutcome.CRASHED, result.admin_log
    assert result.exit_code is None
    # Exactly the fixed text: not a byte of the engine's error reaches the submitter.
    assert result.submitter_message == CANNOT_START_MESSAGES[CANNOT_START[name]]
    assert ADMIN_DETAIL[name] in result.admin_log
    assert result.image_digest == test_images[name]
    assert result.output_tsv is None
    assert our_containers(docker_client, runner) == []
    assert list(runner.work_dir.iterdir()) == []


def test_every_cannot_start_message_is_free_of_engine_words() -> None:
    for message in CANNOT_START_MESSAGES.values():
        for word in ("OCI", "runc", "/var/lib/docker", "shim", "Error", "http"):
            assert word not in message


@pytest.mark.parametrize(
    ("explanation", "cause"),
    [
        ("No command specified", "command"),
        (
            "failed to create shim task: OCI runtime create failed: runc create failed: unable "
            'to start container process: exec: "python9": executable file not found in $PATH: '
            "unknown",
            "entrypoint",
        ),
        (
            'OCI runtime create failed: unable to start container process: exec: "/run.sh": '
            "permission denied: unknown",
            "entrypoint",
        ),
        ("unable to find group algo: no matching entries in group file", "user"),
        (
            "OCI runtime create failed: runc create failed: unable to start container process: "
            "current working directory is outside of container mount namespace root -- "
            "possibly leaked fd: unknown",
            "workdir",
        ),
        (
            'error during container init: error mounting "tmpfs" to rootfs at "/scratch": '
            "mount through a symlink: too many levels of symbolic links: unknown",
            "mount",
        ),
        (
            'error mounting "/srv/runs/run-1/data" to rootfs at "/data": mount ... not a '
            "directory: unknown: Are you trying to mount a directory onto a file?",
            "mount",
        ),
        # The engine's own trouble: an infrastructure fault, retried.
        (
            'error mounting "tmpfs" to rootfs at "/scratch": cannot allocate memory: unknown',
            None,
        ),
        (
            'error mounting "/srv/runs/run-1/data" to rootfs at "/data": no such file or '
            "directory: unknown",
            None,
        ),
        ('error mounting "proc" to rootfs at "/proc": read-only file system: unknown', None),
        ("failed to create shim task: context deadline exceeded: unknown", None),
        ("devmapper: Thin Pool has 0 free data blocks", None),
        (
            'failed to start shim: exec: "containerd-shim-runc-v2": executable file not found '
            "in $PATH: unknown",
            None,
        ),
        ("Conflict. The container name is already in use by container", None),
        ("failed to create endpoint on network none: operation not permitted", None),
    ],
)
def test_cannot_start_cause_tells_the_image_from_the_engine(
    explanation: str, cause: str | None
) -> None:
    paths = ("/scratch", "/tmp", "/data", "/output")
    assert cannot_start_cause(explanation, image_paths=paths, own_user=True) == cause


def test_an_operators_user_that_the_image_lacks_is_not_the_submitters_fault() -> None:
    text = "unable to find user worker: no matching entries in passwd file"
    assert cannot_start_cause(text, image_paths=(), own_user=False) is None


def test_config_refusal_reads_only_the_image_configuration() -> None:
    assert config_refusal({"Entrypoint": [""], "Cmd": None}) is not None
    assert config_refusal({"Entrypoint": ["/run"], "Cmd": []}) is None
    assert config_refusal({"Cmd": ["x"], "WorkingDir": "//proc/../dev/fd"}) is not None
    assert config_refusal({"Cmd": ["x"], "WorkingDir": "/procedures"}) is None


# --- the engine's own faults stay infrastructure faults ------------------------------------


@pytest.mark.docker
def test_a_taken_container_name_is_an_infrastructure_fault(
    docker_client: Any,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"szbench-test-taken-{uuid.uuid4().hex[:12]}"
    blocker = docker_client.containers.create(
        test_images["good"], name=name, labels={LABEL_OWNER: runner.owner}, network_mode="none"
    )
    try:
        monkeypatch.setattr(docker_run, "container_name", lambda run_dir: name)
        with pytest.raises(RunnerError, match="creating the container failed"):
            runner.run(
                image=test_images["good"],
                recording=recording,
                output_dir=tmp_path / "out",
                limits=LIMITS,
            )
    finally:
        # The runner removes its container by name on every path, so it may be gone already.
        with contextlib.suppress(docker.errors.NotFound):
            blocker.remove(force=True)


@pytest.mark.docker
def test_a_bind_source_gone_is_an_infrastructure_fault(
    docker_client: Any,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def vanish(recording: Path, data_dir: Path, *, may_bind: bool = True) -> Path:
        shutil.rmtree(data_dir)
        return data_dir / recording.name

    monkeypatch.setattr(docker_run, "stage_recording", vanish)
    with pytest.raises(RunnerError):
        runner.run(
            image=test_images["good"],
            recording=recording,
            output_dir=tmp_path / "out",
            limits=LIMITS,
        )
    assert our_containers(docker_client, runner) == []


@pytest.mark.docker
def test_an_operators_user_the_image_lacks_is_an_infrastructure_fault(
    docker_client: Any,
    test_images: dict[str, str],
    runner: DockerRunner,
    recording: Path,
    tmp_path: Path,
) -> None:
    limits = Limits(**{**LIMITS.__dict__, "user": "nosuchoperatoruser"})
    with pytest.raises(RunnerError, match="starting the container failed"):
        runner.run(
            image=test_images["good"], recording=recording, output_dir=tmp_path, limits=limits
        )
    assert our_containers(docker_client, runner) == []


@pytest.mark.docker
def test_an_engine_that_is_down_is_an_infrastructure_fault(
    test_images: dict[str, str], runner: DockerRunner, recording: Path, tmp_path: Path
) -> None:
    runner.client = docker.DockerClient(
        base_url=f"unix://{tmp_path}/no-engine.sock", version="1.41"
    )
    with pytest.raises(RunnerError):
        runner.run(
            image=test_images["nocommand"],
            recording=recording,
            output_dir=tmp_path,
            limits=LIMITS,
        )


# --- through the pipeline: one attempt, crashed, the submitter's ----------------------------


@pytest.mark.docker
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.slow
def test_cannot_start_runs_end_crashed_after_exactly_one_attempt(
    celery_env: tuple[Workers, str],  # noqa: F811 (the imported fixture)
    test_images: dict[str, str],
    docker_client: Any,
    tmp_path: Path,
) -> None:
    workers, host = celery_env
    recs = [Rec("sub-01", "run-00", 600, ((1, 2),))]
    data = make_prepared_dataset(tmp_path / "data", recs)
    with session_scope() as session:
        world = seed_world(
            session, data, recs, digest="sha256:" + "4" * 64, run_limits=PIPELINE_LIMITS
        )
        ids = {}
        for name in CANNOT_START:
            version = add_version(session, test_images[name], docker_client)
            ids[name] = evaluations.create_evaluation(
                session, algorithm_version=version, dataset_version=world.dataset_version
            ).id
    workers.env = {**workers.env, "SZBENCH_TASK_RETRY_BACKOFF_MAX_S": "1"}
    workers.start("cannotstart")
    wait_until(all_finished(list(ids.values())), 180, "every evaluation", workers)
    with session_scope() as session:
        for name, cause in CANNOT_START.items():
            ev = session.get_one(Evaluation, ids[name])
            # Finished and scored (as no detections): not failed as the platform's fault.
            assert ev.status == EvaluationStatus.DONE, (name, ev.message)
            (run,) = ev.runs
            assert run.outcome == RunOutcome.CRASHED, (name, run.admin_log[-800:])
            assert run.attempts == 1, name
            assert run.submitter_message == CANNOT_START_MESSAGES[cause]
            assert ADMIN_DETAIL[name] in run.admin_log
            assert run.worker_host == host
            assert ev.result is not None
    log = (workers.log_dir / "cannotstart.log").read_text(errors="replace")
    assert "Retry in" not in log


@pytest.mark.docker
@pytest.mark.postgres
def test_smoke_test_rejects_an_image_that_cannot_start_with_the_fixed_message(
    direct_docker: list[Any],  # noqa: F811 (the imported fixture)
    test_images: dict[str, str],
    tmp_path: Path,
) -> None:
    from szbench_worker import pipeline

    recs = [Rec("sub-01", "run-00", 600, ((1, 2),))]
    sample = make_prepared_dataset(tmp_path / "sample", recs)
    with session_scope() as session:
        world = seed_world(
            session,
            sample,
            recs,
            slug="public-sample",
            kind=DatasetKind.PUBLIC_SAMPLE,
            digest=test_images["unknownuser"],
            status=VersionStatus.PENDING,
            run_limits=PIPELINE_LIMITS,
        )
        version_id = world.version.id

    outcome = pipeline.smoke_test(version_id)

    # Rejected (the submitter's fault), not sent back to waiting as a platform fault.
    assert outcome.status == VersionStatus.REJECTED
    assert outcome.message.endswith(CANNOT_START_MESSAGES["user"])
    with session_scope() as session:
        smoke = session.scalars(
            select(Evaluation).where(
                Evaluation.algorithm_version_id == version_id,
                Evaluation.kind == EvaluationKind.SMOKE_TEST,
            )
        ).one()
        (run,) = smoke.runs
        assert run.outcome == RunOutcome.CRASHED
        assert run.attempts == 1
        assert "no matching entries in passwd file" in run.admin_log
        assert run.submitter_message == CANNOT_START_MESSAGES["user"]
