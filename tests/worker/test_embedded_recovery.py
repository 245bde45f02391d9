"""``szbench evaluate`` killed mid-run, then run again: the orphan goes, the evaluation ends.

Real processes, a real Docker engine, the embedded SQLite database and queue. The first
invocation is killed with SIGKILL while its container runs (so nothing of it can clean
up); the second one must remove that container and continue the same evaluation.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from szbench import db, queue
from szbench.db import session_scope
from szbench.models import Evaluation, EvaluationStatus, RunOutcome

from ._live_services import child_env, use_settings, wait_for
from ._pipeline_factories import Rec, make_prepared_dataset

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 12  # the second run of the sleeper ends by this limit


@pytest.fixture
def embedded_env(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any
) -> Iterator[tuple[dict[str, str], str]]:
    """Settings shared by this process and the CLI subprocesses; one host label."""
    from szbench_worker.docker_runner import cleanup_orphans

    host = f"embedded-recovery-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_WORKER_HOST": host,
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_RUNNER_TIMEOUT_S": str(TIMEOUT_S),
    }
    use_settings(settings_env, values)
    env = child_env()
    try:
        yield env, host
    finally:
        cleanup_orphans(docker_client, host=host, everything=True)
        db.reset_engine()
        queue.reset_celery()


def test_killed_evaluate_is_cleaned_and_continued_by_the_next(
    embedded_env: tuple[dict[str, str], str],
    test_images: dict[str, str],
    docker_client: Any,
    tmp_path: Path,
) -> None:
    # Before: the container ran on past its time limit, the evaluation stayed `running`,
    # and the next `szbench evaluate` neither removed it nor continued (a new evaluation
    # ran the recording again beside the orphan).
    from szbench_worker.docker_runner import LABEL_HOST

    env, host = embedded_env
    prepared = make_prepared_dataset(tmp_path / "prepared", [Rec("sub-01", "run-00", 600, ())])
    command = [
        sys.executable,
        "-m",
        "szbench.cli.main",
        "evaluate",
        "--image",
        test_images["sleeper"],
        "--dataset",
        str(prepared),
    ]
    label = {"label": f"{LABEL_HOST}={host}"}
    first = subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        (orphan,) = wait_for(
            lambda: docker_client.containers.list(filters=label), 60, "a run container"
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    # Killed, the process could not clean up: its container is still running.
    orphan.reload()
    assert orphan.status == "running"
    with session_scope() as session:
        (ev,) = session.query(Evaluation).all()
        assert ev.status == EvaluationStatus.RUNNING

    second = subprocess.run(
        command, env=env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S + 120
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "Continuing evaluation" in second.stderr
    # The orphan is gone (removed at start, not left to its own end: it sleeps an hour).
    assert docker_client.containers.list(all=True, filters={"id": orphan.id, **label}) == []
    assert docker_client.containers.list(all=True, filters=label) == []
    with session_scope() as session:
        (ev,) = session.query(Evaluation).all()  # the same evaluation, continued
        assert ev.status == EvaluationStatus.DONE
        (run,) = ev.runs
        # The sleeper ran again under the limit and was stopped by it this time.
        assert run.outcome == RunOutcome.TIMEOUT
        assert run.attempts == 2
