"""A finished evaluation never waits behind other work (issue 29.9).

Finishing (the finalize that aggregates a finished evaluation's runs, and re-scores) has its
own queue, ``score``, which every worker and the embedded worker of ``szbench serve``
consume beside their run queues. Before, the finalize went to the evaluation's ``cpu`` queue
behind every run queued there: with one other evaluation queued, a finished one stayed
``running`` until that one's runs were done. ``benchmarks/finalize_latency.py`` measures the
wait from the last stored run to DONE, with both routings, on Redis and real workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from szbench import queue
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import Evaluation, EvaluationStatus, RecordingRun
from szbench_worker import pipeline
from szbench_worker.embedded import start_embedded_worker
from szbench_worker.runner import RunResult

from ._pipeline_factories import Rec, make_prepared_dataset, seed_world
from .fakes import FakeRunner
from .test_pipeline_embedded import embedded, wait_finished  # noqa: F401 (a fixture)


@dataclasses.dataclass
class _EachImage(FakeRunner):
    """The fake runner, reporting the image it was asked to run (two versions here)."""

    def run(self, **kwargs: Any) -> RunResult:
        result = super().run(**kwargs)
        return dataclasses.replace(result, image_digest=kwargs["image"])


@pytest.fixture
def captured() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    sent: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    try:
        yield sent
    finally:
        queue.set_sender(None)


def test_finishing_goes_to_the_score_queue_whatever_the_evaluations_queue(
    captured: list[tuple[str, str, dict[str, Any]]],
) -> None:
    for evaluation_queue in (queue.QUEUE_CPU, queue.QUEUE_GPU):
        queue.send_task(queue.TASK_FINALIZE, queue=evaluation_queue, evaluation_id=1)
        queue.send_task(queue.TASK_RESCORE, queue=evaluation_queue, evaluation_id=2)
        # A run and a start stay on the evaluation's queue (its hosts run its containers).
        queue.send_task(queue.TASK_RUN_RECORDING, queue=evaluation_queue, run_id=3)
        queue.send_task(queue.TASK_START_EVALUATION, queue=evaluation_queue, evaluation_id=4)
    assert [(name, q) for name, q, _ in captured] == [
        (queue.TASK_FINALIZE, "score"),
        (queue.TASK_RESCORE, "score"),
        (queue.TASK_RUN_RECORDING, "cpu"),
        (queue.TASK_START_EVALUATION, "cpu"),
        (queue.TASK_FINALIZE, "score"),
        (queue.TASK_RESCORE, "score"),
        (queue.TASK_RUN_RECORDING, "gpu"),
        (queue.TASK_START_EVALUATION, "gpu"),
    ]


@pytest.mark.slow
def test_a_finished_evaluation_is_done_before_the_runs_queued_behind_it(
    embedded: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two evaluations queued at once on the embedded worker (one slot, as ``szbench serve``
    runs it): the first is DONE as soon as its last run is stored, not after the second's
    eight runs that were queued before its finalize."""
    first_recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in (1, 2)]
    second_recs = [Rec(f"sub-0{i}", "run-00", 600, ((100, 20),)) for i in range(1, 9)]
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=_EachImage(), resolve_image=lambda v: v.image_digest)
    )
    with session_scope() as session:
        ids = []
        for slug, recs, digest in (
            ("held-a", first_recs, "sha256:" + "a" * 64),
            ("held-b", second_recs, "sha256:" + "b" * 64),
        ):
            prepared = make_prepared_dataset(tmp_path / slug, recs)
            world = seed_world(session, prepared, recs, slug=slug, digest=digest)
            ids.append(
                evaluations.create_evaluation(
                    session, algorithm_version=world.version, dataset_version=world.dataset_version
                ).id
            )
    first, second = ids
    worker = start_embedded_worker(upgrade_database=False)
    try:
        wait_finished(first)
        wait_finished(second)
    finally:
        worker.stop()
    with session_scope() as session:
        done = session.get_one(Evaluation, first)
        assert done.status == EvaluationStatus.DONE
        assert session.get_one(Evaluation, second).status == EvaluationStatus.DONE
        second_finished = session.scalars(
            select(RecordingRun.finished_at).where(RecordingRun.evaluation_id == second)
        ).all()
    assert done.finished_at is not None
    after = [t for t in second_finished if t is not None and t > done.finished_at]
    # Its finalize went ahead of the second evaluation's runs (on cpu: behind all eight).
    assert len(after) >= 6, f"{len(after)} of 8 runs of the other evaluation ran after DONE"
