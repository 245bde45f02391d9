"""Read side of evaluations: lists, progress, provenance (writes are the pipeline's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload, selectinload

from szbench.auth import policy
from szbench.disclosure import decision
from szbench.disclosure import progress as timing
from szbench.errors import Forbidden, NotFound
from szbench.evaluations.holds import platform_hold
from szbench.evaluations.schemas import EvaluationDetail, EvaluationOut, Progress, Provenance
from szbench.models import (
    FAILED_OUTCOMES,
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    Recording,
    RecordingRun,
    RunOutcome,
    User,
)

_LOAD = (
    joinedload(Evaluation.algorithm_version).joinedload(AlgorithmVersion.algorithm),
    # What szbench.disclosure.facts.facts_of reads: the phase and the data it names, the
    # result's subject count.
    joinedload(Evaluation.algorithm_version)
    .joinedload(AlgorithmVersion.phase)
    .selectinload(Phase.dataset_versions),
    selectinload(Evaluation.result).load_only(DatasetResult.subjects),
    joinedload(Evaluation.dataset_version).joinedload(DatasetVersion.dataset),
)


def _joined() -> Any:
    return (
        select(Evaluation)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .join(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
    )


def get_evaluation(session: Session, evaluation_id: int, *, viewer: User | None) -> Evaluation:
    evaluation = session.get(Evaluation, evaluation_id, options=_LOAD)
    if evaluation is None or not policy.can_view_evaluation(viewer, evaluation):
        raise NotFound(f"evaluation {evaluation_id} does not exist")
    return evaluation


def get_managed_evaluation(session: Session, evaluation_id: int, *, user: User) -> Evaluation:
    evaluation = get_evaluation(session, evaluation_id, viewer=user)
    if not policy.can_manage_algorithm(user, evaluation.algorithm_version.algorithm):
        raise Forbidden(f"evaluation {evaluation_id} belongs to another user's algorithm")
    return evaluation


@dataclass(frozen=True)
class EvaluationFilter:
    algorithm_id: int | None = None
    algorithm_version_id: int | None = None
    dataset: str | None = None
    dataset_version: str | None = None
    status: EvaluationStatus | None = None
    kind: EvaluationKind | None = None
    mine: bool = False


def list_evaluations(
    session: Session, *, viewer: User | None, where: EvaluationFilter, limit: int, offset: int
) -> tuple[list[Evaluation], int]:
    clauses = [policy.visible_evaluations(viewer)]
    if where.algorithm_id is not None:
        clauses.append(Algorithm.id == where.algorithm_id)
    if where.algorithm_version_id is not None:
        clauses.append(AlgorithmVersion.id == where.algorithm_version_id)
    if where.dataset is not None:
        clauses.append(Dataset.slug == where.dataset)
    if where.dataset_version is not None:
        clauses.append(DatasetVersion.version == where.dataset_version)
    # An unfinished status is matched as each evaluation's viewer sees it (shown_status):
    # a coarse view learns of a start or a switch to scoring at a tick only, filters too.
    unfinished = (
        where.status is not None and not where.status.finished and not policy.is_admin(viewer)
    )
    if where.status is not None:
        clauses.append(
            Evaluation.status.in_(_UNFINISHED) if unfinished else Evaluation.status == where.status
        )
    if where.kind is not None:
        clauses.append(Evaluation.kind == where.kind)
    if where.mine:
        if viewer is None:
            return [], 0
        clauses.append(policy.algorithms_acted_for(viewer))
    query = _joined().where(*clauses)
    if unfinished:
        candidates = list(session.scalars(query.options(*_LOAD).order_by(Evaluation.id.desc())))
        shown = shown_progress(session, candidates, viewer=viewer)
        matching = [e for e in candidates if shown_status(e, shown[e.id][1]) == where.status]
        return matching[offset : offset + limit], len(matching)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(*_LOAD).order_by(Evaluation.id.desc()).limit(limit).offset(offset)
    ).all()
    return list(rows), total


def outcome_counts(session: Session, evaluation_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    ids = list(evaluation_ids)
    counts: dict[int, dict[str, int]] = {i: {} for i in ids}
    if not ids:
        return counts
    rows = session.execute(
        select(RecordingRun.evaluation_id, RecordingRun.outcome, func.count(RecordingRun.id))
        .where(RecordingRun.evaluation_id.in_(ids), RecordingRun.outcome.is_not(None))
        .group_by(RecordingRun.evaluation_id, RecordingRun.outcome)
    ).all()
    for evaluation_id, outcome, n in rows:
        counts[evaluation_id][str(outcome)] = n
    return counts


def runs_done_at(
    session: Session, evaluation_ids: Iterable[int], moment: datetime
) -> dict[int, int]:
    """How many runs of each evaluation had finished at ``moment`` (one query)."""
    ids = list(evaluation_ids)
    done = dict.fromkeys(ids, 0)
    if ids:
        rows = session.execute(
            select(RecordingRun.evaluation_id, func.count(RecordingRun.id))
            .where(
                RecordingRun.evaluation_id.in_(ids),
                RecordingRun.finished_at.is_not(None),
                RecordingRun.finished_at <= moment,
            )
            .group_by(RecordingRun.evaluation_id)
        ).all()
        done.update({evaluation_id: n for evaluation_id, n in rows})
    return done


def shown_progress(
    session: Session,
    evaluations: list[Evaluation],
    *,
    viewer: User | None,
    now: datetime | None = None,
) -> dict[int, tuple[decision.View, timing.ShownProgress]]:
    """Each evaluation's view for ``viewer`` and its progress as that view may follow it
    (:func:`szbench.disclosure.progress.shown_progress`)."""
    now = now or timing.now()
    views = {e.id: decision.view_of(viewer, e) for e in evaluations}
    coarse = [e.id for e in evaluations if views[e.id].progress != decision.ProgressDetail.FULL]
    at_tick = runs_done_at(session, coarse, timing.progress_clock(now)) if coarse else {}
    return {
        e.id: (
            views[e.id],
            timing.shown_progress(
                views[e.id],
                done=e.recordings_done,
                done_at_tick=min(at_tick.get(e.id, 0), e.recordings_done),
                total=e.recordings_total,
                started_at=e.started_at,
                running=e.status in _ACTIVE,
                finished=e.status.finished,
                moment=now,
            ),
        )
        for e in evaluations
    }


def progress(
    session: Session,
    evaluation: Evaluation,
    *,
    viewer: User | None,
    now: datetime | None = None,
) -> Progress:
    now = now or timing.now()
    view, shown = shown_progress(session, [evaluation], viewer=viewer, now=now)[evaluation.id]
    coarse = shown.detail != decision.ProgressDetail.FULL
    counts = outcome_counts(session, [evaluation.id])[evaluation.id]
    finished = evaluation.status.finished
    # A count per evaluation once it is over, as outcome_summary: while it runs, a count
    # that moves would tell which recording failed (and, to a coarse view, when).
    failed = (
        sum(counts.get(o.value, 0) for o in FAILED_OUTCOMES)
        if finished or (view.recordings and not coarse)
        else None
    )
    status = shown_status(evaluation, shown)
    state = shown_state(evaluation, shown)
    estimate: tuple[float | None, datetime | None, str | None] = (None, None, None)
    if status in (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING) and state != "scoring":
        if coarse:
            estimate = _coarse_estimate(session, evaluation, shown)
        elif status == EvaluationStatus.RUNNING:
            remaining, basis = _remaining(session, evaluation, view.run_resources)
            finish = None if remaining is None else now + timedelta(seconds=remaining)
            estimate = (remaining, finish, basis)
    remaining_s, finish_at, basis = estimate
    return Progress(
        status=status,
        state=state,
        detail=shown.detail.value,
        recordings_done=shown.done,
        recordings_done_at_most=shown.done_at_most if coarse and not finished else None,
        recordings_total=shown.total,
        fraction_done=round(shown.fraction, 4),
        as_of=shown.as_of if coarse and not finished else None,
        next_update_at=shown.next_update if coarse and not finished else None,
        outcomes=timing.outcome_summary(view, counts, finished=finished),
        failed_recordings=failed,
        complete=None if failed is None or not finished else failed == 0,
        estimated_remaining_s=remaining_s,
        estimated_finish_at=finish_at,
        estimate_basis=basis,
        held_by=platform_hold(session, evaluation),
    )


_ACTIVE = (EvaluationStatus.RUNNING, EvaluationStatus.SCORING)
_UNFINISHED = (EvaluationStatus.QUEUED, *_ACTIVE)


def shown_status(evaluation: Evaluation, shown: timing.ShownProgress) -> EvaluationStatus:
    """The status as the viewer of ``shown`` may see it. A coarse view sees an unfinished
    evaluation as it stood at the clock's last tick: queued until a tick after it started
    (when the worker took it up tells how long what ran before it took), scoring only once
    its shown progress has every recording run (the switch to scoring tells when the last
    run finished), running in between. Its end is shown at once."""
    if shown.detail != decision.ProgressDetail.COARSE or evaluation.status.finished:
        return evaluation.status
    if not shown.started:
        return EvaluationStatus.QUEUED
    return EvaluationStatus.SCORING if shown.all_run else EvaluationStatus.RUNNING


def shown_state(evaluation: Evaluation, shown: timing.ShownProgress) -> str:
    """The status as people should read it, from the progress a viewer may follow: a
    running evaluation whose every recording has finished waits for its scoring (it can no
    longer be cancelled)."""
    status = shown_status(evaluation, shown)
    if status == EvaluationStatus.SCORING or (status in _ACTIVE and shown.all_run):
        return "scoring"
    return status.value


SHARE_BASIS = "share of recordings done since the start"
SMOKE_BASIS = "speed of its smoke test on the public sample, one recording after another"


def _coarse_estimate(
    session: Session, evaluation: Evaluation, shown: timing.ShownProgress
) -> tuple[float | None, datetime | None, str | None]:
    """The estimate a coarse view gets, as of the clock's tick (so it moves only with it):
    ``(seconds left, finish moment rounded up to the clock, basis)``. From the shown share
    and the (rounded) start once a step is shown; before that, from how fast the version's
    smoke test ran on the public sample, scaled to the hours of this data (both public): the
    length of the whole run, and its finish once the start is shown. Neither tells anything
    the view does not show."""
    tick = shown.as_of
    if shown.started_at is not None and 0 < shown.fraction < 1:
        elapsed = (tick - shown.started_at).total_seconds()
        if elapsed > 0:
            finish = timing.round_up_to_clock(
                tick + timedelta(seconds=elapsed / shown.fraction * (1 - shown.fraction))
            )
            return (finish - tick).total_seconds(), finish, SHARE_BASIS
        return None, None, None
    if shown.fraction > 0:
        return None, None, None
    length = smoke_estimate_s(session, evaluation)
    if length is None:
        return None, None, None
    if shown.started_at is None:
        return length, None, SMOKE_BASIS + ", once it starts"
    finish = timing.round_up_to_clock(shown.started_at + timedelta(seconds=length))
    if finish <= tick:
        return None, None, None  # longer than that estimate: nothing better to say
    return (finish - tick).total_seconds(), finish, SMOKE_BASIS


def smoke_estimate_s(session: Session, evaluation: Evaluation) -> float | None:
    """How long the evaluation's recordings take one after another at the speed the
    version's smoke test ran on the public sample (seconds of run per second of EEG);
    None without a finished smoke test."""
    speed = session.execute(
        select(func.sum(RecordingRun.wall_time_s), func.sum(Recording.duration_s))
        .join(Recording, RecordingRun.recording_id == Recording.id)
        .join(Evaluation, RecordingRun.evaluation_id == Evaluation.id)
        .where(
            Evaluation.algorithm_version_id == evaluation.algorithm_version_id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
            RecordingRun.outcome == RunOutcome.OK,
            RecordingRun.wall_time_s.is_not(None),
        )
    ).one()
    wall, seconds = speed
    if not wall or not seconds:
        return None
    total = session.scalar(
        select(func.sum(Recording.duration_s)).where(
            Recording.dataset_version_id == evaluation.dataset_version_id
        )
    )
    if not total:
        return None
    return float(wall) / float(seconds) * float(total)


def _remaining(
    session: Session, evaluation: Evaluation, run_times_shown: bool
) -> tuple[float | None, str | None]:
    """An estimate of the seconds left, and what it rests on.

    From the finished runs' mean wall time where this viewer may see run times; otherwise
    from the time elapsed since the start, which the viewer can read off the progress anyway.
    """
    done, total = evaluation.recordings_done, evaluation.recordings_total
    left = total - done
    if done <= 0 or left <= 0:
        return None, None
    if run_times_shown:
        mean = session.scalar(
            select(func.avg(RecordingRun.wall_time_s)).where(
                RecordingRun.evaluation_id == evaluation.id,
                RecordingRun.finished_at.is_not(None),
                RecordingRun.reused_from_id.is_(None),
                RecordingRun.wall_time_s.is_not(None),
            )
        )
        if mean is not None:
            return float(mean) * left, "mean wall time of the finished runs"
    if evaluation.started_at is None:
        return None, None
    started = evaluation.started_at
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    elapsed = (datetime.now(UTC) - started).total_seconds()
    return max(0.0, elapsed / done * left), "time elapsed per finished recording"


@dataclass(frozen=True)
class RunSummary:
    worker_hosts: list[str]
    gpu_models: list[str]
    gpu_drivers: list[str]
    wall_time_s: float | None
    peak_memory_bytes: int | None


def run_summaries(session: Session, evaluation_ids: Iterable[int]) -> dict[int, RunSummary]:
    """Hosts, GPUs, summed wall time and peak memory of each evaluation's runs (2 queries)."""
    ids = list(evaluation_ids)
    hosts: dict[int, set[str]] = {i: set() for i in ids}
    gpus: dict[int, set[str]] = {i: set() for i in ids}
    drivers: dict[int, set[str]] = {i: set() for i in ids}
    totals: dict[int, tuple[float | None, int | None]] = {}
    if ids:
        for evaluation_id, host, gpu, driver in session.execute(
            select(
                RecordingRun.evaluation_id,
                RecordingRun.worker_host,
                RecordingRun.gpu_model,
                RecordingRun.gpu_driver,
            )
            .where(RecordingRun.evaluation_id.in_(ids))
            .distinct()
        ):
            if host:
                hosts[evaluation_id].add(host)
            if gpu:
                gpus[evaluation_id].add(gpu)
            if driver:
                drivers[evaluation_id].add(driver)
        for evaluation_id, wall, peak in session.execute(
            select(
                RecordingRun.evaluation_id,
                func.sum(RecordingRun.wall_time_s),
                func.max(RecordingRun.peak_memory_bytes),
            )
            .where(RecordingRun.evaluation_id.in_(ids))
            .group_by(RecordingRun.evaluation_id)
        ):
            totals[evaluation_id] = (wall, peak)
    return {
        i: RunSummary(
            worker_hosts=sorted(hosts[i]),
            gpu_models=sorted(gpus[i]),
            gpu_drivers=sorted(drivers[i]),
            wall_time_s=totals.get(i, (None, None))[0],
            peak_memory_bytes=totals.get(i, (None, None))[1],
        )
        for i in ids
    }


