"""Evaluation services (the write side): create, cancel, re-run, re-score, benchmark.

Services only flush; the caller's unit of work commits, and the tasks they enqueue are sent
after that commit (:func:`szbench.queue.enqueue_after_commit`). The work itself happens in
the worker (``szbench_worker.pipeline``, docs/pipeline.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench import clock
from szbench.auth import policy
from szbench.errors import BadRequest, Conflict
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Recording,
    User,
    VersionStatus,
)
from szbench.phases import service as phases
from szbench.queue import (
    QUEUE_CPU,
    QUEUE_GPU,
    TASK_RESCORE,
    TASK_SMOKE_TEST,
    TASK_START_EVALUATION,
    enqueue_after_commit,
)
from szbench.quotas import service as quotas
from szbench_scoring import SCORER_VERSION, ScoringParams

_NOT_COUNTED = (EvaluationStatus.FAILED, EvaluationStatus.CANCELLED)


def scoring_params_dict(params: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """Validated scoring parameters as a full dict, and whether they are SzCORE's defaults.

    Only evaluations scored with the defaults are *official* (ranked on the leaderboard).
    Raises BadRequest naming the parameter that is unknown or out of range.
    """
    defaults = ScoringParams()
    given = dict(params or {})
    known = {f.name for f in dataclasses.fields(ScoringParams)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise BadRequest(
            f"scoring_params: unknown parameter(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    try:
        chosen = ScoringParams(**given)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"scoring_params: {exc}") from exc
    return dataclasses.asdict(chosen), chosen == defaults


def evaluation_queue(algorithm_version: AlgorithmVersion, dataset_version: DatasetVersion) -> str:
    """``gpu`` when the algorithm asks for a GPU or the dataset's limits say so, else ``cpu``."""
    wanted = (dataset_version.dataset.run_limits or {}).get("queue")
    if algorithm_version.wants_gpu or wanted == QUEUE_GPU:
        return QUEUE_GPU
    return QUEUE_CPU


def held_out_work_refusal(user: User | None, version: AlgorithmVersion) -> str | None:
    """Why ``user`` may not start held-out work (an evaluation, a re-run, a re-score) of
    ``version``: its phase takes no submissions any more. A closed phase may disclose
    per-recording results; new work in it would keep that channel open. None when they may
    (admins may; versions without a phase are free)."""
    phase = version.phase
    if phase is None or policy.is_admin(user):
        return None
    refused = phases.refusal(phase)
    if refused is None:
        return None
    return (
        f"{refused}: its versions get no new evaluation, re-run or re-score on held-out data "
        "(an admin may start one)"
    )


def closed_phase_refusal(
    user: User | None, version: AlgorithmVersion, dataset_version: DatasetVersion
) -> str | None:
    """:func:`held_out_work_refusal` for work on ``dataset_version`` (public samples: free)."""
    if dataset_version.dataset.kind != DatasetKind.HELD_OUT:
        return None
    return held_out_work_refusal(user, version)


def _check_phase_open(
    user: User | None, version: AlgorithmVersion, dataset_version: DatasetVersion
) -> None:
    refused = closed_phase_refusal(user, version, dataset_version)
    if refused is not None:
        raise Conflict(refused)


