"""Read-side helpers the pages need beyond the API's queries (which they reuse).

Everything here composes :mod:`szbench.evaluations.queries`, :mod:`szbench.results.queries`,
:mod:`szbench.datasets.queries` and the policy in :mod:`szbench.auth.policy`; it only adds
the groupings a page shows at once (a user's submissions tree, the admin's queue view,
recording timelines).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from szbench.algorithms import service as algorithms
from szbench.auth import policy
from szbench.config import get_settings
from szbench.disclosure import decision
from szbench.disclosure import progress as timing
from szbench.evaluations import queries as evaluations
from szbench.evaluations import service as evaluation_service
from szbench.models import (
    FAILED_OUTCOMES,
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    RecordingRun,
    User,
    VersionStatus,
)
from szbench.quotas import service as quotas
from szbench.results import queries as results

log = logging.getLogger(__name__)

ACTIVE = (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING, EvaluationStatus.SCORING)
_MAX_LIST = 500


# --- my submissions -----------------------------------------------------------------------


@dataclass
class VersionView:
    version: AlgorithmVersion
    evaluations: list[Evaluation] = field(default_factory=list)


@dataclass
class AlgorithmView:
    algorithm: Algorithm
    versions: list[VersionView] = field(default_factory=list)


@dataclass(frozen=True)
class Submissions:
    """The user's algorithms with their versions and evaluations, what the user may know
    of each evaluation's finished runs by outcome, and its progress as the user may follow
    it (:func:`szbench.evaluations.queries.shown_progress`)."""

    views: list[AlgorithmView]
    counts: dict[int, dict[str, int]]
    shown: dict[int, timing.ShownProgress]


def my_submissions(session: Session, user: User) -> Submissions:
    """The user's algorithms, their versions (newest first) and every evaluation of each,
    with finished runs by outcome per evaluation."""
    owned, _ = algorithms.list_algorithms(
        session, viewer=user, mine=True, limit=_MAX_LIST, offset=0
    )
    rows, _ = evaluations.list_evaluations(
        session,
        viewer=user,
        where=evaluations.EvaluationFilter(mine=True),
        limit=_MAX_LIST,
        offset=0,
    )
    by_version: dict[int, list[Evaluation]] = {}
    for evaluation in rows:  # newest first
        by_version.setdefault(evaluation.algorithm_version_id, []).append(evaluation)
    views = []
    for algorithm in sorted(owned, key=lambda a: -a.id):
        versions = sorted(algorithm.versions, key=lambda v: -v.id)
        views.append(
            AlgorithmView(
                algorithm=algorithm,
                versions=[VersionView(v, by_version.get(v.id, [])) for v in versions],
            )
        )
    raw = evaluations.outcome_counts(session, [e.id for e in rows])
    shown = evaluations.shown_progress(session, list(rows), viewer=user)
    counts = {
        e.id: timing.outcome_summary(shown[e.id][0], raw[e.id], finished=e.status.finished)
        for e in rows
    }
    return Submissions(views, counts, {i: progress for i, (_, progress) in shown.items()})


def progress_clock_words() -> dict[str, Any]:
    """The progress clock, for pages that explain it: its step (a timedelta), the step and
    the coarse fraction in words."""
    step_s, steps = timing.PROGRESS_STEP_S, timing.PROGRESS_FRACTION_STEPS
    if step_s % 3600 == 0:
        step_text = f"{step_s // 3600}-hour"
    elif step_s % 60 == 0:
        step_text = f"{step_s // 60}-minute"
    else:
        step_text = f"{step_s}-second"
    fraction_text = {2: "halves", 4: "quarters", 10: "tenths"}.get(steps, f"steps of 1/{steps}")
    return {
        "step": timedelta(seconds=step_s),
        "step_text": step_text,
        "fraction_text": fraction_text,
        # A rounded time is never shown as past before it is.
        "clock_now": timing.now(),
    }


def closed_versions(views: list[AlgorithmView], user: User | None) -> dict[int, str]:
    """Versions whose phase no longer takes held-out work from ``user``, and why."""
    closed = {}
    for view in views:
        for vv in view.versions:
            refused = evaluation_service.held_out_work_refusal(user, vv.version)
            if refused is not None:
                closed[vv.version.id] = refused
    return closed


def progress_snapshot(session: Session, user: User) -> dict[str, Any]:
    """What the submissions page polls: every version's status and every evaluation's
    progress (small; no per-run rows)."""
    mine = my_submissions(session, user)
    versions = []
    items = []
    for view in mine.views:
        for vv in view.versions:
            versions.append(
                {
                    "id": vv.version.id,
                    "status": vv.version.status.value,
                    "status_message": vv.version.status_message,
                }
            )
            for e in vv.evaluations:
                shown = mine.shown[e.id]
                items.append(
                    {
                        "id": e.id,
                        "status": evaluations.shown_state(e, shown),
                        "finished": e.status.finished,
                        "detail": shown.detail.value,
                        "recordings_done": shown.done,
                        "recordings_done_at_most": shown.done_at_most,
                        "recordings_total": shown.total,
                        "outcomes": mine.counts.get(e.id, {}),
                        "message": e.message,
                    }
                )
    return {"versions": versions, "evaluations": items}


# --- leaderboard helpers --------------------------------------------------------------------


def phases_of_versions(session: Session, version_ids: list[int]) -> dict[int, str]:
    """Phase slug of each algorithm version that has one."""
    if not version_ids:
        return {}
    rows = session.execute(
        select(AlgorithmVersion.id, Phase.slug)
        .join(Phase, AlgorithmVersion.phase_id == Phase.id)
        .where(AlgorithmVersion.id.in_(version_ids))
    ).all()
    return {vid: slug for vid, slug in rows}


def all_phases(session: Session) -> list[Phase]:
    return list(session.scalars(select(Phase).order_by(Phase.id)))


# --- timelines ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeline:
    recording: str
    subject: str
    duration_s: float
    reference: list[tuple[float, float]] | None
    detections: list[tuple[float, float]] | None
    outcome: str | None


def _events(text: str, source: str) -> list[tuple[float, float]] | None:
    from szbench_scoring.annotations import AnnotationError, parse_annotations

    try:
        annotations = parse_annotations(text, source=source)
    except AnnotationError as exc:
        log.info("timeline: %s", exc)
        return None
    return [(float(a), float(b)) for a, b in annotations.events.tolist()]


def timelines(
    session: Session, evaluation: Evaluation, *, viewer: User | None, limit: int = 12
) -> tuple[list[Timeline], str | None]:
    """Reference seizures against detections per recording, where this viewer may see them.

    Reference annotations only when the viewer may read the dataset's recordings (public
    samples for anyone signed in; held-out data for admins only); detections only when
    the policy lets them read the raw output. Returns the timelines and, when nothing may
    be shown, the reason.
    """
    dataset = evaluation.dataset_version.dataset
    view = decision.view_of(viewer, evaluation)
    if not view.recordings:
        return [], view.withheld("Timelines") + "."
    if not view.held_out and not policy.can_read_recordings(viewer, dataset):
        return [], "Sign in to see the timelines of public-sample recordings."
    show_detections = view.detections
    runs = session.scalars(
        select(RecordingRun)
        .where(RecordingRun.evaluation_id == evaluation.id)
        .options(joinedload(RecordingRun.recording))
        .order_by(RecordingRun.id)
        .limit(limit)
    ).all()
    out = []
    for run in runs:
        rec = run.recording
        try:
            # The disclosure level allows the reference timeline here even where the
            # annotation file itself stays unreadable (held-out data after its phase).
            root = Path(evaluation.dataset_version.path).resolve()
            path = (root / rec.annotations_path).resolve()
            reference = (
                _events(path.read_text(errors="replace"), rec.key)
                if path.is_relative_to(root)
                else None
            )
        except OSError:
            reference = None
        detections = None
        if show_detections and run.detections_tsv is not None:
            detections = _events(run.detections_tsv, f"{rec.key} (detections)")
        out.append(
            Timeline(
                recording=rec.key,
                subject=rec.subject,
                duration_s=rec.duration_s,
                reference=reference,
                detections=detections,
                outcome=run.outcome.value if run.outcome else None,
            )
        )
    return out, None


# --- admin: queue and publishing ----------------------------------------------------------


@dataclass
class QueueView:
    by_status: dict[str, int]
    active: list[Evaluation]
    failed: list[Evaluation]
    workers: list[dict[str, Any]]
    broker: dict[str, int]
    broker_error: str | None
    celery: dict[str, dict[str, int]] | None
    celery_error: str | None
    embedded: bool
    # "done" evaluations in which recordings failed: counted (and listed) as failed.
    incomplete: int = 0


def _celery_inspect() -> tuple[dict[str, dict[str, int]] | None, str | None]:
    """Active and reserved tasks per Celery worker (broker mode only; 1 s timeout)."""
    from szbench.queue import get_celery, is_embedded

    if is_embedded():
        return None, None
    try:
        inspect = get_celery().control.inspect(timeout=1.0)
        active = inspect.active() or {}
        reserved = inspect.reserved() or {}
    except Exception as exc:  # the page must render with the broker down
        log.warning("queue page: celery inspect failed: %s", exc)
        return None, f"Celery did not answer ({type(exc).__name__})"
    names = sorted(set(active) | set(reserved))
    return {
        n: {"active": len(active.get(n, [])), "reserved": len(reserved.get(n, []))} for n in names
    }, None


def queue_view(session: Session) -> QueueView:
    from szbench.ops.service import KNOWN_QUEUES, broker_queue_lengths
    from szbench.queue import is_embedded

    by_status = {
        s.value: n
        for s, n in session.execute(
            select(Evaluation.status, func.count(Evaluation.id)).group_by(Evaluation.status)
        )
    }
    load = (
        joinedload(Evaluation.algorithm_version).joinedload(AlgorithmVersion.algorithm),
        joinedload(Evaluation.dataset_version).joinedload(DatasetVersion.dataset),
    )
    active = list(
        session.scalars(
            select(Evaluation)
            .where(Evaluation.status.in_(ACTIVE))
            .options(*load)
            .order_by(Evaluation.id)
            .limit(200)
        )
    )
    # A failure is not a score: an evaluation that ended "done" with failed recordings is
    # counted with the failed ones.
    has_failed_run = (
        select(RecordingRun.id)
        .where(
            RecordingRun.evaluation_id == Evaluation.id,
            RecordingRun.outcome.in_(FAILED_OUTCOMES),
        )
        .exists()
    )
    incomplete = (
        session.scalar(
            select(func.count(Evaluation.id)).where(
                Evaluation.status == EvaluationStatus.DONE, has_failed_run
            )
        )
        or 0
    )
    if incomplete:
        by_status["done"] = by_status.get("done", 0) - incomplete
        by_status["failed"] = by_status.get("failed", 0) + incomplete
    since = datetime.now(UTC) - timedelta(days=7)
    failed = list(
        session.scalars(
            select(Evaluation)
            .where(
                (Evaluation.status == EvaluationStatus.FAILED)
                | ((Evaluation.status == EvaluationStatus.DONE) & has_failed_run),
                Evaluation.created_at >= since,
            )
            .options(*load)
            .order_by(Evaluation.id.desc())
            .limit(50)
        )
    )
    workers = [
        {
            "host": host or "(not started)",
            "running": int(running or 0),
            "waiting": int(waiting or 0),
        }
        for host, running, waiting in session.execute(
            select(
                RecordingRun.worker_host,
                func.count(RecordingRun.id).filter(RecordingRun.started_at.is_not(None)),
                func.count(RecordingRun.id).filter(RecordingRun.started_at.is_(None)),
            )
            .join(Evaluation, RecordingRun.evaluation_id == Evaluation.id)
            .where(RecordingRun.outcome.is_(None), Evaluation.status.in_(ACTIVE))
            .group_by(RecordingRun.worker_host)
            .order_by(RecordingRun.worker_host)
        )
    ]
    broker: dict[str, int] = {}
    broker_error = None
    if get_settings().broker_url:
        try:
            broker = broker_queue_lengths(list(KNOWN_QUEUES))
        except Exception as exc:  # the page must render with the broker down
            broker_error = f"the broker did not answer ({type(exc).__name__})"
    celery, celery_error = _celery_inspect()
    return QueueView(
        by_status=by_status,
        active=active,
        failed=failed,
        workers=workers,
        broker=broker,
        broker_error=broker_error,
        celery=celery,
        celery_error=celery_error,
        embedded=is_embedded(),
        incomplete=incomplete,
    )


def unpublished(session: Session) -> list[Evaluation]:
    """Finished evaluations whose results are hidden until an admin publishes them."""
    return list(
        session.scalars(
            select(Evaluation)
            .where(Evaluation.published.is_(False))
            .options(
                joinedload(Evaluation.algorithm_version).joinedload(AlgorithmVersion.algorithm),
                joinedload(Evaluation.algorithm_version).joinedload(AlgorithmVersion.phase),
                joinedload(Evaluation.dataset_version).joinedload(DatasetVersion.dataset),
            )
            .order_by(Evaluation.id.desc())
            .limit(_MAX_LIST)
        )
    )


def visible_results(
    session: Session, algorithm: Algorithm, viewer: User | None
) -> list[Evaluation]:
    """The algorithm's newest finished evaluation per version and dataset version."""
    shown, _total = results.algorithm_results(
        session, algorithm, viewer=viewer, official_only=False
    )
    return shown


