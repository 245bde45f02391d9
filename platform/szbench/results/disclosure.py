"""What a viewer may learn about a (dataset version, evaluation) pair: decided here, once.

A submitter controls what their container does with the held-out recording it reads, and
so every figure the platform releases about a run on held-out data is a channel out of it.
:func:`decide` takes plain facts about one evaluation on one dataset version
(:class:`Facts`: the dataset's kind and disclosure level, the rules of the phase that
governs it, how many subjects its result spans, who owns it) and the viewer, and returns a
:class:`View`. Every route, page, download, comparison, chart and cache asks the view, and
applies its answer with the functions below; nothing else decides these rules.

The view answers:

- **per-subject figures** (:attr:`View.subjects`), **per-recording outcomes, counts and
  reference timelines** (:attr:`View.recordings`): by the disclosure level, the governing
  phase's override, else the dataset's (public samples: everything);
- **run details** (messages, exit codes, logs) and **run resources** (wall time, memory,
  timestamps): a container chooses all of them from the bytes it reads, so on held-out data
  they are for admins; a non-admin gets a fixed text per outcome (:data:`OUTCOME_TEXT`);
- **how scores are released** (:attr:`View.release`): ``exact`` (admins, public samples,
  and held-out data disclosed per subject or more), ``rounded`` (held-out data at the
  aggregate level: the leaderboard's figures only, at :func:`released_value`'s precision,
  no raw counts) or ``ladder`` (an open phase that releases by the Ladder: only the
  submitter's ladder score, :mod:`szbench.results.ladder`);
- **how progress is shown** (:attr:`View.progress`): a container chooses how long it runs
  on each recording, so on held-out data a non-admin sees progress ``coarse``
  (:func:`shown_progress`: a fraction in steps, as it stood at the last tick of a fixed
  clock, times rounded to that clock, no per-recording time) and everyone else ``full``;
- **intervals, rank stability and ``*_std``** (:attr:`View.intervals`): they resample or
  summarise the per-subject figures, and over a few subjects give them away (with two
  subjects, mean ± std are the two figures): where per-subject figures are not disclosed,
  only from ``SZBENCH_INTERVALS_MIN_SUBJECTS`` subjects on, and never under the Ladder;
  where they are withheld, :attr:`View.intervals_withheld` says why;
- **comparisons** (:attr:`View.comparison`): per-subject values side by side and the paired
  test as computed where per-subject figures are disclosed; at the aggregate level the
  paired test alone (mean difference, its interval, p), rounded, for a pair with values
  under both on at least ``SZBENCH_INTERVALS_MIN_SUBJECTS`` subjects that differ on at least
  as many (:func:`released_test`); nothing under the Ladder.

The governing phase of an evaluation is its algorithm version's phase *when that phase
names the evaluation's dataset version* (:func:`join_governing_phase`); on any other data
the phase's rules do not apply. A phase that no longer accepts submissions (closed, or past
its closing date: read at every request, so the date passing needs no write) releases exact
scores.

What each released figure can carry, in bits per evaluation, is :func:`bits_per_evaluation`
(docs/security.md states it with the defaults).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

from sqlalchemy import and_

from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import Forbidden, Unauthorized
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    Disclosure,
    Evaluation,
    Phase,
    PhaseDatasetVersion,
    ReleaseRule,
    RunOutcome,
    User,
)

_RANK = {Disclosure.AGGREGATE: 0, Disclosure.SUBJECT: 1, Disclosure.RECORDING: 2}

#: What a non-admin reads about a held-out run: fixed per outcome, no byte from the run.
OUTCOME_TEXT: dict[RunOutcome | None, str] = {
    None: "Not run yet.",
    RunOutcome.OK: "The algorithm produced a valid output; it was scored.",
    RunOutcome.TIMEOUT: "The algorithm ran past the time limit and was stopped.",
    RunOutcome.OUT_OF_MEMORY: "The algorithm exceeded the memory limit and was killed.",
    RunOutcome.CRASHED: "The algorithm failed (it exited with an error or was stopped).",
    RunOutcome.NO_OUTPUT: "The algorithm wrote no output file.",
    RunOutcome.INVALID_OUTPUT: "The algorithm's output does not follow the output contract.",
    RunOutcome.INFRASTRUCTURE_ERROR: "The run failed because of a platform fault.",
}

#: The summary of finished runs that a viewer without per-recording disclosure gets.
OK_KEY, FAILED_KEY = "ok", "failed"

#: The figures released at the aggregate level: those the leaderboard shows. The other
#: metrics (sample sensitivity, precision and FP/day) and every raw count are withheld.
ROUNDED_METRICS = ("event_f1", "event_sensitivity", "event_precision", "event_fp_rate", "sample_f1")
#: The one figure the Ladder releases: the ranking metric.
LADDER_METRIC = "event_f1"
#: The metrics a paired test is released on at the aggregate level: the ranking one alone.
COMPARED_METRICS = ("event_f1",)
#: FP/day at the aggregate level: 0.1 below 10, 1 below 100, 10 below 1000, then capped.
FP_RATE_CAP = 1000.0
FP_RATE_GRID_SIZE = 100 + 90 + 90 + 1
#: Rank stability at the aggregate level: medians and percentiles on half ranks.
RANK_STEP = 0.5


class ProgressDetail(enum.StrEnum):
    """How a viewer follows a running evaluation."""

    FULL = "full"
    COARSE = "coarse"


class Release(enum.StrEnum):
    """How a viewer gets an evaluation's scores."""

    EXACT = "exact"
    ROUNDED = "rounded"
    LADDER = "ladder"


