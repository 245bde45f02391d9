"""How a viewer follows a running evaluation: the progress clock, coarse steps, rounded
times, and the outcomes of finished runs.

A container chooses how long it runs on each held-out recording, so a non-admin follows a
held-out evaluation coarsely (:attr:`~szbench.disclosure.decision.View.progress`): a fraction
in steps, as it stood at the last tick of a fixed clock, times rounded to that clock, no
per-recording time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from szbench.config import get_settings
from szbench.disclosure.decision import FAILED_KEY, OK_KEY, ProgressDetail, View
from szbench.disclosure.facts import _aware
from szbench.models import RunOutcome


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

    >>> from szbench.disclosure.decision import Release
    >>> from szbench.models import Disclosure
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