# --- what the evaluation page offers ----------------------------------------------------------


def rerun_refusal(session: Session, user: User | None, evaluation: Evaluation) -> str | None:
    """Why ``user`` could not re-run ``evaluation`` now (the button is then replaced by
    this reason): its phase takes no more held-out work, or a quota is spent. None: the
    re-run would be accepted as far as can be told without trying it."""
    if user is None:
        return None
    version = evaluation.algorithm_version
    refused = evaluation_service.closed_phase_refusal(user, version, evaluation.dataset_version)
    if refused is not None:
        return refused
    held_out = evaluation.dataset_version.dataset.kind == DatasetKind.HELD_OUT
    return quotas.evaluation_refusal(
        session, user=user, algorithm_version=version, held_out=held_out
    )


def rerun_refusals(session: Session, user: User, rows: list[Evaluation]) -> dict[int, str]:
    """:func:`rerun_refusal` of each finished full evaluation in ``rows`` that would be
    refused (the quotas are read once per phase and kind of data)."""
    out: dict[int, str] = {}
    seen: dict[tuple[int | None, bool, int | None], str | None] = {}
    for e in rows:
        if not e.status.finished or e.kind != EvaluationKind.FULL:
            continue
        held_out = e.dataset_version.dataset.kind == DatasetKind.HELD_OUT
        key = (e.algorithm_version.phase_id, held_out, e.dataset_version_id)
        if key not in seen:
            seen[key] = rerun_refusal(session, user, e)
        reason = seen[key]
        if reason is not None:
            out[e.id] = reason
    return out


def smoke_rejection(evaluation: Evaluation, version: AlgorithmVersion | None) -> str | None:
    """Why the smoke test rejected the version, as the end of a sentence ("its container
    exited with code 1."), when ``evaluation`` is that smoke test; None otherwise."""
    if (
        version is None
        or evaluation.kind != EvaluationKind.SMOKE_TEST
        or version.status != VersionStatus.REJECTED
    ):
        return None
    # The pipeline writes "Smoke test failed (<outcome>): <why>" or "Smoke test failed: <why>".
    match = re.match(r"Smoke test failed(?: \(([^)]*)\))?:?\s*(.*)", version.status_message or "")
    outcome, reason = (match.group(1), match.group(2)) if match else (None, "")
    reason = reason.strip().rstrip(".") or "its run did not produce a valid output"
    reason = reason[:1].lower() + reason[1:]
    if outcome:
        reason += f" ({outcome.replace('_', ' ')})"
    return reason if reason.endswith(".") else reason + "."