class Comparing(enum.StrEnum):
    """What a comparison involving an evaluation may show a viewer."""

    SUBJECTS = "subjects"  # per-subject values side by side and the paired test, exact
    TEST = "test"  # the paired test only, rounded, for pairs over enough subjects
    NONE = "none"


_COMPARING_ORDER = (Comparing.NONE, Comparing.TEST, Comparing.SUBJECTS)


@dataclass(frozen=True)
class PhaseRules:
    """The rules of the phase that governs an evaluation, as they stand now."""

    slug: str
    level: Disclosure | None
    release: ReleaseRule
    ladder_step: float
    closed: bool


@dataclass(frozen=True)
class Facts:
    """What decides what a viewer may learn about one evaluation on one dataset version."""

    held_out: bool
    dataset_level: Disclosure
    phase: PhaseRules | None = None
    subjects: int = 0
    owner_id: int | None = None
    # The algorithm's team: its members learn what its owner learns (policy.acts_for).
    team_id: int | None = None


def _aware(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; every stored moment is UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def phase_closed(is_open: bool, closes_at: datetime | None, now: datetime | None = None) -> bool:
    """A phase closed by an admin, or past its closing date."""
    now = now or datetime.now(UTC)
    return not is_open or (closes_at is not None and now >= _aware(closes_at))


def phase_rules(
    *,
    slug: str,
    level: Disclosure | None,
    release_rule: ReleaseRule | None,
    ladder_step: float | None,
    is_open: bool,
    closes_at: datetime | None,
    now: datetime | None = None,
) -> PhaseRules:
    """A phase's rules now: a closed phase releases exact scores; an open one its own rule,
    by default the Ladder when it has no closing date (a continuous phase: submissions
    without end, where adaptive overfitting of the held-out set builds up) and exact
    otherwise (a phase with a deadline, e.g. a final round)."""
    closed = phase_closed(is_open, closes_at, now)
    if closed:
        release = ReleaseRule.EXACT
    elif release_rule is not None:
        release = release_rule
    else:
        release = ReleaseRule.LADDER if closes_at is None else ReleaseRule.EXACT
    return PhaseRules(
        slug=slug,
        level=level,
        release=release,
        ladder_step=ladder_step or get_settings().ladder_step,
        closed=closed,
    )


def rules_of(phase: Phase, now: datetime | None = None) -> PhaseRules:
    return phase_rules(
        slug=phase.slug,
        level=phase.disclosure,
        release_rule=phase.release_rule,
        ladder_step=phase.ladder_step,
        is_open=phase.is_open,
        closes_at=phase.closes_at,
        now=now,
    )


#: The governing phase's columns, in :func:`facts_from_row`'s order.
PHASE_COLUMNS = (
    Phase.slug,
    Phase.disclosure,
    Phase.release_rule,
    Phase.ladder_step,
    Phase.is_open,
    Phase.closes_at,
)


def join_governing_phase(query: Any) -> Any:
    """Outer-join :class:`Phase` as the phase that governs each evaluation: its version's
    phase when that phase names the evaluation's dataset version, else none (NULLs).
    ``query`` must already join :class:`AlgorithmVersion` to :class:`Evaluation`."""
    named = and_(
        PhaseDatasetVersion.phase_id == AlgorithmVersion.phase_id,
        PhaseDatasetVersion.dataset_version_id == Evaluation.dataset_version_id,
    )
    return query.outerjoin(PhaseDatasetVersion, named).outerjoin(
        Phase, Phase.id == PhaseDatasetVersion.phase_id
    )


def facts_from_row(
    kind: DatasetKind,
    dataset_level: Disclosure | None,
    phase: tuple[Any, ...],
    *,
    subjects: int | None,
    owner_id: int | None,
    team_id: int | None = None,
    now: datetime | None = None,
) -> Facts:
    """:class:`Facts` from a row: the dataset's kind and level, the :data:`PHASE_COLUMNS`
    of the governing phase (all NULL when none governs) and the result's subject count."""
    slug, level, release_rule, step, is_open, closes_at = phase
    rules = (
        None
        if slug is None
        else phase_rules(
            slug=slug,
            level=level,
            release_rule=release_rule,
            ladder_step=step,
            is_open=is_open,
            closes_at=closes_at,
            now=now,
        )
    )
    return Facts(
        held_out=kind != DatasetKind.PUBLIC_SAMPLE,
        dataset_level=dataset_level or Disclosure.AGGREGATE,
        phase=rules,
        subjects=subjects or 0,
        owner_id=owner_id,
        team_id=team_id,
    )


def governing_phase(evaluation: Evaluation) -> Phase | None:
    """The phase whose rules apply to ``evaluation`` (see :func:`join_governing_phase`)."""
    phase = evaluation.algorithm_version.phase
    if phase is None:
        return None
    named = any(dv.id == evaluation.dataset_version_id for dv in phase.dataset_versions)
    return phase if named else None


def facts_of(evaluation: Evaluation, now: datetime | None = None) -> Facts:
    dataset = evaluation.dataset_version.dataset
    phase = governing_phase(evaluation)
    result = evaluation.result
    return Facts(
        held_out=dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        dataset_level=dataset.disclosure or Disclosure.AGGREGATE,
        phase=rules_of(phase, now) if phase is not None else None,
        subjects=result.subjects if result is not None else 0,
        owner_id=evaluation.algorithm_version.algorithm.owner_id,
        team_id=evaluation.algorithm_version.algorithm.team_id,
    )


@dataclass(frozen=True)
class View:
    """What one viewer may learn of one evaluation (hashable: part of cache keys)."""

    admin: bool
    owner: bool
    held_out: bool
    level: Disclosure
    release: Release
    intervals: bool
    decimals: int
    ladder_step: float | None = None
    signed_in: bool = True
    comparison: Comparing = Comparing.NONE
    #: Subjects a released interval, rank stability or paired test needs at the aggregate level.
    min_subjects: int = 0
    #: Why intervals and rank stability are withheld from this viewer (None: they are not).
    intervals_withheld: str | None = None
    progress: ProgressDetail = ProgressDetail.FULL

    @property
    def subjects(self) -> bool:
        """Per-subject figures and counts."""
        if self.admin:
            return True
        return self.release != Release.LADDER and _RANK[self.level] >= _RANK[Disclosure.SUBJECT]

    @property
    def recordings(self) -> bool:
        """Per-recording outcomes, counts and reference timelines."""
        if self.admin:
            return True
        return self.release != Release.LADDER and self.level == Disclosure.RECORDING

    @property
    def run_details(self) -> bool:
        """Detailed messages, exit codes and logs of runs."""
        return self.admin or (self.owner and not self.held_out)

    @property
    def detections(self) -> bool:
        """The algorithm's raw output files: on held-out data they could carry the data out."""
        return self.admin or (self.owner and not self.held_out)

    @property
    def run_resources(self) -> bool:
        """Wall time, peak memory and timestamps of runs (a container can choose them)."""
        return self.admin or not self.held_out

    @property
    def shape(self) -> tuple[Any, ...]:
        """What shapes an answer for this view (a cache key part): everything but whether
        the viewer is signed in, which changes only how a refusal is worded."""
        return (
            self.admin,
            self.owner,
            self.held_out,
            self.level,
            self.release,
            self.intervals,
            self.decimals,
            self.ladder_step,
            self.comparison,
            self.min_subjects,
            self.intervals_withheld,
            self.progress,
        )

    @property
    def exact(self) -> bool:
        """Figures as computed, raw counts (pooled, summed) included."""
        return self.release == Release.EXACT

    def require_subjects(self, evaluation_id: int) -> None:
        if not self.subjects:
            self._refuse(f"per-subject results of evaluation {evaluation_id}")

    def require_recordings(self, evaluation_id: int) -> None:
        if not self.recordings:
            self._refuse(f"per-recording results of evaluation {evaluation_id}")

    def require_run_list(self, evaluation_id: int, *, finished: bool) -> None:
        """The list of an evaluation's runs: per-recording disclosure, and for a coarse view
        of progress only once the evaluation is over (a row's outcome appearing would tell
        when that run finished)."""
        self.require_recordings(evaluation_id)
        if not finished and self.progress == ProgressDetail.COARSE:
            detail = (
                f"per-recording results of evaluation {evaluation_id} are shown when it has "
                "finished: on held-out data, when each recording finished would tell how "
                "long the algorithm ran on it"
            )
            raise Forbidden(detail) if self.signed_in else Unauthorized(detail)

    def withheld(self, what: str) -> str:
        """Why ``what`` is not shown to this viewer (for pages and errors)."""
        if self.release == Release.LADDER:
            return (
                f"{what} are not disclosed: this phase releases scores by the Ladder until it "
                "closes (only each submitter's ladder score is shown)"
            )
        return (
            f"{what} are not disclosed: its held-out dataset discloses "
            f"{self.level.value} figures only"
        )

    def _refuse(self, what: str) -> NoReturn:
        detail = self.withheld(what)
        # Only an admin could see more; an anonymous caller is told to sign in, as elsewhere.
        raise Forbidden(detail) if self.signed_in else Unauthorized(detail)


def decide(viewer: User | None, facts: Facts) -> View:
    """What ``viewer`` may learn of the evaluation these facts describe: the one place
    where that is decided."""
    settings = get_settings()
    admin = policy.is_admin(viewer)
    phase = facts.phase
    if not facts.held_out:
        level, release = Disclosure.RECORDING, Release.EXACT
    else:
        level = (phase.level if phase is not None else None) or facts.dataset_level
        if admin:
            release = Release.EXACT
        elif phase is not None and phase.release == ReleaseRule.LADDER:
            release = Release.LADDER
        elif _RANK[level] >= _RANK[Disclosure.SUBJECT]:
            release = Release.EXACT
        else:
            release = Release.ROUNDED
    minimum = settings.intervals_min_subjects
    intervals = (
        admin
        or release == Release.EXACT
        or (release == Release.ROUNDED and facts.subjects >= minimum)
    )
    if release == Release.EXACT:
        comparison = Comparing.SUBJECTS
    elif release == Release.ROUNDED:
        comparison = Comparing.TEST
    else:
        comparison = Comparing.NONE
    withheld = None
    if release == Release.LADDER:
        withheld = (
            "Intervals and rank stability are withheld: this phase releases scores by the "
            "Ladder until it closes"
        )
    elif not intervals:
        withheld = (
            f"Intervals and rank stability are withheld: they resample the per-subject figures, "
            f"which this held-out dataset does not disclose, and are released from {minimum} "
            f"subjects on (this result has {facts.subjects}; over fewer they would give the "
            "per-subject figures away)"
        )
    return View(
        admin=admin,
        owner=policy.acts_for(viewer, owner_id=facts.owner_id, team_id=facts.team_id),
        held_out=facts.held_out,
        level=level,
        release=release,
        intervals=intervals,
        decimals=settings.released_decimals,
        ladder_step=phase.ladder_step if release == Release.LADDER and phase else None,
        signed_in=viewer is not None,
        comparison=comparison,
        min_subjects=minimum,
        intervals_withheld=withheld,
        progress=ProgressDetail.FULL if admin or not facts.held_out else ProgressDetail.COARSE,
    )


def view_of(viewer: User | None, evaluation: Evaluation) -> View:
    """:func:`decide` on a loaded evaluation."""
    return decide(viewer, facts_of(evaluation))


def run_message(view: View, outcome: RunOutcome | None, detail: str) -> str:
    """The run's message as this viewer may read it."""
    return detail if view.run_details else OUTCOME_TEXT[outcome]


def outcome_summary(view: View, counts: dict[str, int], *, finished: bool) -> dict[str, int]:
    """Finished runs by outcome, or what this viewer may know of them.

    Without per-recording disclosure: nothing while the evaluation runs (which run failed
    when would tell each run's outcome), then only how many runs succeeded and failed.
    A coarse view of progress: nothing while it runs either, as a count that moves tells
    when a run finished.
    """
    if view.recordings and (finished or view.progress == ProgressDetail.FULL):
        return counts
    if not finished:
        return {}
    ok = counts.get(RunOutcome.OK.value, 0)
    summary = {OK_KEY: ok, FAILED_KEY: sum(counts.values()) - ok}
    return {key: n for key, n in summary.items() if n}


# --- progress ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownProgress:
    """An evaluation's progress as one viewer may follow it."""

    detail: ProgressDetail
    done: int
    total: int
    #: ``done / total``; for a coarse view a whole number of steps.
    fraction: float
    #: Every recording has run (as of :attr:`as_of`): the scores are being computed.
    all_run: bool
    #: The moment these figures describe: now for a full view, the clock's last tick for a
    #: coarse one.
    as_of: datetime


def progress_clock(now: datetime | None = None) -> datetime:
    """The last tick of the progress clock (a multiple of ``SZBENCH_PROGRESS_STEP_S`` since
    the Unix epoch) at ``now``: what a coarse view of progress describes."""
    now = _aware(now or datetime.now(UTC))
    step = get_settings().progress_step_s
    return datetime.fromtimestamp(int(now.timestamp()) // step * step, UTC)


def shown_progress(
    view: View, *, done: int, done_at_tick: int, total: int, now: datetime | None = None
) -> ShownProgress:
    """Progress as this viewer may follow it.

    ``done`` is how many recordings have run now, ``done_at_tick`` how many had run at
    :func:`progress_clock`. A coarse view gets the latter, rounded down to a whole step of
    ``1/SZBENCH_PROGRESS_FRACTION_STEPS``: within a step and between two ticks the answer
    does not move, whatever each run took.

    >>> view = View(False, True, True, Disclosure.AGGREGATE, Release.ROUNDED, False, 2,
    ...             progress=ProgressDetail.COARSE)
    >>> moment = datetime(2026, 1, 1, 12, 7, tzinfo=UTC)
    >>> p = shown_progress(view, done=7, done_at_tick=6, total=10, now=moment)
    >>> (p.done, p.fraction, p.as_of.strftime("%H:%M"))
    (5, 0.5, '12:00')
    """
    now = _aware(now or datetime.now(UTC))
    if view.progress == ProgressDetail.FULL or total <= 0:
        fraction = done / total if total > 0 else 0.0
        return ShownProgress(view.progress, done, total, fraction, 0 < total <= done, now)
    steps = get_settings().progress_fraction_steps
    reached = min(max(done_at_tick, 0), total) * steps // total
    fraction = reached / steps
    return ShownProgress(
        ProgressDetail.COARSE,
        done=total * reached // steps,
        total=total,
        fraction=fraction,
        all_run=reached == steps,
        as_of=progress_clock(now),
    )


def shown_moment(view: View, moment: datetime | None) -> datetime | None:
    """A start or finish time as this viewer may read it: a coarse view gets it rounded up
    to the next tick of the progress clock."""
    if moment is None or view.progress == ProgressDetail.FULL:
        return moment
    step = get_settings().progress_step_s
    seconds = math.ceil(_aware(moment).timestamp() / step) * step
    return datetime.fromtimestamp(seconds, UTC)


def timing_bits_per_evaluation(*, recordings: int, run_timeout_s: float) -> float:
    """The most bits a non-admin can learn about held-out data from *when* one evaluation's
    progress moves (its coarse progress, its rounded times, the moment it finishes).

    The container decides how long each run takes, up to ``run_timeout_s``; so the
    evaluation lasts at most ``T = recordings * run_timeout_s``. What the viewer can tell
    apart: at which tick of the progress clock each of the ``steps - 1`` inner steps of the
    coarse fraction was reached (``T / step_s + 1`` choices each) and the moment the
    evaluation finished, which anyone polling its status sees to the second
    (``T + 1`` choices).

    >>> round(timing_bits_per_evaluation(recordings=100, run_timeout_s=900), 1)
    36.4
    """
    settings = get_settings()
    longest = max(recordings, 1) * max(run_timeout_s, 1.0)
    ticks = math.log2(math.ceil(longest / settings.progress_step_s) + 1)
    return (settings.progress_fraction_steps - 1) * ticks + math.log2(math.ceil(longest) + 1)


# --- released figures ------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def round_ratio(value: float | None, decimals: int) -> float | None:
    """A ratio metric (0 to 1) rounded to ``decimals``.

    >>> round_ratio(0.31415, 2)
    0.31
    """
    value = _finite(value)
    return None if value is None else round(value, decimals)


def round_fp_rate(value: float | None) -> float | None:
    """FP/day on the released grid: 0.1 below 10, 1 below 100, 10 below 1000, then
    capped at 1000 (meaning "1000 or more"): :data:`FP_RATE_GRID_SIZE` values.

    >>> [round_fp_rate(x) for x in (3.14159, 42.4, 123.0, 98765.0)]
    [3.1, 42.0, 120.0, 1000.0]
    """
    value = _finite(value)
    if value is None:
        return None
    value = max(0.0, value)
    for limit, step in ((10.0, 0.1), (100.0, 1.0), (FP_RATE_CAP, 10.0)):
        rounded = round(round(value / step) * step, 1)
        if rounded < limit:
            return rounded
    return FP_RATE_CAP


def _round(metric: str, value: float | None, decimals: int) -> float | None:
    if metric.endswith("fp_rate"):
        return round_fp_rate(value)
    return round_ratio(value, decimals)


def released_value(view: View, metric: str, value: float | None) -> float | None:
    """One dataset-level figure as this viewer gets it (the Ladder's score is apart:
    :func:`released_metrics`)."""
    if view.release == Release.EXACT:
        return _finite(value)
    if view.release == Release.ROUNDED and metric in ROUNDED_METRICS:
        return _round(metric, value, view.decimals)
    return None


def released_metrics(
    view: View, metrics: Mapping[str, float | None], *, ladder_score: float | None = None
) -> dict[str, float | None]:
    """Every dataset-level figure as this viewer gets it; under the Ladder only the ranking
    metric, as the ladder released it (``ladder_score``)."""
    out = {m: released_value(view, m, v) for m, v in metrics.items()}
    if view.release == Release.LADDER and LADDER_METRIC in out:
        out[LADDER_METRIC] = ladder_score
    return out


def released_interval(
    view: View, metric: str, low: float | None, high: float | None
) -> tuple[float | None, float | None] | None:
    """A confidence interval as this viewer gets it; None where intervals are withheld."""
    if not view.intervals:
        return None
    if view.release == Release.EXACT:
        return _finite(low), _finite(high)
    return _round(metric, low, view.decimals), _round(metric, high, view.decimals)


def released_rank(view: View, value: float | None) -> float | None:
    """A median or percentile of the per-subject ranks as this viewer gets it."""
    value = _finite(value)
    if value is None or view.release == Release.EXACT:
        return value
    return round(value / RANK_STEP) * RANK_STEP


#: Report entries every viewer may read: the scorer's parameters and the dataset's sizes.
_REPORT_KEPT = ("params", "scorer_version", "subjects", "recordings", "missing_hypotheses")


def released_report(view: View, report: Mapping[str, Any]) -> dict[str, Any]:
    """The stored scorer report as this viewer gets it.

    Exact: whole (per-subject means and ``*_std``, pooled ratios and the pooled counts) where
    intervals are disclosed; without them, no ``*_std`` (over two subjects mean and std are
    the two figures). Rounded: the released figures and, where intervals are disclosed,
    their ``*_std``, rounded; never a raw count. Ladder: the parameters only.
    """
    kept = {k: report[k] for k in _REPORT_KEPT if k in report}
    if view.release == Release.LADDER:
        return kept
    if view.release == Release.EXACT:
        out = dict(report)
        if not view.intervals:
            for block in ("event_results", "sample_results"):
                if isinstance(out.get(block), dict):
                    out[block] = {k: v for k, v in out[block].items() if not k.endswith("_std")}
        return out
    for block, prefix in (("event_results", "event_"), ("sample_results", "sample_")):
        source = report.get(block)
        if not isinstance(source, dict):
            continue
        released: dict[str, float | None] = {}
        for name, value in source.items():
            base = name.removesuffix("_std")
            metric = prefix + ("fp_rate" if base == "fpRate" else base)
            if metric not in ROUNDED_METRICS or (name.endswith("_std") and not view.intervals):
                continue
            number = value if isinstance(value, int | float) else None
            released[name] = _round(metric, number, view.decimals)
        kept[block] = released
    return kept


def released_histogram(view: View, histogram: list[int]) -> list[int]:
    """Subjects at each rank: the per-subject ranks themselves, so exact views only."""
    return list(histogram) if view.release == Release.EXACT else []


# --- comparisons -----------------------------------------------------------------------------


def comparing(views: Iterable[View]) -> Comparing:
    """What a comparison of evaluations with these views may show: the least any allows."""
    return min((v.comparison for v in views), key=_COMPARING_ORDER.index, default=Comparing.NONE)


def require_comparison(views: Mapping[int, View]) -> Comparing:
    """:func:`comparing` for views by evaluation id; refuses where nothing may be shown."""
    for evaluation_id, view in views.items():
        if view.comparison == Comparing.NONE:
            view._refuse(f"comparisons of evaluation {evaluation_id}")
    return comparing(views.values())


def comparison_withheld(views: Mapping[int, View]) -> str | None:
    """Why a comparison shows no per-subject values (None where it shows them), and what it
    shows instead; for the comparison page and the API."""
    for evaluation_id, view in views.items():
        if view.comparison == Comparing.NONE:
            return view.withheld(f"Comparisons of evaluation {evaluation_id}") + "."
    for evaluation_id, view in views.items():
        if view.comparison != Comparing.SUBJECTS:
            what = view.withheld(f"Per-subject results of evaluation {evaluation_id}")
            return (
                f"{what}, so no per-subject values are shown: each pair gets the paired test "
                f"alone on {', '.join(COMPARED_METRICS)} (mean difference, interval, p) where "
                f"at least {view.min_subjects} subjects have a value under both and the two "
                f"differ on at least as many, rounded to {view.decimals} decimals (p rounded up)."
            )
    return None


@dataclass(frozen=True)
class ReleasedTest:
    """A paired test as a viewer gets it; ``withheld`` says why its figures are null."""

    mean_difference: float | None
    low: float | None
    high: float | None
    p_value: float | None
    withheld: str | None = None


def _round_signed(metric: str, value: float | None, decimals: int) -> float | None:
    value = _finite(value)
    if value is None:
        return None
    rounded = _round(metric, abs(value), decimals)
    return None if rounded is None else math.copysign(rounded, value) + 0.0


def round_p_up(value: float | None, decimals: int) -> float | None:
    """A p-value rounded *up* to ``decimals`` (a released 0.01 means p <= 0.01), so that
    rounding never makes a difference look more significant than it is.

    >>> round_p_up(0.0039, 2), round_p_up(0.125, 2), round_p_up(0.25, 2)
    (0.01, 0.13, 0.25)
    """
    value = _finite(value)
    if value is None:
        return None
    scale = float(10**decimals)
    return min(1.0, math.ceil(value * scale - 1e-9) / scale)


def released_test(
    views: Sequence[View],
    metric: str,
    *,
    mean_difference: float | None,
    low: float | None,
    high: float | None,
    p_value: float | None,
    pairs: int,
    differing: int,
    smallest_p: float | None,
) -> ReleasedTest:
    """The paired test of two evaluations (``views``: theirs) as the viewer gets it.

    Per-subject disclosure (both): as computed. Aggregate (either): from ``min_subjects``
    ``pairs`` (subjects with a value under both) on, when the two differ on at least as
    many subjects (``differing``; else comparing an entry with one that differs on one
    subject would give that subject's difference away as ``n`` times the mean), the mean
    difference and its interval on the released grid and p rounded up; otherwise nulls
    and why, with the smallest p-value ``pairs`` subjects can give (``smallest_p``).
    """
    mode = comparing(views)
    if mode == Comparing.SUBJECTS:
        return ReleasedTest(_finite(mean_difference), _finite(low), _finite(high), _finite(p_value))
    minimum = max(v.min_subjects for v in views)
    decimals = min(v.decimals for v in views)
    if mode == Comparing.NONE:
        reason = "Comparisons are not disclosed for these entries."
    elif metric not in COMPARED_METRICS:
        reason = (
            f"No test: at the aggregate level pairs are compared on "
            f"{', '.join(COMPARED_METRICS)} only (each metric compared is another channel "
            "out of the held-out data)."
        )
    elif pairs < minimum:
        floor = (
            ""
            if smallest_p is None
            else (
                f" With {pairs} subjects the smallest p-value this test can give is "
                f"{smallest_p:.3g}."
            )
        )
        reason = (
            f"No test: {pairs} subjects have a value under both entries, and a paired test "
            f"is released from {minimum} on (over fewer it would give per-subject figures "
            f"away).{floor}"
        )
    elif differing < minimum:
        reason = (
            f"No test: the two entries differ on fewer than {minimum} subjects, and over so "
            "few the test would give those subjects' figures away."
        )
    else:
        return ReleasedTest(
            _round_signed(metric, mean_difference, decimals),
            _round_signed(metric, low, decimals),
            _round_signed(metric, high, decimals),
            round_p_up(p_value, decimals),
        )
    return ReleasedTest(None, None, None, None, withheld=reason)


# --- what it costs ---------------------------------------------------------------------------


def bits_per_evaluation(
    *, recordings: int, subjects: int, entries: int = 1, decimals: int | None = None
) -> float:
    """The most bits one evaluation at the aggregate level (released rounded) can tell a
    non-admin about the held-out data: log2 of the number of distinct answers it can get.

    The released figures (:data:`ROUNDED_METRICS`: four ratios on a grid of
    ``10**decimals + 1`` values or null, FP/day on :data:`FP_RATE_GRID_SIZE` values or null),
    the count of failed recordings (0 to ``recordings``; the missing-output count and the
    ok/failed summary are the same count) and the status (done or failed). From
    ``SZBENCH_INTERVALS_MIN_SUBJECTS`` subjects on, also the intervals of the four event
    metrics, the ``*_std`` of the released figures and the rank stability (median, low and
    high on half ranks of a board of ``entries``, and the share of subjects ranked first).

    >>> round(bits_per_evaluation(recordings=6, subjects=3, decimals=2), 1)
    38.6
    """
    settings = get_settings()
    decimals = settings.released_decimals if decimals is None else decimals
    ratio = math.log2(10**decimals + 2)
    fp = math.log2(FP_RATE_GRID_SIZE + 1)
    figures = 4 * ratio + fp
    bits = figures + math.log2(recordings + 1) + 1
    if subjects >= settings.intervals_min_subjects:
        bits += 2 * (3 * ratio + fp)  # intervals of the four event metrics
        bits += figures  # the *_std of the released figures
        bits += 3 * math.log2(2 * max(entries, 1)) + ratio  # rank stability
    return bits


def bits_per_comparison(*, subjects: int, decimals: int | None = None) -> float:
    """The most bits one paired test at the aggregate level (a pair of evaluations, on the
    one metric compared there, :data:`COMPARED_METRICS`) can tell a non-admin: the mean
    difference and both ends of its interval on the signed grid (``2 * 10**decimals + 1``
    values from -1 to 1) or null, p on ``10**decimals + 1`` values or null, and the number of
    subjects with a value under both (0 to ``subjects``). A withheld test is one of the
    answers counted (all null).

    >>> round(bits_per_comparison(subjects=10, decimals=2), 1)
    33.1
    """
    decimals = get_settings().released_decimals if decimals is None else decimals
    grid = 2 * 10**decimals + 1
    return 3 * math.log2(grid + 1) + math.log2(10**decimals + 2) + math.log2(subjects + 1)


def ladder_bits_per_evaluation(*, recordings: int, step: float) -> float:
    """The most bits one evaluation under the Ladder tells its submitter: their released
    score (unchanged, or a new value on the step's grid), the failed count and the status.
    Over a whole phase the released score can rise at most ``1/step`` times."""
    return math.log2(math.ceil(1 / step) + 2) + math.log2(recordings + 1) + 1
