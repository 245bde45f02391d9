"""The pipeline's logic on real PostgreSQL, with the fake runner standing in for Docker.

Tasks are captured where they would be sent (after commit) and delivered by hand, in
order, which lets the tests deliver one twice, drop one or interleave two attempts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from szbench import db, queue
from szbench.config import get_settings
from szbench.db import session_scope
from szbench.evaluations import service as evaluations
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    DatasetResult,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    RecordingRun,
    RunOutcome,
    SubjectResult,
    VersionStatus,
)
from szbench_scoring import Annotations, ScoringParams, aggregate, score_recording
from szbench_worker import pipeline
from szbench_worker.pipeline.claim import Claim, claim_run
from szbench_worker.pipeline.store import store_result
from szbench_worker.runner import RunnerError

from ._pipeline_factories import Rec, events_tsv, make_prepared_dataset, seed_world, truncate_all
from .fakes import FakeRun, FakeRunner

DIGEST = "sha256:" + "a" * 64

RECS = [
    Rec("sub-01", "run-00", 600, ((100, 40),)),
    Rec("sub-01", "run-01", 600, ()),
    Rec("sub-02", "run-00", 600, ((300, 60), (500, 20))),
    Rec("sub-02", "run-01", 600, ((50, 30),)),
]


@dataclass
class Env:
    sent: list[tuple[str, str, dict[str, Any]]]
    runner: FakeRunner
    prepared: Path
    delivered: list[str] = field(default_factory=list)


DISPATCH: dict[str, Callable[..., Any]] = {
    queue.TASK_START_EVALUATION: lambda evaluation_id: pipeline.start_evaluation(evaluation_id),
    queue.TASK_RUN_RECORDING: lambda run_id: pipeline.run_recording(run_id),
    queue.TASK_FINALIZE: lambda evaluation_id: pipeline.finalize_evaluation(evaluation_id),
    queue.TASK_RESCORE: lambda evaluation_id: pipeline.rescore_evaluation(evaluation_id),
    queue.TASK_SMOKE_TEST: lambda algorithm_version_id: pipeline.smoke_test(algorithm_version_id),
}


def deliver(env: Env, *, duplicate: bool = False) -> list[Any]:
    """Run every sent task (and the ones they send) in order; ``duplicate`` delivers each twice."""
    results = []
    steps = 0
    while env.sent:
        name, _queue, kwargs = env.sent.pop(0)
        env.delivered.append(name)
        results.append(DISPATCH[name](**kwargs))
        if duplicate:
            results.append(DISPATCH[name](**kwargs))
        steps += 1
        assert steps < 500, "tasks keep enqueueing each other"
    return results


def script(recording: Path) -> FakeRun:
    """The fake algorithm: finds sub-01 run-00's seizure, crashes on sub-02 run-01."""
    if recording.name.startswith("sub-01_ses-01_task-szMonitoring_run-00"):
        return FakeRun(tsv=events_tsv(600, [(110, 30)]))
    if recording.name.startswith("sub-02_ses-01_task-szMonitoring_run-01"):
        return FakeRun(outcome=RunOutcome.CRASHED, exit_code=3, log="Traceback: boom")
    if recording.name.startswith("sub-02_ses-01_task-szMonitoring_run-00"):
        return FakeRun(tsv=events_tsv(600, [(305, 50), (2, 5)]))
    return FakeRun(tsv=events_tsv(600))


@pytest.fixture(name="env")
def pipeline_env(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Env]:
    """Real PostgreSQL, the fake runner, sends captured (test_reconcile uses it too)."""
    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    get_settings.cache_clear()
    db.reset_engine()
    sent: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: sent.append((name, q, kwargs)))
    runner = FakeRunner(script=script, image_digest=DIGEST)
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    prepared = make_prepared_dataset(tmp_path / "prepared", RECS)
    try:
        yield Env(sent=sent, runner=runner, prepared=prepared)
    finally:
        queue.set_sender(None)
        pipeline.set_dependencies(None)
        with session_scope() as session:
            truncate_all(session)


def new_evaluation(env: Env, **kwargs: Any) -> int:
    with session_scope() as session:
        world = seed_world(session, env.prepared, RECS, digest=DIGEST)
        evaluation = evaluations.create_evaluation(
            session,
            algorithm_version=world.version,
            dataset_version=world.dataset_version,
            created_by=world.user,
            **kwargs,
        )
        return evaluation.id


