"""What each released answer can carry, in bits: the bounds docs/security.md states.

A submitter chooses their detections (and their run times) from the hidden data, so each
released figure is a channel; its capacity is log2 of the number of distinct answers it can
take.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from szbench.config import get_settings
from szbench.disclosure import decision, progress
from szbench.disclosure.decision import Release, View
from szbench.disclosure.release import FP_RATE_GRID_SIZE


def timing_bits_per_evaluation(*, recordings: int, run_timeout_s: float) -> float:
    """The most bits a non-admin can learn about held-out data from *when* one evaluation's
    progress moves (its coarse progress, its rounded times, the moment it finishes).

    The container decides how long each run takes, up to ``run_timeout_s``; so the
    evaluation lasts at most ``T = recordings * run_timeout_s``. A coarse view shows it as it
    stood at the last tick of the progress clock (:mod:`szbench.disclosure.progress`), so
    what the viewer can tell apart is at which tick each of the ``steps`` steps of the
    coarse fraction was first shown, the last one included (``T / step_s + 1`` choices
    each; the switch to scoring is that last step), and the moment the evaluation finished,
    which anyone polling its status sees to the second (``T + 1`` choices). When it started
    is shown at a tick too, and is a function of when what ran before it finished, which
    each of those evaluations' own bound counts.

    >>> round(timing_bits_per_evaluation(recordings=100, run_timeout_s=900), 1)
    43.1
    """
    longest = max(recordings, 1) * max(run_timeout_s, 1.0)
    ticks = math.log2(math.ceil(longest / progress.PROGRESS_STEP_S) + 1)
    return progress.PROGRESS_FRACTION_STEPS * ticks + math.log2(math.ceil(longest) + 1)


def bits_per_evaluation(
    *, recordings: int, subjects: int, entries: int = 1, decimals: int | None = None
) -> float:
    """The most bits one evaluation at the aggregate level (released rounded) can tell a
    non-admin about the held-out data: log2 of the number of distinct answers it can get.

    The released figures (:data:`ROUNDED_METRICS`: four ratios on a grid of
    ``10**decimals + 1`` values or null, FP/day on :data:`FP_RATE_GRID_SIZE` values or null),
    the count of failed recordings (0 to ``recordings``; the missing-output count and the
    ok/failed summary are the same count) and the status (done or failed). From
    :data:`~szbench.disclosure.decision.INTERVALS_MIN_SUBJECTS` subjects on, also the
    intervals of the four event metrics, the ``*_std`` of the released figures and the rank
    stability (median, low and high on half ranks of a board of ``entries``, and the share of
    subjects ranked first).

    >>> round(bits_per_evaluation(recordings=6, subjects=3, decimals=2), 1)
    38.6
    """
    decimals = decision.RELEASED_DECIMALS if decimals is None else decimals
    ratio = math.log2(10**decimals + 2)
    fp = math.log2(FP_RATE_GRID_SIZE + 1)
    figures = 4 * ratio + fp
    bits = figures + math.log2(recordings + 1) + 1
    if subjects >= decision.INTERVALS_MIN_SUBJECTS:
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
    decimals = decision.RELEASED_DECIMALS if decimals is None else decimals
    grid = 2 * 10**decimals + 1
    return 3 * math.log2(grid + 1) + math.log2(10**decimals + 2) + math.log2(subjects + 1)


def ladder_bits_per_evaluation(*, recordings: int, step: float) -> float:
    """The most bits one evaluation under the Ladder tells its submitter: their released
    score (unchanged, or a new value on the step's grid), the failed count and the status.
    Over a whole phase the released score can rise at most ``1/step`` times."""
    return math.log2(math.ceil(1 / step) + 2) + math.log2(recordings + 1) + 1


@dataclass(frozen=True)
class Bound:
    """What one evaluation on a dataset version can tell a non-admin about the held-out data,
    in bits, by the rule that applies there now (None: no bound of this kind applies)."""

    #: From its released figures, failed count and status; None where figures are exact
    #: (public samples, data disclosed per subject or more).
    figures: float | None
    #: From when its progress moves (the progress clock, the moment it finishes).
    timing: float | None
    #: From one paired test with another entry, at the aggregate level.
    comparison: float | None


def bound(
    view: View, *, recordings: int, subjects: int, entries: int, run_timeout_s: float
) -> Bound:
    """The bound for an evaluation seen through ``view`` on data of ``recordings`` recordings
    over ``subjects`` subjects, on a board of ``entries`` entries: what the platform states
    (the leaderboard's ``release``) and enforces by the rules above.

    >>> from szbench.disclosure.decision import Release
    >>> from szbench.models import Disclosure
    >>> view = View(False, False, True, Disclosure.AGGREGATE, Release.LADDER, False, 2,
    ...             ladder_step=0.01)
    >>> b = bound(view, recordings=4360, subjects=65, entries=28, run_timeout_s=900)
    >>> (round(b.figures, 1), b.comparison)
    (19.8, None)
    """
    if not view.held_out:
        return Bound(None, None, None)
    timing = timing_bits_per_evaluation(recordings=recordings, run_timeout_s=run_timeout_s)
    if view.release == Release.LADDER:
        step = view.ladder_step or get_settings().ladder_step
        return Bound(ladder_bits_per_evaluation(recordings=recordings, step=step), timing, None)
    if view.release == Release.ROUNDED:
        figures = bits_per_evaluation(
            recordings=recordings, subjects=subjects, entries=entries, decimals=view.decimals
        )
        comparison = (
            bits_per_comparison(subjects=subjects, decimals=view.decimals)
            if subjects >= view.min_subjects
            else None
        )
        return Bound(figures, timing, comparison)
    return Bound(None, timing, None)
