"""Nothing the engine or an algorithm says can make a row unstorable (issue 29 item 5).

On real PostgreSQL, whose text refuses NUL: every text is made storable once on its way to
the database; a value the database refuses all the same ends the run as an outcome of its
own instead of a task retried while the evaluation stays ``running``; an image whose
configuration holds a NUL is refused before any container (the engine quoted it back in
its refusal, and ``szbench evaluate`` waited for ever).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from szbench.db import session_scope
from szbench.models import Evaluation, EvaluationStatus, RecordingRun, RunOutcome
from szbench.queue import TASK_RUN_RECORDING
from szbench_worker import pipeline
from szbench_worker.pipeline.task_failure import record_task_failure
from tests.platform.image_configs import rewrite_config

from ._pipeline_factories import Rec, make_prepared_dataset, seed_world
from .conftest import REPO
from .fakes import FakeRun
from .test_pipeline import (
    Env,
    deliver,
    new_evaluation,
    pipeline_env,  # noqa: F401 (the fixture "env")
)

pytestmark = pytest.mark.postgres


def _runs(evaluation_id: int) -> list[RecordingRun]:
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        runs = list(ev.runs)
        for run in runs:
            session.expunge(run)
        return runs


def test_texts_holding_nul_are_stored_made_storable(env: Env) -> None:
    """The engine's and the algorithm's words (a NUL quoted from an image's configuration)
    reach the run's row with the NUL shown as U+FFFD."""
    env.runner.script = lambda recording: FakeRun(
        outcome=RunOutcome.CRASHED, exit_code=1, log='lstat /app\x00evil: "nob\x00ody"'
    )
    evaluation_id = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        assert session.get_one(Evaluation, evaluation_id).status.finished
    runs = _runs(evaluation_id)
    assert {run.outcome for run in runs} == {RunOutcome.CRASHED}
    assert all('lstat /app\ufffdevil: "nob\ufffdody"' in run.admin_log for run in runs)


def test_a_result_the_database_refuses_ends_the_run(env: Env) -> None:
    """An exit code no integer column holds: "cannot store" is the run's outcome, the
    evaluation goes on and ends; nothing is retried while it stays running."""

    def script(recording: Path) -> FakeRun:
        if "sub-01_ses-01_task-szMonitoring_run-00" in recording.name:
            return FakeRun(outcome=RunOutcome.CRASHED, exit_code=2**40, log="odd")
        return FakeRun(outcome=RunOutcome.CRASHED, exit_code=1, log="fine")

    env.runner.script = script
    evaluation_id = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        assert evaluation.status == EvaluationStatus.FAILED
    runs = _runs(evaluation_id)
    unstorable = [run for run in runs if run.outcome is RunOutcome.INFRASTRUCTURE_ERROR]
    assert len(unstorable) == 1
    assert unstorable[0].submitter_message.startswith("The platform could not store")
    assert "could not be stored" in unstorable[0].admin_log
    assert unstorable[0].finished_at is not None
    assert {run.outcome for run in runs if run not in unstorable} == {RunOutcome.CRASHED}


def test_a_failure_whose_traceback_holds_nul_is_recorded(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    deliver_start = env.sent.pop(0)
    pipeline.start_evaluation(**deliver_start[2])
    run_id = _runs(evaluation_id)[0].id
    record_task_failure(
        TASK_RUN_RECORDING, {"run_id": run_id}, RuntimeError("the engine said: /x\x00y")
    )
    (run,) = [r for r in _runs(evaluation_id) if r.id == run_id]
    assert run.outcome is RunOutcome.INFRASTRUCTURE_ERROR
    assert "/x\ufffdy" in run.admin_log


# --- images whose configuration holds a NUL, on the real engine -----------------------------


def _nul_image(docker_client: Any, good: str, tmp_path: Path, field: str) -> tuple[Path, str]:
    """The good test image with a NUL in one field of its configuration, loaded by id."""
    saved = tmp_path / "good.tar"
    with saved.open("wb") as fh:
        for chunk in docker_client.api.get_image(good):
            fh.write(chunk)
    values = {"WorkingDir": "/app\0evil", "User": "nob\0ody", "Env": ["PATH=/usr/bin", "X=a\0b"]}

    def change(config: dict[str, Any]) -> None:
        config["config"][field] = values[field]

    archive = tmp_path / f"nul-{field}.tar"
    image_id = rewrite_config(saved, archive, change)
    with archive.open("rb") as fh:
        docker_client.api.load_image(fh)
    return archive, image_id


@pytest.mark.docker
@pytest.mark.parametrize("field", ["WorkingDir", "User", "Env"])
def test_an_image_config_holding_nul_ends_each_run_and_the_evaluation(
    env: Env, docker_client: Any, test_images: dict[str, str], tmp_path: Path, field: str
) -> None:
    from szbench_worker.docker_runner import DockerRunner
    from szbench_worker.images import resolver_for

    _, image_id = _nul_image(docker_client, test_images["good"], tmp_path, field)
    runner = DockerRunner(docker_client, work_dir=tmp_path / "work", cpu_pool="none")
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=resolver_for(runner, _settings()))
    )
    recs = [Rec("sub-01", "run-00", 60, ((10, 5),))]
    prepared = make_prepared_dataset(tmp_path / "prepared", recs)
    try:
        from szbench.evaluations import service as evaluations

        with session_scope() as session:
            slug = f"nul-{field.lower()}"
            world = seed_world(session, prepared, recs, slug=slug, digest=image_id)
            evaluation_id = evaluations.create_evaluation(
                session, algorithm_version=world.version, dataset_version=world.dataset_version
            ).id
        deliver(env)
        with session_scope() as session:
            assert session.get_one(Evaluation, evaluation_id).status == EvaluationStatus.DONE
        (run,) = _runs(evaluation_id)
        assert run.outcome is RunOutcome.CRASHED
        assert "holds a NUL character" in run.submitter_message
        assert f"Config.{field}" in run.admin_log
        assert "\0" not in run.admin_log
        assert run.attempts == 1
    finally:
        docker_client.images.remove(image_id, force=True)


def _settings() -> Any:
    from szbench.config import get_settings

    return get_settings()


@pytest.mark.docker
@pytest.mark.slow
def test_szbench_evaluate_of_an_image_config_holding_nul_ends(
    docker_client: Any, test_images: dict[str, str], tmp_path: Path
) -> None:
    """The command ends (it retried the engine's refusal for ever), the archive refused
    before `docker load` with the field named."""
    archive, image_id = _nul_image(docker_client, test_images["good"], tmp_path, "WorkingDir")
    docker_client.images.remove(image_id, force=True)  # --tar loads it (or refuses to)
    recs = [Rec("sub-01", "run-00", 60, ((10, 5),))]
    prepared = make_prepared_dataset(tmp_path / "prepared", recs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SZBENCH_")}
    env["SZBENCH_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring"))
    command = [sys.executable, "-m", "szbench.cli.main", "evaluate", "--tar", str(archive)]
    command += ["--dataset", str(prepared)]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout + done.stderr
    # Refused up front (bad arguments: exit 2), naming the field; no container, no wait.
    assert done.returncode == 2, out[-3000:]
    assert "configuration field config.WorkingDir holds a NUL character" in out