def second_evaluation(evaluation_id: int, **kwargs: Any) -> int:
    with session_scope() as session:
        first = session.get_one(Evaluation, evaluation_id)
        return evaluations.create_evaluation(
            session,
            algorithm_version=first.algorithm_version,
            dataset_version=first.dataset_version,
            **kwargs,
        ).id


def expected_report(params: ScoringParams | None = None) -> Any:
    """The scorer's own answer for RECS and the fake algorithm's detections."""
    hyps: dict[str, list[tuple[float, float]] | None] = {
        "sub-01_ses-01_task-szMonitoring_run-00": [(110, 140)],
        "sub-01_ses-01_task-szMonitoring_run-01": [],
        "sub-02_ses-01_task-szMonitoring_run-00": [(305, 355), (2, 7)],
        "sub-02_ses-01_task-szMonitoring_run-01": None,  # crashed: no detections
    }
    scores = {}
    for rec in RECS:
        ref = Annotations.from_events([(o, o + d) for o, d in rec.seizures], rec.duration_s)
        hyp = hyps[rec.key]
        hyp_ann = None if hyp is None else Annotations.from_events(hyp, rec.duration_s)
        scores[(rec.subject, rec.key)] = score_recording(ref, hyp_ann, params)
    return aggregate(scores, params=params)


def test_evaluation_end_to_end_with_fake_runner(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    # Nothing is sent before the commit; exactly one start task after it.
    assert [name for name, _, _ in env.sent] == [queue.TASK_START_EVALUATION]
    assert env.sent[0][2] == {"evaluation_id": evaluation_id}
    deliver(env)

    assert len(env.runner.calls) == 4
    # Each run got exactly one recording, never the dataset folder.
    assert all(Path(str(c["recording"])).suffix == ".edf" for c in env.runner.calls)
    assert len({str(c["recording"]) for c in env.runner.calls}) == 4
    with session_scope() as session:
        evaluation = session.get_one(Evaluation, evaluation_id)
        assert evaluation.status == EvaluationStatus.DONE
        assert (evaluation.recordings_done, evaluation.recordings_total) == (4, 4)
        assert "1 of 4 recordings" in evaluation.message
        # Not presented as a normal score (issue 16 point 1): whether it ranks is a rule.
        assert "an incomplete result" in evaluation.message
        assert "decides whether it is ranked" in evaluation.message
        runs = {r.recording.key: r for r in evaluation.runs}
        crashed = runs["sub-02_ses-01_task-szMonitoring_run-01"]
        assert crashed.outcome == RunOutcome.CRASHED
        assert crashed.detections_tsv is None
        assert crashed.event_fn == 1
        assert crashed.event_tp == 0
        found = runs["sub-01_ses-01_task-szMonitoring_run-00"]
        assert found.outcome == RunOutcome.OK
        assert (found.event_tp, found.event_fp, found.event_fn) == (1, 0, 0)
        assert "110.0" in (found.detections_tsv or "")
        assert found.worker_host == "fake"
        assert found.finished_at is not None
        assert found.attempts == 1

        expected = expected_report()
        result = session.scalars(
            select(DatasetResult).where(DatasetResult.evaluation_id == evaluation_id)
        ).one()
        assert result.subjects == 2
        assert result.recordings == 4
        assert result.missing_hypotheses == 1
        assert result.event_f1 == pytest.approx(expected.event_mean.f1)
        assert result.sample_sensitivity == pytest.approx(expected.sample_mean.sensitivity)
        report = result.report
        assert report["event_results"] == pytest.approx(expected.to_szcore_json()["event_results"])
        assert report["event_results"]["f1_std"] == pytest.approx(expected.event_std.f1)
        assert report["pooled"] == expected.to_szcore_json(pooled=True)
        assert report["pooled_counts"]["event"]["tp"] == expected.pooled.event.tp
        subjects = session.scalars(
            select(SubjectResult)
            .where(SubjectResult.evaluation_id == evaluation_id)
            .order_by(SubjectResult.subject)
        ).all()
        assert [s.subject for s in subjects] == ["sub-01", "sub-02"]
        by_subject = {s.subject: s for s in expected.subjects}
        for row in subjects:
            assert row.recordings == 2
            want = by_subject[row.subject].event.sensitivity
            assert row.event_sensitivity == pytest.approx(want)
            assert row.counts["event"]["tp"] == by_subject[row.subject].counts.event.tp


def test_finalize_bumps_the_change_counters(env: Env) -> None:
    """The stored result shows at once on every cached read (szbench.changes)."""

    def counters(evaluation_id: int) -> tuple[int, int, int]:
        with session_scope() as session:
            ev = session.get_one(Evaluation, evaluation_id)
            return (
                ev.revision,
                ev.algorithm_version.algorithm.revision,
                ev.dataset_version.revision,
            )

    evaluation_id = new_evaluation(env)
    before = counters(evaluation_id)
    deliver(env)
    after = counters(evaluation_id)
    assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)