def _lock(session: Session, evaluation: Evaluation) -> Evaluation:
    # Re-read under a row lock so that a worker finishing a run concurrently cannot
    # overwrite what we decide here (SQLite serialises writers instead).
    return session.execute(
        select(Evaluation)
        .where(Evaluation.id == evaluation.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one()


def create_evaluation(
    session: Session,
    *,
    algorithm_version: AlgorithmVersion,
    dataset_version: DatasetVersion,
    kind: EvaluationKind = EvaluationKind.FULL,
    created_by: User | None = None,
    reuse: bool = True,
    scoring_params: dict[str, Any] | None = None,
    published: bool | None = None,
    charge: bool = True,
    _require_active: bool = True,
) -> Evaluation:
    """Queue ``algorithm_version`` on ``dataset_version``; the start task is sent after commit.

    ``reuse=False`` forces a fresh container run on every recording. ``published=None``
    hides the results of versions in a hidden phase until an admin publishes them. A full
    evaluation ``created_by`` a user is charged to their quotas (:class:`QuotaExceeded`)
    unless ``charge=False`` (the local CLI's runs on the operator's own data).
    """
    if kind == EvaluationKind.RESCORE:
        raise BadRequest("kind: use rescore_evaluation for a re-score")
    if not algorithm_version.image_digest:
        raise Conflict(
            "the algorithm version has no image digest yet (its image is loaded by the smoke test)"
        )
    if (
        _require_active
        and kind == EvaluationKind.FULL
        and algorithm_version.status != VersionStatus.ACTIVE
    ):
        raise Conflict(
            f"the algorithm version is {algorithm_version.status.value}; only active versions "
            "are evaluated on full datasets"
        )
    if not dataset_version.is_active:
        raise Conflict(f"dataset version {dataset_version.version!r} is not active")
    total = session.scalar(
        select(func.count(Recording.id)).where(Recording.dataset_version_id == dataset_version.id)
    )
    if not total:
        raise Conflict(f"dataset version {dataset_version.version!r} has no recordings")
    params, official = scoring_params_dict(scoring_params)
    if created_by is not None:
        _check_phase_open(created_by, algorithm_version, dataset_version)
    if charge and created_by is not None and kind == EvaluationKind.FULL:
        # A full pass the user asked for (a re-run, a requested evaluation): charged to their
        # quotas, under their lock until this transaction records it. The smoke test's own
        # held-out evaluations (no created_by) were charged with the submission.
        quotas.check_evaluation(
            session,
            user=created_by,
            algorithm_version=algorithm_version,
            held_out=dataset_version.dataset.kind == DatasetKind.HELD_OUT,
        )
    if published is None:
        phase = algorithm_version.phase
        published = not (phase is not None and phase.hidden)
    queue = evaluation_queue(algorithm_version, dataset_version)
    evaluation = Evaluation(
        algorithm_version_id=algorithm_version.id,
        dataset_version_id=dataset_version.id,
        kind=kind,
        status=EvaluationStatus.QUEUED,
        image_digest=algorithm_version.image_digest,
        scorer_version=SCORER_VERSION,
        scoring_params=params,
        official=official,
        published=published,
        queue=queue,
        reuse_runs=reuse,
        recordings_total=total,
        recordings_done=0,
        created_by_id=created_by.id if created_by is not None else None,
        team_id=quotas.charged_team(created_by, algorithm_version.algorithm),
    )
    session.add(evaluation)
    session.flush()
    enqueue_after_commit(session, TASK_START_EVALUATION, queue=queue, evaluation_id=evaluation.id)
    return evaluation


def unfinished_evaluation(
    session: Session, *, algorithm_version: AlgorithmVersion, dataset_version: DatasetVersion
) -> Evaluation | None:
    """The latest full evaluation of this version on this dataset version not finished yet
    (one that a killed ``szbench evaluate`` left behind, for the next one to continue)."""
    evaluations = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == algorithm_version.id,
            Evaluation.dataset_version_id == dataset_version.id,
            Evaluation.kind == EvaluationKind.FULL,
        )
        .order_by(Evaluation.id.desc())
    ).all()
    return next((ev for ev in evaluations if not ev.status.finished), None)


def cancel_evaluation(session: Session, evaluation: Evaluation) -> Evaluation:
    """Stop an evaluation: pending runs are skipped; a run already in a container finishes.

    Raises Conflict when it has already finished.
    """
    evaluation = _lock(session, evaluation)
    if evaluation.status.finished:
        raise Conflict(f"evaluation {evaluation.id} is already {evaluation.status.value}")
    evaluation.status = EvaluationStatus.CANCELLED
    evaluation.finished_at = clock.now(session)
    evaluation.message = "Cancelled."
    session.flush()
    return evaluation


def rerun_evaluation(
    session: Session, evaluation: Evaluation, *, created_by: User | None = None
) -> Evaluation:
    """A new evaluation of the same image on the same data, with fresh container runs.

    A full pass like any other: charged to ``created_by``'s quotas (QuotaExceeded).
    """
    if evaluation.kind == EvaluationKind.RESCORE:
        raise BadRequest("a re-score has no container runs of its own; re-run its source instead")
    version = evaluation.algorithm_version
    if version.image_digest != evaluation.image_digest:
        raise Conflict("the algorithm version's image changed since this evaluation")
    return create_evaluation(
        session,
        algorithm_version=version,
        dataset_version=evaluation.dataset_version,
        kind=evaluation.kind,
        created_by=created_by,
        reuse=False,
        scoring_params=evaluation.scoring_params,
        published=evaluation.published,
        _require_active=False,
    )


