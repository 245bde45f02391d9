"""Issue 21: every result of ``szbench evaluate`` comes from its own evaluation's image.

Real processes, a real Docker engine, the embedded SQLite database and queue shared by them
through one data directory. Two small images differ only in where they put their one
detection, so each stored row says which image produced it.

Before: the embedded worker ran every recording with the image of the command that
happened to run it. A killed evaluation continued by another image's ``evaluate`` was
finished with that image's detections (stored under the old digest), and two ``evaluate``
at once swapped recordings or died on a SQLite error.
"""

from __future__ import annotations

import json
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
from .conftest import BASE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

MARKER = """\
import os, time
from pathlib import Path

header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
duration = int(header[236:244]) * float(header[244:252])
time.sleep(float(os.environ["MARKER_SLEEP_S"]))
onset = float(os.environ["MARKER_ONSET_S"])
(Path("/output") / os.environ["OUTPUT"]).write_text(
    "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
    f"{onset}\\t5.0\\tsz\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{duration:.1f}\\n"
)
"""


def marker_image(client: Any, tmp_path: Path, onset_s: int, sleep_s: float) -> str:
    """An image that sleeps ``sleep_s`` then writes one detection at ``onset_s``; its id."""
    from szbench_worker.docker_runner import build_image

    context = tmp_path / f"marker-{onset_s}"
    context.mkdir()
    (context / "run.py").write_text(MARKER)
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nCOPY run.py /app/run.py\n"
        f"ENV MARKER_ONSET_S={onset_s} MARKER_SLEEP_S={sleep_s}\n"
        'CMD ["python3", "/app/run.py"]\n'
    )
    return build_image(context, f"szbench-test/marker-{onset_s}:latest", client).digest


@pytest.fixture
def shared_data_dir(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, docker_client: Any, test_images: Any
) -> Iterator[dict[str, str]]:
    """Settings shared by this process and the CLI subprocesses (one data directory)."""
    from szbench_worker.docker_runner import cleanup_orphans

    host = f"evaluate-images-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_WORKER_HOST": host,
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_RUNNER_TIMEOUT_S": "120",
    }
    use_settings(settings_env, values)
    env = child_env()
    try:
        yield env
    finally:
        cleanup_orphans(docker_client, host=host, everything=True)
        db.reset_engine()
        queue.reset_celery()


def evaluate_command(image: str, prepared: Path, name: str, json_out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "szbench.cli.main",
        "evaluate",
        "--image",
        image,
        "--dataset",
        str(prepared),
        "--name",
        name,
        "--json",
        str(json_out),
    ]


def stored_onsets(evaluation: Evaluation) -> list[float | None]:
    """The onset of each run's one detection, as stored (None: no detections stored)."""
    onsets = []
    for run in sorted(evaluation.runs, key=lambda r: r.id):
        if run.detections_tsv is None:
            onsets.append(None)
            continue
        (row,) = run.detections_tsv.strip().splitlines()[1:]
        onsets.append(float(row.split("\t")[0]))
    return onsets


RECS = [Rec("sub-01", "run-00", 600, ((10, 20),)), Rec("sub-02", "run-00", 600, ((30, 20),))]


def test_killed_evaluate_continued_by_another_image_keeps_its_own_image(
    shared_data_dir: dict[str, str], docker_client: Any, tmp_path: Path
) -> None:
    from szbench_worker.docker_runner import LABEL_HOST

    env = shared_data_dir
    slow = marker_image(docker_client, tmp_path, onset_s=100, sleep_s=3)
    other = marker_image(docker_client, tmp_path, onset_s=200, sleep_s=0)
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    first = subprocess.Popen(
        evaluate_command(slow, prepared, "slow", tmp_path / "slow.json"),
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        label = {"label": f"{LABEL_HOST}={env['SZBENCH_WORKER_HOST']}"}
        wait_for(lambda: docker_client.containers.list(filters=label), 90, "a run container")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    with session_scope() as session:
        (killed,) = session.query(Evaluation).all()
        assert killed.status == EvaluationStatus.RUNNING
        killed_id = killed.id

    second = subprocess.run(
        evaluate_command(other, prepared, "other", tmp_path / "other.json"),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    with session_scope() as session:
        evaluations = {e.id: e for e in session.query(Evaluation).all()}
        assert len(evaluations) == 2
        killed = evaluations.pop(killed_id)
        (own,) = evaluations.values()
        assert own.status == EvaluationStatus.DONE
        # The interrupted evaluation was continued by the second command's worker (its
        # start-up recovery sent its work again, ahead of the new evaluation's) with its
        # own image, never with the other one.
        assert stored_onsets(killed) == [100.0, 100.0]
        assert all(r.outcome == RunOutcome.OK and r.image_id == slow for r in killed.runs)
        assert killed.status == EvaluationStatus.DONE
        assert stored_onsets(own) == [200.0, 200.0]
        assert all(r.image_id == other for r in own.runs)
    payload = json.loads((tmp_path / "other.json").read_text())
    assert [d["onset_s"] for r in payload["recordings"] for d in r["detections"]] == [200.0] * 2


def test_two_evaluates_on_one_data_dir_both_finish_with_their_own_results(
    shared_data_dir: dict[str, str], docker_client: Any, tmp_path: Path
) -> None:
    env = shared_data_dir
    images = {
        300: marker_image(docker_client, tmp_path, onset_s=300, sleep_s=1),
        400: marker_image(docker_client, tmp_path, onset_s=400, sleep_s=1),
    }
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    processes = {
        onset: subprocess.Popen(
            evaluate_command(image, prepared, f"m{onset}", tmp_path / f"{onset}.json"),
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for onset, image in images.items()
    }
    for process in processes.values():
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out
    for onset in images:
        payload = json.loads((tmp_path / f"{onset}.json").read_text())
        assert [r["outcome"] for r in payload["recordings"]] == ["ok", "ok"]
        found = [d["onset_s"] for r in payload["recordings"] for d in r["detections"]]
        assert found == [float(onset)] * 2
    with session_scope() as session:
        evaluations = session.query(Evaluation).all()
        assert len(evaluations) == 2
        for evaluation in evaluations:
            assert evaluation.status == EvaluationStatus.DONE
            onset = next(o for o, i in images.items() if i == evaluation.image_digest)
            assert stored_onsets(evaluation) == [float(onset)] * 2
            assert all(r.image_id == images[onset] for r in evaluation.runs)