def test_progress_is_visible_while_it_runs(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    _name, _, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    runs = [kw["run_id"] for n, _, kw in env.sent if n == queue.TASK_RUN_RECORDING]
    assert len(runs) == 4
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert (ev.status, ev.recordings_done, ev.recordings_total) == (
            EvaluationStatus.RUNNING,
            0,
            4,
        )
    step = pipeline.run_recording(runs[0])
    assert step.progress == (1, 4)
    step = pipeline.run_recording(runs[1])
    assert step.progress == (2, 4)
    with session_scope() as session:
        assert session.get_one(Evaluation, evaluation_id).recordings_done == 2


def test_every_task_delivered_twice_changes_nothing(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    results = deliver(env, duplicate=True)
    # Each recording ran in a container once; the second deliveries were no-ops.
    assert len(env.runner.calls) == 4
    finalized = [r for r in results if r is True]
    assert len(finalized) == 1, "aggregation must happen exactly once"
    with session_scope() as session:
        assert (
            session.scalar(
                select(func.count(RecordingRun.id)).where(
                    RecordingRun.evaluation_id == evaluation_id
                )
            )
            == 4
        )
        ev = session.get_one(Evaluation, evaluation_id)
        assert (ev.status, ev.recordings_done) == (EvaluationStatus.DONE, 4)
        assert (
            session.scalar(
                select(func.count(SubjectResult.id)).where(
                    SubjectResult.evaluation_id == evaluation_id
                )
            )
            == 2
        )


def test_two_attempts_in_flight_store_one_result(env: Env) -> None:
    """A redelivery while the first attempt still runs: both run, only one result counts."""
    new_evaluation(env)
    _, _, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    run_id = next(kw["run_id"] for n, _, kw in env.sent if n == queue.TASK_RUN_RECORDING)
    settings = get_settings()
    first = claim_run(run_id, settings)
    second = claim_run(run_id, settings)
    assert isinstance(first, Claim)
    assert isinstance(second, Claim)
    out = pipeline.work_dir() / "t"
    make = lambda: env.runner.run(  # noqa: E731
        image=DIGEST, recording=first.recording_path, output_dir=out, limits=first.limits
    )
    assert store_result(run_id, make(), resolved_image=DIGEST).stored
    again = store_result(run_id, make(), resolved_image=DIGEST)
    assert not again.stored
    assert "already finished" in again.skipped
    with session_scope() as session:
        run = session.get_one(RecordingRun, run_id)
        assert run.attempts == 2
        assert session.get_one(Evaluation, run.evaluation_id).recordings_done == 1


def test_same_image_and_recordings_reuse_results_without_containers(env: Env) -> None:
    first = new_evaluation(env)
    deliver(env)
    assert len(env.runner.calls) == 4
    second = second_evaluation(first)
    deliver(env)
    assert len(env.runner.calls) == 4, "a reused result must not run a container"
    with session_scope() as session:
        ev = session.get_one(Evaluation, second)
        assert ev.status == EvaluationStatus.DONE
        first_runs = {r.recording_id: r for r in session.get_one(Evaluation, first).runs}
        for run in ev.runs:
            assert run.reused_from_id == first_runs[run.recording_id].id
            assert run.outcome == first_runs[run.recording_id].outcome
            assert run.event_tp == first_runs[run.recording_id].event_tp
        assert ev.result is not None
        assert ev.result.event_f1 == session.get_one(Evaluation, first).result.event_f1


def test_a_result_from_another_image_is_neither_stored_nor_reused(env: Env) -> None:
    """Issue 21: the engine reporting another image than the version's stores nothing."""
    from szbench_worker.pipeline.attribution import MisattributedResult

    first = new_evaluation(env)
    other = "sha256:" + "b" * 64
    env.runner.image_digest = other  # what the engine says it started
    _, _, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    run_ids = [kw["run_id"] for n, _, kw in env.sent if n == queue.TASK_RUN_RECORDING]
    for run_id in run_ids:
        with pytest.raises(MisattributedResult, match=other):
            pipeline.run_recording(run_id)
    with session_scope() as session:
        ev = session.get_one(Evaluation, first)
        assert ev.recordings_done == 0
        assert all(
            r.finished_at is None and r.detections_tsv is None and r.image_id is None
            for r in ev.runs
        )

    # Rows that claim a result of this version but record another image (as an earlier
    # `szbench evaluate` stored them): never served from the reuse cache.
    env.sent.clear()
    env.runner.calls.clear()
    env.runner.image_digest = DIGEST
    with session_scope() as session:
        for run in session.get_one(Evaluation, first).runs:
            run.outcome = RunOutcome.OK
            run.detections_tsv = events_tsv(600, [(1, 2)])
            run.finished_at = datetime.now(UTC)
            run.image_id = other
        session.get_one(Evaluation, first).status = EvaluationStatus.DONE
    second = second_evaluation(first)
    deliver(env)
    assert len(env.runner.calls) == 4, "every recording ran again with the version's image"
    with session_scope() as session:
        ev = session.get_one(Evaluation, second)
        assert ev.status == EvaluationStatus.DONE
        assert all(r.reused_from_id is None and r.image_id == DIGEST for r in ev.runs)
        assert [c["image"] for c in env.runner.calls] == [DIGEST] * 4


def test_rerun_reuses_nothing(env: Env) -> None:
    first = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        again = evaluations.rerun_evaluation(session, session.get_one(Evaluation, first))
        again_id = again.id
        assert again.reuse_runs is False
    deliver(env)
    assert len(env.runner.calls) == 8
    with session_scope() as session:
        ev = session.get_one(Evaluation, again_id)
        assert ev.status == EvaluationStatus.DONE
        assert all(r.reused_from_id is None and r.attempts == 1 for r in ev.runs)


def test_rescore_uses_stored_detections_and_no_container(env: Env) -> None:
    first = new_evaluation(env)
    deliver(env)
    params = {"tolerance_start_s": 0.0, "tolerance_end_s": 0.0, "min_duration_between_events_s": 1}
    with session_scope() as session:
        rescore = evaluations.rescore_evaluation(
            session, session.get_one(Evaluation, first), scoring_params=params
        )
        rescore_id = rescore.id
        assert rescore.official is False
        assert rescore.kind == EvaluationKind.RESCORE
    assert [n for n, _, _ in env.sent] == [queue.TASK_RESCORE]
    deliver(env)
    assert len(env.runner.calls) == 4
    with session_scope() as session:
        ev = session.get_one(Evaluation, rescore_id)
        assert ev.status == EvaluationStatus.DONE
        assert len(ev.runs) == 4
        assert all(r.reused_from_id is not None for r in ev.runs)
        want = expected_report(ScoringParams(**params))
        assert ev.result is not None
        assert ev.result.report["event_results"] == pytest.approx(
            want.to_szcore_json()["event_results"], nan_ok=True
        )
        assert ev.result.report["params"]["tolerance_start_s"] == 0.0


def test_cancel_stops_pending_runs(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    _, _, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    run_ids = [kw["run_id"] for n, _, kw in env.sent if n == queue.TASK_RUN_RECORDING]
    pipeline.run_recording(run_ids[0])
    with session_scope() as session:
        evaluations.cancel_evaluation(session, session.get_one(Evaluation, evaluation_id))
    deliver(env)
    assert len(env.runner.calls) == 1
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.CANCELLED
        assert ev.recordings_done == 1
        assert ev.result is None
        with pytest.raises(Exception, match="already cancelled"):
            evaluations.cancel_evaluation(session, ev)


def _fail_one_run(env: Env) -> tuple[int, int]:
    """An evaluation whose sub-01 run-01 raised a platform fault; the other runs stored."""

    class Broken(FakeRunner):
        def run(self, **kwargs: Any) -> Any:
            if "sub-01_ses-01_task-szMonitoring_run-01" in str(kwargs["recording"]):
                raise RunnerError("docker daemon unreachable")
            return super().run(**kwargs)

    runner = Broken(script=script, image_digest=DIGEST)
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=runner, resolve_image=lambda v: v.image_digest)
    )
    evaluation_id = new_evaluation(env)
    _, _, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    failed_run = None
    for name, _, kw in list(env.sent):
        if name != queue.TASK_RUN_RECORDING:
            continue
        env.sent.remove((name, _, kw))
        try:
            pipeline.run_recording(**kw)
        except RunnerError:
            failed_run = kw["run_id"]
    assert failed_run is not None
    with session_scope() as session:
        run = session.get_one(RecordingRun, failed_run)
        assert run.outcome is None
        assert run.finished_at is None
    return evaluation_id, failed_run


def test_a_task_that_fails_for_good_by_a_bug_fails_the_evaluation(env: Env) -> None:
    evaluation_id, failed_run = _fail_one_run(env)
    # A bug (not a platform fault): the task's failure handler records it; FAILED.
    pipeline.record_task_failure(
        queue.TASK_RUN_RECORDING, {"run_id": failed_run}, RunnerError("docker daemon unreachable")
    )
    deliver(env)
    with session_scope() as session:
        run = session.get_one(RecordingRun, failed_run)
        assert run.outcome == RunOutcome.INFRASTRUCTURE_ERROR
        assert "unreachable" in run.admin_log
        assert "unreachable" not in run.submitter_message
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.FAILED
        assert "platform fault" in ev.message
        assert ev.result is None


def test_retries_run_out_on_a_platform_fault_the_reconciler_sends_the_run_again(
    env: Env,
) -> None:
    """Issue 21 point 8: a host that was sick for a while must not leave the evaluation
    FAILED; the run is released, and the reconciler's next pass sends it again."""
    from szbench_worker import reconcile

    evaluation_id, failed_run = _fail_one_run(env)
    pipeline.record_task_failure(
        queue.TASK_RUN_RECORDING,
        {"run_id": failed_run},
        RunnerError("docker daemon unreachable"),
        platform=True,
    )
    with session_scope() as session:
        run = session.get_one(RecordingRun, failed_run)
        assert run.finished_at is None
        assert run.released_at is not None
        assert "unreachable" in run.admin_log
        assert session.get_one(Evaluation, evaluation_id).status == EvaluationStatus.RUNNING
    env.sent.clear()
    reconcile.write_heartbeat(
        reconcile.Beat(
            id="h1:1.1",
            host="h1",
            node="cpu@h1",
            queues=["cpu"],
            concurrency=1,
            run_ids=[],
            free_for_s=None,  # busy: nothing proves the queue empty, yet the run is lost
        )
    )
    assert reconcile.reconcile().resent_runs == [failed_run]
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=env.runner, resolve_image=lambda v: v.image_digest)
    )
    deliver(env)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        run = session.get_one(RecordingRun, failed_run)
        assert run.released_at is None
        assert run.attempts == 2


