"""Leaderboards: official, finished, visible results on one dataset version, ranked the
SzCORE way (per-subject-averaged event F1, then event sensitivity), with statistics.

Two kinds of entry are shown apart, unranked (``?unranked=true``), never ranked by default:

- an evaluation in which recordings failed (crashed, timeout, out of memory, no or invalid
  output), unless its dataset or phase says such recordings are scored as no detections
  (:class:`~szbench.models.FailedRecordings`): a failure is not a score;
- a later submission of an image digest already on the board: the earliest submission
  (by version upload time) ranks, the others are duplicates of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.config import get_settings
from szbench.datasets import queries as datasets
from szbench.errors import BadRequest
from szbench.evaluations.queries import make_provenance, run_summaries
from szbench.leaderboards import statistics
from szbench.leaderboards.schemas import (
    DuplicateOf,
    Interval,
    Leaderboard,
    LeaderboardEntry,
    LeaderboardIndexRow,
    RankStability,
    SameImage,
    StatisticsInfo,
)
from szbench.models import (
    FAILED_OUTCOMES,
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetKind,
    DatasetResult,
    DatasetVersion,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    FailedRecordings,
    Phase,
    RecordingRun,
    User,
    Visibility,
)
from szbench.results import disclosure
from szbench.results.queries import METRICS
from szbench.stamped_cache import Answer, StampedCache, viewer_key

RANKING_RULE = "event_f1 (per-subject mean) desc, then event_sensitivity desc (SzCORE)"
SORT_KEYS = ("rank", *METRICS, "algorithm", "subjects", "recordings")
# Lower is better for these; every other metric is higher-is-better.
_LOWER_IS_BETTER = {"event_fp_rate", "sample_fp_rate"}
VersionsMode = Literal["latest", "all"]


@dataclass
class Row:
    evaluation_id: int
    algorithm_version_id: int
    algorithm_version: str
    algorithm_id: int
    algorithm: str
    title: str
    owner_id: int
    owner: str
    published: bool
    image_digest: str
    scorer_version: str
    scoring_params: dict[str, Any]
    finished_at: datetime | None
    subjects: int
    recordings: int
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    failures_rule: FailedRecordings = FailedRecordings.UNRANKED
    disclosure: Disclosure = Disclosure.AGGREGATE
    failed_recordings: int = 0
    metrics: dict[str, float | None] = field(default_factory=dict)
    rank: int | None = 0
    # Why it is not ranked ("failed" or "duplicate"); None for a ranked entry.
    unranked: str | None = None
    duplicate_of: Row | None = None

    @property
    def complete(self) -> bool:
        return self.failed_recordings == 0


def _intervals_disclosed(row: Row, viewer: User | None) -> bool:
    """Whether ``viewer`` may see ``row``'s bootstrap intervals and rank stability.

    Both resample the per-subject figures: over a few subjects their bounds are those
    figures (with two subjects the interval's ends are exactly the two values), so where
    per-subject figures are not disclosed they are shown only for entries over
    ``SZBENCH_INTERVALS_MIN_SUBJECTS`` subjects or more.
    """
    if (
        policy.is_admin(viewer)
        or disclosure.View(admin=False, owner=False, held_out=True, level=row.disclosure).subjects
    ):
        return True
    return row.subjects >= get_settings().intervals_min_subjects


def _desc_key(value: float | None) -> float:
    """Sort key putting high values first and NaN/None last."""
    return math.inf if value is None or math.isnan(value) else -value


def _rows(session: Session, dv: DatasetVersion, viewer: User | None) -> list[Row]:
    query = (
        select(
            Evaluation.id,
            Evaluation.algorithm_version_id,
            AlgorithmVersion.version,
            Algorithm.id,
            Algorithm.name,
            Algorithm.title,
            Algorithm.owner_id,
            User.name,
            Evaluation.published,
            Evaluation.image_digest,
            Evaluation.scorer_version,
            Evaluation.scoring_params,
            Evaluation.finished_at,
            AlgorithmVersion.created_at,
            Evaluation.started_at,
            Phase.failed_recordings,
            Dataset.failed_recordings,
            Phase.disclosure,
            Dataset.disclosure,
            Dataset.kind,
            DatasetResult.subjects,
            DatasetResult.recordings,
            *(getattr(DatasetResult, m) for m in METRICS),
        )
        .join(DatasetResult, DatasetResult.evaluation_id == Evaluation.id)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .join(User, Algorithm.owner_id == User.id)
        .join(DatasetVersion, Evaluation.dataset_version_id == DatasetVersion.id)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
        .outerjoin(Phase, AlgorithmVersion.phase_id == Phase.id)
        .where(
            Evaluation.dataset_version_id == dv.id,
            Evaluation.status == EvaluationStatus.DONE,
            Evaluation.official.is_(True),
            Evaluation.kind != EvaluationKind.SMOKE_TEST,
            # Withdrawn by its owner or an admin: off the leaderboard, for everyone.
            Algorithm.withdrawn_at.is_(None),
            policy.visible_evaluations(viewer),
        )
        .order_by(Evaluation.id.desc())
    )
    records = session.execute(query).all()
    failed = failed_counts(session, [record[0] for record in records])
    rows = []
    for record in records:
        (eid, avid, aver, aid, aname, atitle, owner_id, owner, published, digest, scorer,
         params, finished, submitted, started, phase_rule, dataset_rule, phase_level,
         dataset_level, kind, subjects, recordings, *values) = record  # fmt: skip
        rows.append(
            Row(
                evaluation_id=eid,
                algorithm_version_id=avid,
                algorithm_version=aver,
                algorithm_id=aid,
                algorithm=aname,
                title=atitle,
                owner_id=owner_id,
                owner=owner,
                published=published,
                image_digest=digest,
                scorer_version=scorer,
                scoring_params=params or {},
                finished_at=finished,
                submitted_at=submitted,
                started_at=started,
                failures_rule=FailedRecordings(phase_rule or dataset_rule),
                disclosure=disclosure.level_of(kind, dataset_level, phase_level),
                failed_recordings=failed.get(eid, 0),
                subjects=subjects,
                recordings=recordings,
                metrics=dict(zip(METRICS, values, strict=True)),
            )
        )
    return rows


def earlier_same_image(
    session: Session, versions: list[AlgorithmVersion], *, viewer: User | None
) -> dict[int, SameImage]:
    """Per version: the earliest submission of the same image digest before it, among the
    versions ``viewer`` may see (the one that ranks in its place on a leaderboard)."""
    digests = {v.image_digest for v in versions if v.image_digest}
    if not digests:
        return {}
    candidates = session.execute(
        select(
            AlgorithmVersion.id,
            AlgorithmVersion.image_digest,
            AlgorithmVersion.created_at,
            AlgorithmVersion.version,
            Algorithm.id,
            Algorithm.name,
        )
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .where(AlgorithmVersion.image_digest.in_(digests), policy.visible_algorithms(viewer))
        .order_by(AlgorithmVersion.created_at, AlgorithmVersion.id)
    ).all()
    first: dict[str, Any] = {}
    for row in candidates:
        first.setdefault(row[1] or "", row)
    found = {}
    for v in versions:
        earliest = first.get(v.image_digest or "")
        if earliest is not None and earliest[0] != v.id:
            found[v.id] = SameImage(
                algorithm_version_id=earliest[0],
                algorithm_version=earliest[3],
                algorithm_id=earliest[4],
                algorithm=earliest[5],
                submitted_at=earliest[2],
            )
    return found


def failures_rule(evaluation: Evaluation) -> FailedRecordings:
    """The rule for ``evaluation``'s failed recordings: its phase's override, else its
    dataset's."""
    phase = evaluation.algorithm_version.phase
    if phase is not None and phase.failed_recordings is not None:
        return phase.failed_recordings
    return evaluation.dataset_version.dataset.failed_recordings


def failed_counts(session: Session, evaluation_ids: list[int]) -> dict[int, int]:
    """Recordings that ended as the algorithm's failure, per evaluation.

    A count per evaluation is what every viewer may know of a finished evaluation (see
    :func:`szbench.results.disclosure.outcome_summary`); which recording failed is not.
    """
    if not evaluation_ids:
        return {}
    return {
        evaluation_id: n
        for evaluation_id, n in session.execute(
            select(RecordingRun.evaluation_id, func.count(RecordingRun.id))
            .where(
                RecordingRun.evaluation_id.in_(evaluation_ids),
                RecordingRun.outcome.in_(FAILED_OUTCOMES),
            )
            .group_by(RecordingRun.evaluation_id)
        )
    }


def _set_apart(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(rankable, unranked): failures per their rule, then later copies of one image."""
    rankable: list[Row] = []
    unranked: list[Row] = []
    for row in rows:
        if not row.complete and row.failures_rule == FailedRecordings.UNRANKED:
            row.unranked = "failed"
            unranked.append(row)
        else:
            rankable.append(row)
    first_of: dict[str, Row] = {}
    for row in sorted(rankable, key=_submission_order):
        first = first_of.setdefault(row.image_digest, row)
        if first is not row:
            row.unranked = "duplicate"
            row.duplicate_of = first
    unranked += [r for r in rankable if r.unranked]
    return [r for r in rankable if not r.unranked], unranked


def _submission_order(row: Row) -> tuple[datetime, int]:
    submitted = row.submitted_at or datetime.max
    return (submitted.replace(tzinfo=None), row.algorithm_version_id)


def board_rows(
    session: Session, dv: DatasetVersion, *, viewer: User | None, versions: VersionsMode
) -> tuple[list[Row], list[Row]]:
    """(ranked, unranked): the entries in SzCORE rank order, and those shown apart."""
    newest_per_version: dict[int, Row] = {}
    for row in _rows(session, dv, viewer):  # newest evaluation first
        newest_per_version.setdefault(row.algorithm_version_id, row)
    rows = list(newest_per_version.values())
    if versions == "latest":
        latest: dict[int, Row] = {}
        for row in sorted(rows, key=lambda r: -r.algorithm_version_id):
            latest.setdefault(row.algorithm_id, row)
        rows = list(latest.values())
    rows, unranked = _set_apart(rows)
    for row in unranked:
        row.rank = None

    def key(r: Row) -> tuple[float, float, int]:
        return (
            _desc_key(r.metrics["event_f1"]),
            _desc_key(r.metrics["event_sensitivity"]),
            r.evaluation_id,
        )

    rows.sort(key=key)
    previous: tuple[float, float] | None = None
    for position, row in enumerate(rows, start=1):
        current = key(row)[:2]
        row.rank = rows[position - 2].rank if current == previous else position
        previous = current
    unranked.sort(key=key)
    return rows, unranked


def _sorted(rows: list[Row], sort: str, order: str | None) -> tuple[list[Row], str]:
    if sort not in SORT_KEYS:
        raise BadRequest(f"sort: {sort!r} is not one of {', '.join(SORT_KEYS)}")
    if sort == "rank":
        natural = "asc"
        ordered = list(rows)
    elif sort == "algorithm":
        natural = "asc"
        ordered = sorted(rows, key=lambda r: (r.algorithm, r.algorithm_version))
    elif sort in ("subjects", "recordings"):
        natural = "desc"
        ordered = sorted(rows, key=lambda r: (-getattr(r, sort), _rank_key(r)))
    else:
        natural = "asc" if sort in _LOWER_IS_BETTER else "desc"
        # Best first, None/NaN last in both directions.
        sign = 1.0 if natural == "desc" else -1.0

        def best_first(r: Row) -> tuple[float, float]:
            value = r.metrics[sort]
            return (_desc_key(None if value is None else sign * value), _rank_key(r))

        ordered = sorted(rows, key=best_first)
    order = order or natural
    if order not in ("asc", "desc"):
        raise BadRequest(f"order: {order!r} is not asc or desc")
    if order != natural:
        present = [r for r in ordered if _present(r, sort)]
        missing = [r for r in ordered if not _present(r, sort)]
        ordered = present[::-1] + missing
    return ordered, order


def _rank_key(row: Row) -> float:
    return math.inf if row.rank is None else row.rank


def _present(row: Row, sort: str) -> bool:
    if sort in row.metrics:
        value = row.metrics[sort]
        return value is not None and not math.isnan(value)
    return True


def _clean(value: float | None) -> float | None:
    return (
        None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value
    )


def leaderboard(
    session: Session,
    *,
    slug: str,
    version: str | None,
    viewer: User | None,
    sort: str = "rank",
    order: str | None = None,
    versions: VersionsMode = "latest",
    limit: int | None = 50,
    offset: int = 0,
    with_statistics: bool = True,
    unranked: bool = False,
) -> Leaderboard:
    """The board; with ``unranked`` the entries shown apart follow the ranked ones."""
    dataset = datasets.get_dataset(session, slug)
    dv = datasets.get_version(session, dataset, version)
    rows, apart = board_rows(session, dv, viewer=viewer, versions=versions)
    ordered, order = _sorted(rows, sort, order)
    if unranked:
        ordered += _sorted(apart, sort, order)[0]
    window = ordered[offset:] if limit is None else ordered[offset : offset + limit]

    settings = get_settings()
    if with_statistics and rows:
        stats = statistics.board_statistics(session, [r.evaluation_id for r in rows])
    else:
        stats = statistics.BoardStats(status="not computed", by_evaluation={})
    summaries = run_summaries(session, [r.evaluation_id for r in window])
    if dataset.kind != DatasetKind.PUBLIC_SAMPLE:
        # A container chooses how long it runs and how much memory it takes, from the data
        # it reads: on held-out data those figures are for admins (on the evaluation).
        summaries = {
            i: dataclasses.replace(s, wall_time_s=None, peak_memory_bytes=None)
            for i, s in summaries.items()
        }
    items = []
    for row in window:
        entry_stats = stats.by_evaluation.get(row.evaluation_id)
        if entry_stats is not None and not _intervals_disclosed(row, viewer):
            entry_stats = None
        twin = row.duplicate_of
        items.append(
            LeaderboardEntry(
                rank=row.rank,
                complete=row.complete,
                failed_recordings=row.failed_recordings,
                failed_recordings_rule=row.failures_rule,
                unranked_reason=row.unranked,
                duplicate_of=(
                    DuplicateOf(
                        evaluation_id=twin.evaluation_id,
                        algorithm_id=twin.algorithm_id,
                        algorithm=twin.algorithm,
                        algorithm_version=twin.algorithm_version,
                        owner=twin.owner,
                    )
                    if twin
                    else None
                ),
                submitted_at=row.submitted_at,
                started_at=row.started_at,
                finished_at=row.finished_at,
                evaluation_id=row.evaluation_id,
                algorithm_id=row.algorithm_id,
                algorithm=row.algorithm,
                title=row.title,
                owner=row.owner,
                algorithm_version_id=row.algorithm_version_id,
                algorithm_version=row.algorithm_version,
                published=row.published,
                mine=viewer is not None and row.owner_id == viewer.id,
                subjects=row.subjects,
                recordings=row.recordings,
                ci=(
                    {
                        m: Interval(low=_clean(lo), high=_clean(hi))
                        for m, (lo, hi) in entry_stats.ci.items()
                    }
                    if entry_stats
                    else None
                ),
                rank_stability=(
                    RankStability(
                        median=entry_stats.rank_median,
                        low=entry_stats.rank_low,
                        high=entry_stats.rank_high,
                        best_share=entry_stats.best_share,
                        histogram=entry_stats.histogram,
                    )
                    if entry_stats
                    else None
                ),
                provenance=make_provenance(
                    summaries[row.evaluation_id],
                    image_digest=row.image_digest,
                    dataset=dataset.slug,
                    dataset_version=dv.version,
                    scorer_version=row.scorer_version,
                    scoring_params=row.scoring_params,
                    official=True,
                ),
                **{m: _clean(v) for m, v in row.metrics.items()},
            )
        )
    return Leaderboard(
        dataset=dataset.slug,
        dataset_version=dv.version,
        kind=dataset.kind,
        ranking=RANKING_RULE,
        failed_recordings=dataset.failed_recordings,
        unranked_total=len(apart),
        sort=sort,
        order=order,
        statistics=StatisticsInfo(
            status=stats.status,
            confidence_level=settings.confidence_level,
            resamples=settings.bootstrap_resamples,
        ),
        items=items,
        total=len(ordered),
        limit=len(window) if limit is None else limit,
        offset=offset,
    )


class LeaderboardFacts(NamedTuple):
    """What a leaderboard depends on: the dataset version that the slug and version asked
    for mean, its rules, and a stamp of its evaluations that changes whenever a result
    appears, finishes, is published or hidden (the sums are weighted by evaluation id so
    that two changes, one published and another hidden, rarely cancel out)."""

    dataset_version_id: int
    failed_recordings: str
    disclosure: str
    evaluations: int
    last_id: int | None
    last_finished_at: datetime | None
    shown_ids: int | None
    done_ids: int | None
    scored_as_empty_ids: int | None
    kept_unranked_ids: int | None


def _facts(session: Session, subject: tuple[str, str | None]) -> LeaderboardFacts | None:
    slug, version = subject
    # As datasets.get_version: the named version, or the newest active one.
    meant = session.execute(
        select(DatasetVersion.id, Dataset.failed_recordings, Dataset.disclosure)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
        .where(
            Dataset.slug == slug,
            DatasetVersion.is_active.is_(True)
            if version is None
            else DatasetVersion.version == version,
        )
        .order_by(DatasetVersion.id.desc())
        .limit(1)
    ).first()
    if meant is None:
        return None
    dv_id, rule, level = meant
    # A withdrawal (or its undoing) changes both sums, so every viewer's answer is rebuilt.
    listed = Algorithm.withdrawn_at.is_(None)
    shown = and_(Evaluation.published.is_(True), Algorithm.visibility == Visibility.PUBLIC, listed)
    done = and_(Evaluation.status == EvaluationStatus.DONE, listed)
    # A phase's failed-recordings override moves entries in or out of the ranking, either
    # way (a phase may keep failures unranked on a dataset that scores them).
    scored_as_empty = Phase.failed_recordings == FailedRecordings.NO_DETECTIONS
    kept_unranked = Phase.failed_recordings == FailedRecordings.UNRANKED
    stamp = session.execute(
        select(
            func.count(Evaluation.id),
            func.max(Evaluation.id),
            func.max(Evaluation.finished_at),
            func.sum(case((shown, Evaluation.id), else_=0)),
            func.sum(case((done, Evaluation.id), else_=0)),
            func.sum(case((scored_as_empty, Evaluation.id), else_=0)),
            func.sum(case((kept_unranked, Evaluation.id), else_=0)),
        )
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .outerjoin(Phase, AlgorithmVersion.phase_id == Phase.id)
        .where(Evaluation.dataset_version_id == dv_id)
    ).one()
    return LeaderboardFacts(dv_id, str(rule), str(level), *stamp)


answers: StampedCache[tuple[str, str | None], LeaderboardFacts] = StampedCache(
    "leaderboards",
    _facts,
    kept=512,
    ttl_s=lambda: get_settings().leaderboard_cache_s,
)
"""Leaderboard answers per (slug, version asked for); see :mod:`szbench.stamped_cache`."""


def clear_cache() -> None:
    answers.clear()


def leaderboard_answer(
    session: Session,
    slug: str,
    version: str | None,
    *,
    viewer: User | None,
    variant: Hashable,
    build: Callable[[], bytes],
) -> Answer:
    """A leaderboard's answer for this viewer and variant (query parameters), kept while
    its facts are unchanged. What a viewer may see is decided in :func:`leaderboard`, so
    each viewer has their own answer."""
    facts = answers.facts(session, (slug, version))
    if facts is None:
        # The not-found error names what is missing: the dataset or its version.
        datasets.get_version(session, datasets.get_dataset(session, slug), version)
        raise AssertionError("get_version raises for a version that does not exist")
    return answers.answer((slug, version), facts, (viewer_key(viewer), variant), build)


def index(session: Session, *, viewer: User | None) -> list[LeaderboardIndexRow]:
    """Every dataset version with at least one visible official result, and how many
    entries its leaderboard ranks in its default view (and how many it shows apart)."""
    candidates = session.scalars(
        select(DatasetVersion)
        .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
        .where(
            select(Evaluation.id)
            .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
            .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
            .where(
                Evaluation.dataset_version_id == DatasetVersion.id,
                Evaluation.status == EvaluationStatus.DONE,
                Evaluation.official.is_(True),
                Evaluation.kind != EvaluationKind.SMOKE_TEST,
                Algorithm.withdrawn_at.is_(None),
                policy.visible_evaluations(viewer),
            )
            .exists()
        )
        .order_by(Dataset.slug, DatasetVersion.id)
    ).all()
    index_rows = []
    for dv in candidates:
        # The same rows as the leaderboard's default view, so the two counts cannot differ.
        ranked, apart = board_rows(session, dv, viewer=viewer, versions="latest")
        dataset = dv.dataset
        index_rows.append(
            LeaderboardIndexRow(
                dataset=dataset.slug,
                title=dataset.title,
                kind=dataset.kind,
                dataset_version=dv.version,
                entries=len(ranked),
                unranked=len(apart),
            )
        )
    return index_rows


def download_rows(board: Leaderboard) -> tuple[list[dict[str, Any]], list[str]]:
    columns = [
        "rank", "algorithm", "algorithm_version", "owner", "published", "subjects", "recordings",
        *METRICS,
        *(f"{m}_ci_{b}" for m in statistics.CI_METRICS for b in ("low", "high")),
        "rank_median", "image_digest", "scorer_version", "evaluation_id",
        "complete", "failed_recordings", "failed_recordings_rule", "unranked_reason",
        "duplicate_of_evaluation_id", "submitted_at", "started_at", "finished_at",
    ]  # fmt: skip
    rows = []
    for e in board.items:
        row: dict[str, Any] = e.model_dump(
            exclude={"ci", "rank_stability", "provenance", "duplicate_of"}
        )
        row["duplicate_of_evaluation_id"] = e.duplicate_of.evaluation_id if e.duplicate_of else None
        for m in statistics.CI_METRICS:
            interval = (e.ci or {}).get(m)
            row[f"{m}_ci_low"] = interval.low if interval else None
            row[f"{m}_ci_high"] = interval.high if interval else None
        row["rank_median"] = e.rank_stability.median if e.rank_stability else None
        row["image_digest"] = e.provenance.image_digest
        row["scorer_version"] = e.provenance.scorer_version
        rows.append(row)
    return rows, columns
