"""The one decision point: what a viewer may learn about a (dataset version, evaluation)
pair.

:func:`decide` takes plain facts about one evaluation on one dataset version
(:class:`~szbench.disclosure.facts.Facts`: the dataset's kind and disclosure level, the rules
of the phase that governs it, how many subjects its result spans, who owns it) and the
viewer, and returns a :class:`View`. Every route, page, download, comparison, chart and cache
asks the view, and applies its answer with :mod:`~szbench.disclosure.release`,
:mod:`~szbench.disclosure.ladder` and :mod:`~szbench.disclosure.progress`; nothing else
decides these rules.

The view answers:

- **per-subject figures** (:attr:`View.subjects`), **per-recording outcomes, counts and
  reference timelines** (:attr:`View.recordings`): by the disclosure level, the governing
  phase's override, else the dataset's (public samples: everything);
- **run details** (messages, exit codes, logs) and **run resources** (wall time, memory,
  timestamps): a container chooses all of them from the bytes it reads, so on held-out data
  they are for admins; a non-admin gets a fixed text per outcome (:data:`OUTCOME_TEXT`);
- **how scores are released** (:attr:`View.release`): ``exact`` (admins, public samples,
  and held-out data disclosed per subject or more), ``rounded`` (held-out data at the
  aggregate level: the leaderboard's figures only, at
  :func:`~szbench.disclosure.release.released_value`'s precision, no raw counts) or
  ``ladder`` (an open phase that releases by the Ladder: only the submitter's ladder score,
  :mod:`szbench.disclosure.ladder`);
- **how progress is shown** (:attr:`View.progress`): a container chooses how long it runs
  on each recording, so on held-out data a non-admin sees progress ``coarse``
  (:func:`szbench.disclosure.progress.shown_progress`) and everyone else ``full``;
- **intervals, rank stability and ``*_std``** (:attr:`View.intervals`): they resample or
  summarise the per-subject figures, and over a few subjects give them away (with two
  subjects, mean ± std are the two figures): where per-subject figures are not disclosed,
  only from ``SZBENCH_INTERVALS_MIN_SUBJECTS`` subjects on, and never under the Ladder;
  where they are withheld, :attr:`View.intervals_withheld` says why;
- **comparisons** (:attr:`View.comparison`): per-subject values side by side and the paired
  test as computed where per-subject figures are disclosed; at the aggregate level the
  paired test alone, rounded (:func:`szbench.disclosure.release.released_test`); nothing
  under the Ladder.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NoReturn

from szbench.auth import policy
from szbench.disclosure.facts import Facts, PhaseRules, facts_of
from szbench.errors import Forbidden, Unauthorized
from szbench.models import (
    Disclosure,
    Evaluation,
    ReleaseRule,
    RunOutcome,
    User,
)

# Where a held-out dataset discloses aggregate figures only, a non-admin gets the ratios
# rounded to this many decimals (FP/day on a fixed grid): each released figure then carries
# log2(10**decimals + 2) bits at most, the number the bound of docs/security.md ("What a
# submitter can learn, decided in one place, and its bound") is computed from
# (szbench.disclosure.bits). Two decimals keep rankings readable (F1 0.31 vs 0.32) and the
# bound small; a constant, so that the bound the docs state is the one that holds.
RELEASED_DECIMALS = 2
# Intervals, *_std and rank stability resample the per-subject figures: over few subjects they
# give those figures away, so where per-subject figures are not disclosed they are released
# from this many subjects on (below, each subject weighs more than a tenth of the mean).
INTERVALS_MIN_SUBJECTS = 10

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
    #: The open phase naming the data whose Ladder this view follows (None: no Ladder).
    ladder_phase: str | None = None

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
    def worker_hosts(self) -> bool:
        """Names of the hosts that ran it: the platform's own infrastructure, for admins."""
        return self.admin

    @property
    def recording_checksums(self) -> bool:
        """Checksums of held-out recordings: the key of the worker fetch route, and a way to
        confirm a guessed file, so for admins (a public sample's are published anyway)."""
        return self.admin or not self.held_out

    def run_hardware(self, *, finished: bool) -> bool:
        """GPU models and drivers of an evaluation's runs: they appear as its runs are
        stored, so a coarse view of progress gets them once the evaluation is over."""
        return self.progress == ProgressDetail.FULL or finished

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
            self.ladder_phase,
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
                f"{what} are not disclosed: phase {self.ladder_phase} releases scores on this "
                "data by the Ladder until it closes (only the score each algorithm earned is "
                "shown)"
            )
        return (
            f"{what} are not disclosed: its held-out dataset discloses "
            f"{self.level.value} figures only"
        )

    def _refuse(self, what: str) -> NoReturn:
        detail = self.withheld(what)
        # Only an admin could see more; an anonymous caller is told to sign in, as elsewhere.
        raise Forbidden(detail) if self.signed_in else Unauthorized(detail)


def governing_phases(facts: Facts) -> tuple[PhaseRules, ...]:
    """The phases whose rules apply to the evaluation these facts describe: its own phase
    alone once that phase is over (its entries are published by its rules), else every
    phase naming the data that still accepts submissions (the data is still being competed
    on, whatever phase the evaluated version is in)."""
    own = facts.phase
    if own is not None and own.closed:
        return (own,)
    return tuple(p for p in facts.data_phases if not p.closed)


def decide(viewer: User | None, facts: Facts) -> View:
    """What ``viewer`` may learn of the evaluation these facts describe: the one place
    where that is decided.

    On held-out data the level is the lowest of the governing phases' levels (each phase's
    own, else the dataset's), or the dataset's where no phase governs; the release is the
    Ladder's where any governing phase releases by the Ladder (with the coarsest step of
    those), else exact from the ``subject`` level on and rounded below it.
    """
    admin = policy.is_admin(viewer)
    ladders: list[PhaseRules] = []
    if not facts.held_out:
        level, release = Disclosure.RECORDING, Release.EXACT
    else:
        governing = governing_phases(facts)
        level = min(
            (p.level or facts.dataset_level for p in governing),
            key=_RANK.__getitem__,
            default=facts.dataset_level,
        )
        ladders = [p for p in governing if p.release == ReleaseRule.LADDER]
        if admin:
            release = Release.EXACT
        elif ladders:
            release = Release.LADDER
        elif _RANK[level] >= _RANK[Disclosure.SUBJECT]:
            release = Release.EXACT
        else:
            release = Release.ROUNDED
    ladder = max(ladders, key=lambda p: p.ladder_step) if release == Release.LADDER else None
    minimum = INTERVALS_MIN_SUBJECTS
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
    if ladder is not None:
        withheld = (
            f"Intervals and rank stability are withheld: phase {ladder.slug} releases scores "
            "on this data by the Ladder until it closes"
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
        decimals=RELEASED_DECIMALS,
        ladder_step=ladder.ladder_step if ladder is not None else None,
        signed_in=viewer is not None,
        comparison=comparison,
        min_subjects=minimum,
        intervals_withheld=withheld,
        progress=ProgressDetail.FULL if admin or not facts.held_out else ProgressDetail.COARSE,
        ladder_phase=ladder.slug if ladder is not None else None,
    )


def view_of(viewer: User | None, evaluation: Evaluation) -> View:
    """:func:`decide` on a loaded evaluation."""
    return decide(viewer, facts_of(evaluation))


def run_message(view: View, outcome: RunOutcome | None, detail: str) -> str:
    """The run's message as this viewer may read it."""
    return detail if view.run_details else OUTCOME_TEXT[outcome]