def test_wrong_recording_duration_is_invalid_output(env: Env) -> None:
    def lying(recording: Path) -> FakeRun:
        # Within the runner's 1 s tolerance, but another mask length for the scorer.
        return FakeRun(tsv=events_tsv(599.5, [(10, 5)]))

    env.runner.script = lying
    evaluation_id = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        for run in ev.runs:
            assert run.outcome == RunOutcome.INVALID_OUTPUT
            assert run.submitter_message.startswith("/output/")
            assert str(env.prepared) not in run.submitter_message
        assert ev.result is not None
        assert ev.result.missing_hypotheses == 4


def seed_pending_on_public_sample(session: Any, env: Env) -> Any:
    """A pending algorithm version and the public-sample dataset its smoke test runs on."""
    return seed_world(
        session,
        env.prepared,
        RECS,
        slug="public-sample",
        kind=DatasetKind.PUBLIC_SAMPLE,
        digest=DIGEST,
        status=VersionStatus.PENDING,
    )


def test_smoke_test_activates_and_queues_held_out_evaluations(env: Env) -> None:
    with session_scope() as session:
        world = seed_pending_on_public_sample(session, env)
        held = make_prepared_dataset(env.prepared.parent / "held", RECS[:2], seed=1)
        seed_world(session, held, RECS[:2], slug="held", digest=DIGEST)
        evaluations.request_smoke_test(session, world.version)
        version_id = world.version.id
    assert [n for n, _, _ in env.sent] == [queue.TASK_SMOKE_TEST]
    _, _, kwargs = env.sent.pop(0)
    outcome = pipeline.smoke_test(**kwargs)
    assert outcome.status == VersionStatus.ACTIVE
    assert outcome.evaluations_queued == 1
    assert len(env.runner.calls) == 1
    with session_scope() as session:
        version = session.get_one(AlgorithmVersion, version_id)
        assert version.status == VersionStatus.ACTIVE
        kinds = sorted(
            e.kind.value
            for e in session.scalars(
                select(Evaluation).where(Evaluation.algorithm_version_id == version_id)
            )
        )
        assert kinds == ["full", "smoke_test"]
    assert queue.TASK_START_EVALUATION in [n for n, _, _ in env.sent]