def shown_summary(view: decision.View, summary: RunSummary, *, finished: bool) -> RunSummary:
    """What ``view`` may see of an evaluation's runs: host names for admins; time and memory
    of held-out runs for admins (a container can choose both); GPU models and drivers, which
    appear as runs are stored, for a coarse view once the evaluation is over."""
    shown = summary
    if not view.worker_hosts:
        shown = dataclasses.replace(shown, worker_hosts=[])
    if not view.run_resources:
        shown = dataclasses.replace(shown, wall_time_s=None, peak_memory_bytes=None)
    if not view.run_hardware(finished=finished):
        shown = dataclasses.replace(shown, gpu_models=[], gpu_drivers=[])
    return shown


def make_provenance(
    summary: RunSummary,
    *,
    image_digest: str,
    dataset: str,
    dataset_version: str,
    scorer_version: str,
    scoring_params: dict[str, Any] | None,
    official: bool,
) -> Provenance:
    return Provenance(
        image_digest=image_digest,
        dataset=dataset,
        dataset_version=dataset_version,
        scorer_version=scorer_version,
        scoring_params=scoring_params or {},
        official=official,
        worker_hosts=summary.worker_hosts,
        gpu_models=summary.gpu_models,
        gpu_drivers=summary.gpu_drivers,
        wall_time_s=summary.wall_time_s,
        peak_memory_bytes=summary.peak_memory_bytes,
    )


