"""GPU provenance (issue 24.5): the model and driver that ``nvidia-smi`` reports for the
worker's GPU are recorded with every run and shown with the evaluation.

No GPU is on the test machines: a stand-in ``nvidia-smi`` on PATH answers the query the
worker makes (its arguments are checked), so the worker's own parsing and storing run for
real. That the real tool answers this query this way on a real GPU host has not been run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.evaluations import queries as evaluation_queries
from szbench.evaluations import service as evaluations
from szbench.models import Evaluation, EvaluationStatus
from szbench_worker.runner import describe_gpus

from ._pipeline_factories import seed_world
from .test_pipeline import (  # noqa: F401 (pipeline_env: the fixture env)
    DIGEST,
    RECS,
    Env,
    deliver,
    pipeline_env,
)

SMI = """#!/bin/sh
echo "$@" >> "{log}"
[ -n "$SMI_FAIL" ] && exit 9
echo "NVIDIA H200, 570.172.08"
"""


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in nvidia-smi first on PATH; yields the file its arguments are logged to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "smi-args"
    tool = bin_dir / "nvidia-smi"
    tool.write_text(SMI.format(log=log))
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    describe_gpus.cache_clear()
    yield log
    describe_gpus.cache_clear()


def test_model_and_driver_come_from_nvidia_smi_for_the_workers_gpu(smi: Path) -> None:
    info = describe_gpus(("3",))
    assert info is not None
    assert (info.device_ids, info.model, info.driver) == (("3",), "NVIDIA H200", "570.172.08")
    assert smi.read_text().split() == [
        "--query-gpu=name,driver_version",
        "--format=csv,noheader",
        "-i",
        "3",
    ]


def test_a_failing_nvidia_smi_leaves_the_device_id(
    smi: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMI_FAIL", "1")
    info = describe_gpus(("GPU-0f1e",))
    assert info is not None
    assert (info.device_ids, info.model, info.driver) == (("GPU-0f1e",), None, None)


def test_no_gpu_no_provenance() -> None:
    assert describe_gpus(()) is None


def test_a_gpu_evaluation_records_model_and_driver_per_run_and_shows_them(
    env: Env, settings_env: pytest.MonkeyPatch, smi: Path
) -> None:
    settings_env.setenv("SZBENCH_RUNNER_GPUS", "3")
    get_settings.cache_clear()
    with session_scope() as session:
        world = seed_world(session, env.prepared, RECS, digest=DIGEST, run_limits={"queue": "gpu"})
        evaluation_id = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        ).id
    deliver(env)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        assert {(r.gpu_model, r.gpu_driver) for r in ev.runs} == {("NVIDIA H200", "570.172.08")}
        summary = evaluation_queries.run_summaries(session, [evaluation_id])[evaluation_id]
        assert summary.gpu_models == ["NVIDIA H200"]
        assert summary.gpu_drivers == ["570.172.08"]