def test_smoke_test_rejects_a_crashing_algorithm(env: Env) -> None:
    env.runner.script = lambda recording: FakeRun(outcome=RunOutcome.CRASHED, exit_code=1)
    with session_scope() as session:
        world = seed_pending_on_public_sample(session, env)
        version_id = world.version.id
    outcome = pipeline.smoke_test(version_id)
    assert outcome.status == VersionStatus.REJECTED
    assert "crashed" in outcome.message
    with session_scope() as session:
        assert session.get_one(AlgorithmVersion, version_id).status == VersionStatus.REJECTED
        n_full = session.scalar(
            select(func.count(Evaluation.id)).where(Evaluation.kind == EvaluationKind.FULL)
        )
        assert n_full == 0


def test_gpu_evaluation_passes_the_workers_gpu_to_the_runner(
    env: Env, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_RUNNER_GPUS", "3")
    get_settings.cache_clear()
    with session_scope() as session:
        world = seed_world(session, env.prepared, RECS, digest=DIGEST, run_limits={"queue": "gpu"})
        evaluation = evaluations.create_evaluation(
            session, algorithm_version=world.version, dataset_version=world.dataset_version
        )
        evaluation_id = evaluation.id
        assert evaluation.queue == "gpu"
    assert {q for _, q, _ in env.sent} == {"gpu"}
    deliver(env)
    assert {c["gpus"] for c in env.runner.calls} == {("3",)}
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE
        assert all(r.gpu_model == "3" for r in ev.runs)


def test_metric_nan_is_stored_as_null(env: Env) -> None:
    evaluation_id = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        rows = session.scalars(
            select(SubjectResult).where(SubjectResult.evaluation_id == evaluation_id)
        ).all()
        for row in rows:
            for name in ("event_precision", "sample_precision"):
                value = getattr(row, name)
                assert value is None or not math.isnan(value)


def test_gpu_task_on_a_cpu_only_worker_is_an_infrastructure_fault(
    settings_env: pytest.MonkeyPatch,
) -> None:
    from szbench_worker import gpu

    settings_env.setenv("SZBENCH_RUNNER_GPUS", "")
    get_settings.cache_clear()
    with pytest.raises(RunnerError, match="without SZBENCH_RUNNER_GPUS"):
        gpu.gpus_for_queue("gpu", get_settings())
    assert gpu.gpus_for_queue("cpu", get_settings()) == ()
    settings_env.setenv("SZBENCH_RUNNER_GPUS", "GPU-a, GPU-b")
    get_settings.cache_clear()
    # One GPU per pool process: process 1 -> the first, 2 -> the second, 3 wraps around.
    assert [gpu.worker_gpus(get_settings(), i) for i in (1, 2, 3)] == [
        ("GPU-a",),
        ("GPU-b",),
        ("GPU-a",),
    ]


def test_image_off_the_allow_list_is_refused_before_any_container(
    env: Env, settings_env: pytest.MonkeyPatch
) -> None:
    evaluation_id = new_evaluation(env)
    # The operator narrows the allow-list after the evaluation was queued.
    settings_env.setenv("SZBENCH_ALLOWED_IMAGES", "sha256:" + "b" * 64)
    get_settings.cache_clear()
    deliver(env)
    assert env.runner.calls == []
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.FAILED
        assert {run.outcome for run in ev.runs} == {RunOutcome.INFRASTRUCTURE_ERROR}
        assert all("allow-list" in run.submitter_message for run in ev.runs)
        assert all(run.attempts == 1 for run in ev.runs)


def test_smoke_test_refuses_an_image_off_the_allow_list(
    env: Env, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_ALLOWED_IMAGES", "registry.local/approved/")
    get_settings.cache_clear()
    with session_scope() as session:
        world = seed_pending_on_public_sample(session, env)
        version_id = world.version.id
    outcome = pipeline.smoke_test(version_id)
    assert outcome.status == VersionStatus.REJECTED
    assert "allow-list" in outcome.message
    assert env.runner.calls == []


def test_image_over_the_archive_limits_is_the_submitters_fault(env: Env) -> None:
    """An image archive refused before `docker load` (over a limit lowered since its upload)
    ends each run crashed with a fixed message, not as a retried platform fault."""
    from szbench_worker.runner import ImageRefused

    def refuse(version: AlgorithmVersion) -> str:
        raise ImageRefused("img.tar: the image's files add up to more than 8 bytes")

    pipeline.set_dependencies(pipeline.Dependencies(runner=env.runner, resolve_image=refuse))
    evaluation_id = new_evaluation(env)
    deliver(env)
    assert env.runner.calls == []
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert {run.outcome for run in ev.runs} == {RunOutcome.CRASHED}
        assert {run.submitter_message for run in ev.runs} == {pipeline.IMAGE_REFUSED_MESSAGE}
        assert all("more than 8 bytes" in run.admin_log for run in ev.runs)
        assert all(run.attempts == 1 for run in ev.runs)


def test_smoke_test_rejects_an_image_over_the_archive_limits(env: Env) -> None:
    from szbench_worker.runner import ImageRefused

    def refuse(version: AlgorithmVersion) -> str:
        raise ImageRefused("img.tar: the archive holds more than 3 members (limit X)")

    pipeline.set_dependencies(pipeline.Dependencies(runner=env.runner, resolve_image=refuse))
    with session_scope() as session:
        version_id = seed_pending_on_public_sample(session, env).version.id
    outcome = pipeline.smoke_test(version_id)
    assert outcome.status == VersionStatus.REJECTED
    assert "more than 3 members" in outcome.message
    assert env.runner.calls == []


@pytest.mark.parametrize(
    "tsv",
    [
        # A NUL in a column the scorer ignores: PostgreSQL's text cannot hold it.
        events_tsv(600, [(10, 5)]).replace("\tn/a\t2020", "\tFp1\x00secret\t2020").encode(),
        # Bytes that are not UTF-8, where the scorer does not look.
        events_tsv(600, [(10, 5)]).encode().replace(b"2020-01-01", b"2020\xff\xfe-01"),
        # A NUL in a row the parser refuses: the fixed message wins, the row is not quoted.
        events_tsv(600, [(10, 5)]).replace("\tsz\t", "\tsz\x00secret\t").encode(),
    ],
    ids=["nul", "not-utf8", "nul-in-a-refused-row"],
)
def test_output_the_database_cannot_hold_is_invalid_output(env: Env, tsv: bytes) -> None:
    """Issue 21 point 5: the submitter's invalid_output with a fixed message, not a platform
    fault at every recording that fails the evaluation."""
    from szbench_worker.runner import UNSTORABLE_OUTPUT

    env.runner.script = lambda recording: FakeRun(tsv=tsv)
    evaluation_id = new_evaluation(env)
    deliver(env)
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        assert ev.status == EvaluationStatus.DONE, ev.message
        assert len(ev.runs) == len(RECS)
        for run in ev.runs:
            assert run.outcome == RunOutcome.INVALID_OUTPUT
            assert run.submitter_message.startswith("/output/")
            assert run.submitter_message.endswith(UNSTORABLE_OUTPUT)
            assert "secret" not in run.submitter_message
            assert run.detections_tsv is None
        assert ev.result is not None
        assert ev.result.missing_hypotheses == len(RECS)