def rescore_evaluation(
    session: Session,
    evaluation: Evaluation,
    *,
    scoring_params: dict[str, Any],
    created_by: User | None = None,
) -> Evaluation:
    """Score the stored detections of a finished evaluation again, with other parameters.

    No container runs. The result is official only when the parameters are SzCORE's
    defaults. Raises Conflict unless the source evaluation is done. On held-out data a
    re-score ``created_by`` a user is charged to their daily held-out limit.
    """
    source = evaluation
    if source.kind == EvaluationKind.RESCORE and source.source_evaluation_id is not None:
        # Always go back to the evaluation that owns the detections.
        source = session.get_one(Evaluation, source.source_evaluation_id)
    if source.status != EvaluationStatus.DONE:
        raise Conflict(
            f"evaluation {source.id} is {source.status.value}; only done ones are re-scored"
        )
    params, official = scoring_params_dict(scoring_params)
    if created_by is not None:
        _check_phase_open(created_by, source.algorithm_version, source.dataset_version)
        quotas.check_rescore(
            session,
            user=created_by,
            held_out=source.dataset_version.dataset.kind == DatasetKind.HELD_OUT,
            team_id=source.algorithm_version.algorithm.team_id,
        )
    rescore = Evaluation(
        algorithm_version_id=source.algorithm_version_id,
        dataset_version_id=source.dataset_version_id,
        kind=EvaluationKind.RESCORE,
        status=EvaluationStatus.QUEUED,
        image_digest=source.image_digest,
        source_evaluation_id=source.id,
        scorer_version=SCORER_VERSION,
        scoring_params=params,
        official=official,
        published=source.published,
        queue=QUEUE_CPU,
        reuse_runs=True,
        recordings_total=source.recordings_total,
        recordings_done=0,
        created_by_id=created_by.id if created_by is not None else None,
        team_id=quotas.charged_team(created_by, source.algorithm_version.algorithm),
    )
    session.add(rescore)
    session.flush()
    enqueue_after_commit(session, TASK_RESCORE, queue=QUEUE_CPU, evaluation_id=rescore.id)
    return rescore


def plan_continuous_benchmark(
    session: Session, dataset_version: DatasetVersion
) -> list[AlgorithmVersion]:
    """Active algorithm versions with no live full evaluation on ``dataset_version`` (dry run)."""
    already = (
        select(Evaluation.algorithm_version_id)
        .where(
            Evaluation.dataset_version_id == dataset_version.id,
            Evaluation.kind == EvaluationKind.FULL,
            Evaluation.status.not_in(_NOT_COUNTED),
        )
        .scalar_subquery()
    )
    return list(
        session.scalars(
            select(AlgorithmVersion)
            .where(
                AlgorithmVersion.status == VersionStatus.ACTIVE,
                AlgorithmVersion.image_digest.is_not(None),
                AlgorithmVersion.id.not_in(already),
            )
            .order_by(AlgorithmVersion.id)
        )
    )


def queue_continuous_benchmark(
    session: Session, dataset_version: DatasetVersion, *, created_by: User | None = None
) -> list[Evaluation]:
    """Queue a full evaluation of every planned version on ``dataset_version``."""
    return [
        create_evaluation(
            session,
            algorithm_version=version,
            dataset_version=dataset_version,
            created_by=created_by,
        )
        for version in plan_continuous_benchmark(session, dataset_version)
    ]


def smoke_test_queue(algorithm_version: AlgorithmVersion) -> str:
    """Where a version's smoke test runs: ``gpu`` when it asks for a GPU, else ``cpu``."""
    return QUEUE_GPU if algorithm_version.wants_gpu else QUEUE_CPU


def request_smoke_test(session: Session, algorithm_version: AlgorithmVersion) -> None:
    """Send the smoke test of ``algorithm_version`` after commit (the worker sets its status)."""
    if algorithm_version.status not in (VersionStatus.PENDING, VersionStatus.REJECTED):
        raise Conflict(
            f"the algorithm version is {algorithm_version.status.value}; only pending or "
            "rejected versions are smoke-tested"
        )
    enqueue_after_commit(
        session,
        TASK_SMOKE_TEST,
        queue=smoke_test_queue(algorithm_version),
        algorithm_version_id=algorithm_version.id,
    )


def smoke_test_evaluation(
    session: Session, *, algorithm_version: AlgorithmVersion, recording: Recording
) -> Evaluation:
    """The smoke test's evaluation of ``algorithm_version`` on one public-sample
    ``recording``: the unfinished one an earlier delivery of the smoke-test task left, else a
    new one.

    The smoke-test task runs it at once, itself: the evaluation is RUNNING from the start,
    on the task's queue (:func:`smoke_test_queue`), and no start task is sent. It is
    unofficial and unpublished (the version's status says how it went), scored with
    SzCORE's defaults, and never reuses a run. The task creates its one run.
    """
    digest = algorithm_version.image_digest or ""
    evaluation = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == algorithm_version.id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
            Evaluation.dataset_version_id == recording.dataset_version_id,
            Evaluation.image_digest == digest,
        )
        .order_by(Evaluation.id.desc())
    ).first()
    if evaluation is not None and not evaluation.status.finished:
        return evaluation
    params, _ = scoring_params_dict(None)
    evaluation = Evaluation(
        algorithm_version_id=algorithm_version.id,
        dataset_version_id=recording.dataset_version_id,
        kind=EvaluationKind.SMOKE_TEST,
        status=EvaluationStatus.RUNNING,
        image_digest=digest,
        scorer_version=SCORER_VERSION,
        scoring_params=params,
        official=False,
        published=False,
        queue=smoke_test_queue(algorithm_version),
        reuse_runs=False,
        recordings_total=1,
        recordings_done=0,
        started_at=clock.now(session),
    )
    session.add(evaluation)
    session.flush()
    return evaluation