def provenances(
    session: Session, evaluations: list[Evaluation], *, viewer: User | None
) -> dict[int, Provenance]:
    """Provenance of each evaluation, with its runs' hosts, GPUs, time and memory, as
    ``viewer`` may see them (:func:`shown_summary`)."""
    summaries = run_summaries(session, [e.id for e in evaluations])
    for e in evaluations:
        summaries[e.id] = shown_summary(
            decision.view_of(viewer, e), summaries[e.id], finished=e.status.finished
        )
    return {
        e.id: make_provenance(
            summaries[e.id],
            image_digest=e.image_digest,
            dataset=e.dataset_version.dataset.slug,
            dataset_version=e.dataset_version.version,
            scorer_version=e.scorer_version,
            scoring_params=e.scoring_params,
            official=e.official,
        )
        for e in evaluations
    }


def to_out(
    evaluation: Evaluation,
    shown: tuple[decision.View, timing.ShownProgress] | None = None,
) -> EvaluationOut:
    """The evaluation as a viewer sees it; ``shown`` (:func:`shown_progress`) is that
    viewer's progress and view: without it, the stored figures (admin use only)."""
    version = evaluation.algorithm_version
    dv = evaluation.dataset_version
    view = shown[0] if shown else None
    done = shown[1].done if shown else evaluation.recordings_done
    status = shown_status(evaluation, shown[1]) if shown else evaluation.status
    return EvaluationOut(
        id=evaluation.id,
        kind=evaluation.kind,
        status=status,
        algorithm_id=version.algorithm_id,
        algorithm=version.algorithm.name,
        algorithm_version_id=version.id,
        algorithm_version=version.version,
        dataset=dv.dataset.slug,
        dataset_version=dv.version,
        dataset_version_id=dv.id,
        official=evaluation.official,
        published=evaluation.published,
        queue=evaluation.queue,
        message=evaluation.message,
        recordings_done=done,
        recordings_total=evaluation.recordings_total,
        source_evaluation_id=evaluation.source_evaluation_id,
        created_at=evaluation.created_at,
        started_at=shown[1].started_at if shown else evaluation.started_at,
        finished_at=_moment(view, evaluation.finished_at),
    )


def _moment(view: decision.View | None, moment: datetime | None) -> datetime | None:
    return moment if view is None else timing.shown_moment(view, moment)


def to_outs(
    session: Session, evaluations: list[Evaluation], *, viewer: User | None
) -> list[EvaluationOut]:
    """:func:`to_out` of each, with the viewer's progress (two queries)."""
    shown = shown_progress(session, evaluations, viewer=viewer)
    return [to_out(e, shown[e.id]) for e in evaluations]


def to_detail(session: Session, evaluation: Evaluation, *, viewer: User | None) -> EvaluationDetail:
    return EvaluationDetail(
        **to_out(
            evaluation, shown_progress(session, [evaluation], viewer=viewer)[evaluation.id]
        ).model_dump(),
        progress=progress(session, evaluation, viewer=viewer),
        provenance=provenances(session, [evaluation], viewer=viewer)[evaluation.id],
    )
