"""``szbench evaluate`` end to end with the real baseline image on synthetic EEG.

Synthetic SzCORE BIDS EEG (raw, so the command prepares it into its cache), the bundled
baseline built offline into an image, the embedded queue and worker, a real Docker engine.
The same detector run as a trusted local process must give the same scores, and the image
loaded from a ``docker save`` tarball has the same digest, so its results are reused.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound
from typer.testing import CliRunner

from szbench import db, queue
from szbench.cli.main import app
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import Evaluation

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BASELINE_TAG = "szbench-test/baseline:pipeline"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from szbench_worker.synth import generate_dataset

    root = tmp_path_factory.mktemp("synth") / "bids"
    # Two subjects, one 10-minute recording each (the SzCORE minimum), seizures likely.
    generate_dataset(
        root, subjects=2, hours=10 / 60, recording_minutes=10, seed=7, seizures_per_hour=12
    )
    return root


@pytest.fixture(scope="module")
def baseline_image(test_images: dict[str, str], docker_client: Any) -> str:
    from szbench_worker.docker_runner import build_image

    build_image(REPO / "examples" / "baseline", BASELINE_TAG, docker_client)
    return BASELINE_TAG


@pytest.fixture
def embedded(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    settings_env.setenv("SZBENCH_RUNNER_WORK_DIR", str(tmp_path / "runs"))
    settings_env.setenv("SZBENCH_RUNNER_MEMORY_BYTES", str(1024**3))
    settings_env.setenv("SZBENCH_RUNNER_TIMEOUT_S", "300")
    settings_env.chdir(REPO)
    get_settings.cache_clear()
    db.reset_engine()
    queue.reset_celery()
    yield Path(get_settings().data_dir)
    queue.reset_celery()


def evaluate(*args: str) -> Any:
    result = CliRunner().invoke(app, ["evaluate", *args])
    assert result.exit_code == 0, result.output
    return result


def test_evaluate_baseline_image_on_synthetic_eeg(
    embedded: Path, synthetic: Path, baseline_image: str, tmp_path: Path
) -> None:
    docker_json = tmp_path / "docker.json"
    out = evaluate(
        "--image", baseline_image, "--dataset", str(synthetic), "--json", str(docker_json)
    )
    assert "docker sandbox" in out.output
    assert "F1" in out.output
    payload = json.loads(docker_json.read_text())
    assert [r["path"] for r in payload["recordings"]] == [
        "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_eeg.edf",
        "sub-02/ses-01/eeg/sub-02_ses-01_task-szMonitoring_run-00_eeg.edf",
    ]
    assert all(r["outcome"] == "ok" for r in payload["recordings"]), payload["recordings"]
    # What the platform stores of each run, for profiling an image without the database.
    for r in payload["recordings"]:
        assert r["exit_code"] == 0
        assert r["wall_time_s"] > 0
        assert r["peak_memory_bytes"] > 1024**2  # the engine's cgroup figure, not a guess
        assert r["detections"] is not None
        assert all(d["duration_s"] > 0 and d["event_type"] == "sz" for d in r["detections"])
    assert payload["event_results"]["sensitivity"] is not None
    assert "precision_std" in payload["event_results"]
    # The raw tree was prepared once into the cache, keyed by its content.
    prepared = list((embedded / "datasets").glob("*/manifest.json"))
    assert len(prepared) == 1

    # The same detector as a trusted local process: the same scores.
    local_json = tmp_path / "local.json"
    local = evaluate(
        "--local-process",
        "python3 examples/baseline/detect.py",
        "--dataset",
        str(synthetic),
        "--json",
        str(local_json),
    )
    assert "NOT sandboxed" in local.output
    local_payload = json.loads(local_json.read_text())
    assert local_payload["event_results"] == payload["event_results"]
    assert local_payload["sample_results"] == payload["sample_results"]

    # The image as a `docker save` tarball: same digest, so every result is reused.
    tar = tmp_path / "baseline.tar"
    subprocess.run(["docker", "save", "-o", str(tar), baseline_image], check=True)
    evaluate("--tar", str(tar), "--dataset", str(synthetic))
    with session_scope() as session:
        evs = session.query(Evaluation).order_by(Evaluation.id).all()
        assert len(evs) == 3
        assert evs[2].image_digest == evs[0].image_digest
        assert all(r.reused_from_id is not None for r in evs[2].runs)
        assert evs[2].result is not None
        assert evs[0].result is not None
        assert evs[2].result.event_f1 == evs[0].result.event_f1


def test_evaluate_without_docker_points_to_the_local_process(
    embedded: Path, synthetic: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from szbench_worker import docker_runner

    monkeypatch.setattr(docker_runner, "engine_available", lambda: False)
    result = CliRunner().invoke(app, ["evaluate", "--image", "x", "--dataset", str(synthetic)])
    assert result.exit_code == 2
    assert "--local-process" in result.output
    assert sys.executable  # keep the interpreter import meaningful for the local runner


def test_evaluate_tar_checks_the_archive_limits(
    embedded: Path, synthetic: Path, tmp_path: Path, docker_client: Any
) -> None:
    """Issue 21 point 3: `--tar` goes through the upload's archive check, so a gzip bomb is
    refused, naming the setting, before the engine expands it."""
    from szbench_worker.docker_runner import inspect_image
    from szbench_worker.runner import ImageError
    from tests.platform.images import docker_save, member

    bomb = tmp_path / "bomb.tar.gz"
    image_id = docker_save(
        bomb, gzip=True, layers=[[(member("app/zeros.bin"), bytes(160 * 2**20))]]
    )
    try:
        result = CliRunner().invoke(
            app, ["evaluate", "--tar", str(bomb), "--dataset", str(synthetic)]
        )
        assert result.exit_code == 2, result.output
        assert "limit ARCHIVE_MAX_EXPANSION_RATIO" in result.output
        with pytest.raises(ImageError, match="not present"):
            inspect_image(image_id, docker_client)
    finally:
        with contextlib.suppress(ImageNotFound):  # not there: the expected case
            docker_client.images.remove(image_id, force=True)
