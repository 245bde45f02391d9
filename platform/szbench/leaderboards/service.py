"""Leaderboards: official, finished, visible results on one dataset version, ranked the
SzCORE way (per-subject-averaged event F1, then event sensitivity), with statistics.

:func:`leaderboard` runs named steps: resolve the dataset version, select the rows the viewer
may see (each with its :class:`~szbench.disclosure.decision.View`), keep the newest of each
version (and the latest version of each algorithm), release each row's figures as its view
says (rounded, the Ladder's score, or exact), set apart what does not rank, rank on the
released figures, order, window, add the statistics the views allow, and build the entries.
Every rule of what a viewer learns comes from :func:`szbench.disclosure.decision.decide`;
ranking and sorting use the released figures, so neither tells more than the figures shown.

Two kinds of entry are shown apart, unranked (``?unranked=true``), never ranked by default:

- an evaluation in which recordings failed (crashed, timeout, out of memory, no or invalid
  output), unless its dataset or phase says such recordings are scored as no detections
  (:class:`~szbench.models.FailedRecordings`): a failure is not a score;
- a later submission of an image digest already on the board: the earliest submission
  (by version upload time) ranks, the others are duplicates of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.config import get_settings
from szbench.datasets import queries as datasets
from szbench.disclosure import bits, decision, ladder, release
from szbench.disclosure import facts as rule_facts
from szbench.disclosure import progress as timing
from szbench.disclosure.decision import Release
from szbench.errors import BadRequest
from szbench.evaluations.queries import make_provenance, run_summaries, shown_summary
from szbench.leaderboards import statistics
from szbench.leaderboards.schemas import (
    BoardRelease,
    DuplicateOf,
    Interval,
    Leaderboard,
    LeaderboardEntry,
    LeaderboardIndexRow,
    PhaseRelease,
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
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    FailedRecordings,
    Phase,
    PhaseDatasetVersion,
    Recording,
    RecordingRun,
    User,
)
from szbench.results.queries import METRICS
from szbench.stamped_cache import Answer, StampedCache, viewer_key

RANKING_RULE = "event_f1 (per-subject mean) desc, then event_sensitivity desc (SzCORE)"
SORT_KEYS = ("rank", *METRICS, "algorithm", "subjects", "recordings")
# Lower is better for these; every other metric is higher-is-better.
_LOWER_IS_BETTER = {"event_fp_rate", "sample_fp_rate"}
VersionsMode = Literal["latest", "all"]


@dataclass(frozen=True)
class BoardQuery:
    """What a caller asks of a leaderboard: which board, in which order, which page."""

    slug: str
    version: str | None = None
    sort: str = "rank"
    order: str | None = None
    versions: VersionsMode = "latest"
    limit: int | None = 50
    offset: int = 0
    with_statistics: bool = True
    # Also list, after the ranked entries, those shown apart (failed, duplicate).
    unranked: bool = False


@dataclass
class Row:
    evaluation_id: int
    algorithm_version_id: int
    algorithm_version: str
    algorithm_id: int
    algorithm: str
    title: str
    owner_id: int
    team_id: int | None
    owner: str
    published: bool
    image_digest: str
    scorer_version: str
    scoring_params: dict[str, Any]
    finished_at: datetime | None
    subjects: int
    recordings: int
    view: decision.View
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    failures_rule: FailedRecordings = FailedRecordings.UNRANKED
    failed_recordings: int = 0
    # The figures as computed, then (after the release step) as the viewer gets them.
    metrics: dict[str, float | None] = field(default_factory=dict)
    rank: int | None = 0
    # Why it is not ranked ("failed" or "duplicate"); None for a ranked entry.
    unranked: str | None = None
    duplicate_of: Row | None = None

    @property
    def complete(self) -> bool:
        return self.failed_recordings == 0


def _desc_key(value: float | None) -> float:
    """Sort key putting high values first and NaN/None last."""
    return math.inf if value is None or math.isnan(value) else -value


# --- select ----------------------------------------------------------------------------------


def _select(session: Session, dv: DatasetVersion, viewer: User | None) -> list[Row]:
    """The official, finished results on ``dv`` that ``viewer`` may see, newest first, each
    with its view (the rules of the phases naming ``dv``, else its dataset's)."""
    query = (
        select(
            Evaluation.id,
            Evaluation.algorithm_version_id,
            AlgorithmVersion.version,
            Algorithm.id,
            Algorithm.name,
            Algorithm.title,
            Algorithm.owner_id,
            Algorithm.team_id,
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
            Dataset.kind,
            Dataset.disclosure,
            *rule_facts.PHASE_COLUMNS,
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
    records = session.execute(rule_facts.join_own_phase(query)).all()
    failed = failed_counts(session, [record[0] for record in records])
    data = rule_facts.data_phases(session, [dv.id])[dv.id]
    rows = []
    for record in records:
        (eid, avid, aver, aid, aname, atitle, owner_id, team_id, owner, published, digest, scorer,
         params, finished, submitted, started, phase_rule, dataset_rule, kind,
         dataset_level, *rest) = record  # fmt: skip
        phase = tuple(rest[:6])
        subjects, recordings, *values = rest[6:]
        facts = rule_facts.facts_from_row(
            kind,
            dataset_level,
            phase,
            data=data,
            subjects=subjects,
            owner_id=owner_id,
            team_id=team_id,
        )
        rows.append(
            Row(
                evaluation_id=eid,
                algorithm_version_id=avid,
                algorithm_version=aver,
                algorithm_id=aid,
                algorithm=aname,
                title=atitle,
                owner_id=owner_id,
                team_id=team_id,
                owner=owner,
                published=published,
                image_digest=digest,
                scorer_version=scorer,
                scoring_params=params or {},
                finished_at=finished,
                submitted_at=submitted,
                started_at=started,
                failures_rule=FailedRecordings(phase_rule or dataset_rule),
                view=decision.decide(viewer, facts),
                failed_recordings=failed.get(eid, 0),
                subjects=subjects,
                recordings=recordings,
                metrics=dict(zip(METRICS, values, strict=True)),
            )
        )
    return rows


def _newest(rows: list[Row], versions: VersionsMode) -> list[Row]:
    """The newest evaluation of each algorithm version; with ``latest``, of each algorithm
    only its latest version. Under the Ladder a figure belongs to the evaluation that earned
    it, so an entry whose own evaluation released no score gives way to the one of the same
    version (or, with ``latest``, of the same algorithm) that released the best."""
    per_version: dict[int, Row] = {}
    for row in rows:  # newest evaluation first
        kept = per_version.setdefault(row.algorithm_version_id, row)
        if _earned(row) is not None and (_earned(kept) is None):
            per_version[row.algorithm_version_id] = row
    kept_rows = list(per_version.values())
    if versions == "latest":
        latest: dict[int, Row] = {}
        for row in sorted(kept_rows, key=lambda r: -r.algorithm_version_id):
            chosen = latest.setdefault(row.algorithm_id, row)
            if _is_ladder(chosen) and (_earned(row) or -1.0) > (_earned(chosen) or -1.0):
                latest[row.algorithm_id] = row
        kept_rows = list(latest.values())
    return kept_rows


def _is_ladder(row: Row) -> bool:
    return row.view.release == Release.LADDER


def _earned(row: Row) -> float | None:
    """The score a Ladder row's own evaluation earned (None: none, or not the Ladder)."""
    return row.metrics.get(release.LADDER_METRIC) if _is_ladder(row) else None


# --- release ---------------------------------------------------------------------------------


def _release(session: Session, rows: list[Row]) -> None:
    """Replace each row's figures by what its view releases (rank and order follow them)."""
    # Under the Ladder, each row's own evaluation's earned score (disclosure.ladder).
    scores = ladder.ladder_scores(session, [(r.evaluation_id, r.view) for r in rows])
    for row in rows:
        row.metrics = release.released_metrics(
            row.view, row.metrics, ladder_score=scores.get(row.evaluation_id)
        )


# --- rank ------------------------------------------------------------------------------------


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
    """The rule for ``evaluation``'s failed recordings: its own phase's override (the
    phase of its version, when the phase names its dataset version), else its dataset's."""
    phase = rule_facts.own_phase(evaluation)
    if phase is not None and phase.failed_recordings is not None:
        return phase.failed_recordings
    return evaluation.dataset_version.dataset.failed_recordings


def failed_counts(session: Session, evaluation_ids: list[int]) -> dict[int, int]:
    """Recordings that ended as the algorithm's failure, per evaluation.

    A count per evaluation is what every viewer may know of a finished evaluation (see
    :func:`szbench.disclosure.progress.outcome_summary`); which recording failed is not.
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
    """(rankable, unranked): failures per their rule, entries that released no score under
    the Ladder, then later copies of one image."""
    rankable: list[Row] = []
    unranked: list[Row] = []
    for row in rows:
        if not row.complete and row.failures_rule == FailedRecordings.UNRANKED:
            row.unranked = "failed"
            unranked.append(row)
        elif _is_ladder(row) and _earned(row) is None:
            row.unranked = "not_released"
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


def _rank_key(row: Row) -> tuple[float, float, int]:
    return (
        _desc_key(row.metrics["event_f1"]),
        _desc_key(row.metrics["event_sensitivity"]),
        row.evaluation_id,
    )


def _rank(rows: list[Row], unranked: list[Row]) -> None:
    """SzCORE order on the released figures; equal figures share a rank."""
    for row in unranked:
        row.rank = None
    rows.sort(key=_rank_key)
    previous: tuple[float, float] | None = None
    for position, row in enumerate(rows, start=1):
        current = _rank_key(row)[:2]
        row.rank = rows[position - 2].rank if current == previous else position
        previous = current
    unranked.sort(key=_rank_key)


def board_rows(
    session: Session, dv: DatasetVersion, *, viewer: User | None, versions: VersionsMode
) -> tuple[list[Row], list[Row]]:
    """(ranked, unranked): the entries in SzCORE rank order, and those shown apart."""
    rows = _select(session, dv, viewer)
    _release(session, rows)
    ranked, apart = _set_apart(_newest(rows, versions))
    _rank(ranked, apart)
    return ranked, apart


# --- order and window ------------------------------------------------------------------------


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
        ordered = sorted(rows, key=lambda r: (-getattr(r, sort), _rank_position(r)))
    else:
        natural = "asc" if sort in _LOWER_IS_BETTER else "desc"
        # Best first, None/NaN last in both directions.
        sign = 1.0 if natural == "desc" else -1.0

        def best_first(r: Row) -> tuple[float, float]:
            value = r.metrics[sort]
            return (_desc_key(None if value is None else sign * value), _rank_position(r))

        ordered = sorted(rows, key=best_first)
    order = order or natural
    if order not in ("asc", "desc"):
        raise BadRequest(f"order: {order!r} is not asc or desc")
    if order != natural:
        present = [r for r in ordered if _present(r, sort)]
        missing = [r for r in ordered if not _present(r, sort)]
        ordered = present[::-1] + missing
    return ordered, order


def _rank_position(row: Row) -> float:
    return math.inf if row.rank is None else row.rank


def _present(row: Row, sort: str) -> bool:
    if sort in row.metrics:
        value = row.metrics[sort]
        return value is not None and not math.isnan(value)
    return True


def _order(ranked: list[Row], apart: list[Row], query: BoardQuery) -> tuple[list[Row], str]:
    """The ranked entries in the asked order, then (if asked) those shown apart."""
    ordered, order = _sorted(ranked, query.sort, query.order)
    if query.unranked:
        ordered += _sorted(apart, query.sort, order)[0]
    return ordered, order


def _window(ordered: list[Row], query: BoardQuery) -> list[Row]:
    if query.limit is None:
        return ordered[query.offset :]
    return ordered[query.offset : query.offset + query.limit]


# --- statistics and entries ------------------------------------------------------------------


def _statistics(session: Session, ranked: list[Row], query: BoardQuery) -> statistics.BoardStats:
    """Bootstrap intervals and rank stability over the ranked entries the viewer sees (each
    entry shows them only where its view allows: :func:`_entry`)."""
    if not (query.with_statistics and ranked):
        return statistics.BoardStats(status="not computed", by_evaluation={})
    return statistics.board_statistics(session, [r.evaluation_id for r in ranked])


def _intervals(row: Row, stats: statistics.EntryStats | None) -> dict[str, Interval] | None:
    if stats is None or not row.view.intervals:
        return None
    out = {}
    for metric, (low, high) in stats.ci.items():
        released = release.released_interval(row.view, metric, low, high)
        if released is not None:
            out[metric] = Interval(low=released[0], high=released[1])
    return out


def _rank_stability(row: Row, stats: statistics.EntryStats | None) -> RankStability | None:
    if stats is None or not row.view.intervals:
        return None
    view = row.view
    share = stats.best_share if view.exact else release.round_ratio(stats.best_share, view.decimals)
    return RankStability(
        median=release.released_rank(view, stats.rank_median),
        low=release.released_rank(view, stats.rank_low),
        high=release.released_rank(view, stats.rank_high),
        best_share=share,
        histogram=release.released_histogram(view, stats.histogram),
    )


def _statistics_withheld(
    row: Row, stats: statistics.BoardStats, entry: statistics.EntryStats | None
) -> str | None:
    """Why this entry shows no intervals or rank stability: its view's reason first."""
    if row.view.intervals_withheld is not None:
        return row.view.intervals_withheld
    if entry is not None:
        return None
    if row.rank is None:
        return "Intervals and rank stability are computed for ranked entries only"
    return f"Intervals and rank stability: {stats.status}"


def _duplicate_of(row: Row) -> DuplicateOf | None:
    twin = row.duplicate_of
    if twin is None:
        return None
    return DuplicateOf(
        evaluation_id=twin.evaluation_id,
        algorithm_id=twin.algorithm_id,
        algorithm=twin.algorithm,
        algorithm_version=twin.algorithm_version,
        owner=twin.owner,
    )


def _entries(
    session: Session,
    window: list[Row],
    stats: statistics.BoardStats,
    dv: DatasetVersion,
    viewer: User | None,
) -> list[LeaderboardEntry]:
    summaries = run_summaries(session, [r.evaluation_id for r in window])
    items = []
    for row in window:
        # Board entries are finished evaluations.
        summary = shown_summary(row.view, summaries[row.evaluation_id], finished=True)
        entry_stats = stats.by_evaluation.get(row.evaluation_id)
        items.append(
            LeaderboardEntry(
                rank=row.rank,
                complete=row.complete,
                failed_recordings=row.failed_recordings,
                failed_recordings_rule=row.failures_rule,
                unranked_reason=row.unranked,
                duplicate_of=_duplicate_of(row),
                submitted_at=row.submitted_at,
                # On held-out data a non-admin reads times rounded up to the progress clock.
                started_at=timing.shown_moment(row.view, row.started_at),
                finished_at=timing.shown_moment(row.view, row.finished_at),
                evaluation_id=row.evaluation_id,
                algorithm_id=row.algorithm_id,
                algorithm=row.algorithm,
                title=row.title,
                owner=row.owner,
                algorithm_version_id=row.algorithm_version_id,
                algorithm_version=row.algorithm_version,
                published=row.published,
                mine=policy.acts_for(viewer, owner_id=row.owner_id, team_id=row.team_id),
                subjects=row.subjects,
                recordings=row.recordings,
                release=row.view.release,
                ci=_intervals(row, entry_stats),
                rank_stability=_rank_stability(row, entry_stats),
                statistics_withheld=_statistics_withheld(row, stats, entry_stats),
                provenance=make_provenance(
                    summary,
                    image_digest=row.image_digest,
                    dataset=dv.dataset.slug,
                    dataset_version=dv.version,
                    scorer_version=row.scorer_version,
                    scoring_params=row.scoring_params,
                    official=True,
                ),
                **row.metrics,
            )
        )
    return items


def board_release(session: Session, dv: DatasetVersion, *, entries: int = 1) -> BoardRelease:
    """How this board releases scores to non-admins: per phase naming it, its rule now; the
    rule every evaluation on it follows outside a closed phase of its own, and what one
    evaluation can tell a non-admin by that rule, in bits (``disclosure.bits``)."""
    settings = get_settings()
    phases = session.scalars(
        select(Phase)
        .join(PhaseDatasetVersion, PhaseDatasetVersion.phase_id == Phase.id)
        .where(PhaseDatasetVersion.dataset_version_id == dv.id)
        .order_by(Phase.id)
    ).all()
    rules = [rule_facts.rules_of(p) for p in phases]
    dataset = dv.dataset
    recordings, subjects = session.execute(
        select(func.count(Recording.id), func.count(func.distinct(Recording.subject))).where(
            Recording.dataset_version_id == dv.id
        )
    ).one()
    view = decision.decide(
        None,
        rule_facts.Facts(
            held_out=dataset.kind != DatasetKind.PUBLIC_SAMPLE,
            dataset_level=dataset.disclosure,
            data_phases=tuple(rules),
            subjects=subjects,
        ),
    )
    timeout = (dataset.run_limits or {}).get("timeout_s") or settings.runner_timeout_s
    bound = bits.bound(
        view,
        recordings=recordings,
        subjects=subjects,
        entries=entries,
        run_timeout_s=float(timeout),
    )
    return BoardRelease(
        decimals=decision.RELEASED_DECIMALS,
        phases=[
            PhaseRelease(
                phase=r.slug,
                rule=r.release,
                ladder_step=r.ladder_step if r.release == "ladder" else None,
                closed=r.closed,
            )
            for r in rules
        ],
        rule=view.release,
        bits_per_evaluation=_one_decimal(bound.figures),
        timing_bits_per_evaluation=_one_decimal(bound.timing),
        bits_per_comparison=_one_decimal(bound.comparison),
    )


def _one_decimal(bits_: float | None) -> float | None:
    return None if bits_ is None else round(bits_, 1)


def _resolve(session: Session, query: BoardQuery) -> tuple[Dataset, DatasetVersion]:
    dataset = datasets.get_dataset(session, query.slug)
    return dataset, datasets.get_version(session, dataset, query.version)


def leaderboard(session: Session, query: BoardQuery, *, viewer: User | None) -> Leaderboard:
    """The board as ``viewer`` may see it; with ``query.unranked`` the entries shown apart
    follow the ranked ones."""
    dataset, dv = _resolve(session, query)
    ranked, apart = board_rows(session, dv, viewer=viewer, versions=query.versions)
    ordered, order = _order(ranked, apart, query)
    window = _window(ordered, query)
    stats = _statistics(session, ranked, query)
    # Imported here: numpy is not loaded by pages that never build a board.
    from szbench_scoring.stats import CONFIDENCE_LEVEL

    return Leaderboard(
        dataset=dataset.slug,
        dataset_version=dv.version,
        kind=dataset.kind,
        ranking=RANKING_RULE,
        release=board_release(session, dv, entries=len(ranked)),
        failed_recordings=dataset.failed_recordings,
        unranked_total=len(apart),
        sort=query.sort,
        order=order,
        statistics=StatisticsInfo(
            status=stats.status,
            confidence_level=CONFIDENCE_LEVEL,
            resamples=statistics.BOOTSTRAP_RESAMPLES,
        ),
        items=_entries(session, window, stats, dv, viewer),
        total=len(ordered),
        limit=len(window) if query.limit is None else query.limit,
        offset=query.offset,
    )


# --- the cache -------------------------------------------------------------------------------


class LeaderboardFacts(NamedTuple):
    """What a leaderboard's answers key on: the dataset version the slug and version asked
    for mean, its change counter (bumped by every service that changes what a board on it
    shows: :mod:`szbench.changes`) and whether each phase naming it is closed now (a closing
    date passes without a write)."""

    dataset_version_id: int
    revision: int
    phases_closed: tuple[tuple[int, bool], ...]


def _facts(session: Session, subject: tuple[str, str | None]) -> LeaderboardFacts | None:
    slug, version = subject
    # As datasets.get_version: the named version, or the newest active one.
    meant = session.execute(
        select(DatasetVersion.id, DatasetVersion.revision)
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
    dv_id, revision = meant
    phases = session.execute(
        select(Phase.id, Phase.is_open, Phase.closes_at)
        .join(PhaseDatasetVersion, PhaseDatasetVersion.phase_id == Phase.id)
        .where(PhaseDatasetVersion.dataset_version_id == dv_id)
        .order_by(Phase.id)
    ).all()
    closed = tuple(
        (pid, rule_facts.phase_closed(is_open, closes)) for pid, is_open, closes in phases
    )
    return LeaderboardFacts(dv_id, revision, closed)


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
    its facts are unchanged. What a viewer may see is decided per entry in
    :func:`leaderboard`, and differs per viewer (their own entries), so each has their own."""
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
        "release", *METRICS,
        *(f"{m}_ci_{b}" for m in statistics.CI_METRICS for b in ("low", "high")),
        "rank_median", "image_digest", "scorer_version", "evaluation_id",
        "complete", "failed_recordings", "failed_recordings_rule", "unranked_reason",
        "duplicate_of_evaluation_id", "submitted_at", "started_at", "finished_at",
    ]  # fmt: skip
    rows = []
    for e in board.items:
        row: dict[str, Any] = e.model_dump(
            exclude={"ci", "rank_stability", "statistics_withheld", "provenance", "duplicate_of"}
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
