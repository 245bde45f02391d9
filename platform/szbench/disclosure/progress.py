"""How a viewer follows a running evaluation: the progress clock, coarse steps, rounded
times, and the outcomes of finished runs.

A container chooses how long it runs on each held-out recording, so a non-admin follows a
held-out evaluation coarsely (:attr:`~szbench.disclosure.decision.View.progress`): everything
about a running evaluation is shown as it stood at the last tick of a fixed clock (whether it
has started, and when, rounded up to the clock; the share of recordings run, in steps), so
that nothing such a viewer can read moves between two ticks, whatever each run took. Only the
end moves at once: an evaluation that has finished is shown finished.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from szbench.disclosure.decision import FAILED_KEY, OK_KEY, ProgressDetail, View
from szbench.models import RunOutcome, as_utc

# The coarse view's clock and steps are the numbers the timing bound of docs/security.md
# ("Timing: how long the runs took") is computed from (szbench.disclosure.bits): each of the
# steps can first show at one of T/step + 1 ticks. Constants, not settings, so that the bound
# the docs state is the one that holds. 15 min is the challenge's time limit per recording:
# one tick per run's worth of time; quarters still tell an owner that their run is moving.
PROGRESS_STEP_S = 900
PROGRESS_FRACTION_STEPS = 4


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
    #: Recordings run (as of :attr:`as_of`); for a coarse view the least the shown step
    #: allows.
    done: int
    total: int
    #: ``done / total``; for a coarse view a whole number of steps.
    fraction: float
    #: Every recording has run (as of :attr:`as_of`): the scores are being computed.
    all_run: bool
    #: The moment these figures describe: now for a full view, the clock's last tick for a
    #: coarse one.
    as_of: datetime
    #: The most recordings that may have run by :attr:`as_of` (``done`` for a full view).
    done_at_most: int = 0
    #: Whether the viewer sees it started (a coarse view: by :attr:`as_of`), and when: as
    #: stored for a full view, rounded up to the clock (the tick by which it had started) for
    #: a coarse one.
    started: bool = False
    started_at: datetime | None = None
    #: When a coarse answer about a running evaluation moves next (the next tick).
    next_update: datetime | None = None


def now() -> datetime:
    """The moment progress is shown at: the one clock every coarse answer reads (a test
    may set it)."""
    return datetime.now(UTC)


def progress_clock(moment: datetime | None = None) -> datetime:
    """The last tick of the progress clock (a multiple of :data:`PROGRESS_STEP_S` since
    the Unix epoch) at ``moment`` (default: :func:`now`): what a coarse view describes."""
    moment = as_utc(moment or now())
    step = PROGRESS_STEP_S
    return datetime.fromtimestamp(int(moment.timestamp()) // step * step, UTC)


def round_up_to_clock(moment: datetime) -> datetime:
    """``moment`` rounded up to the progress clock (a tick stays itself)."""
    step = PROGRESS_STEP_S
    seconds = math.ceil(as_utc(moment).timestamp() / step) * step
    return datetime.fromtimestamp(seconds, UTC)


def shown_progress(
    view: View,
    *,
    done: int,
    done_at_tick: int,
    total: int,
    started_at: datetime | None = None,
    running: bool = False,
    finished: bool = False,
    moment: datetime | None = None,
) -> ShownProgress:
    """Progress as this viewer may follow it.

    ``done`` is how many recordings have run now, ``done_at_tick`` how many had run at
    :func:`progress_clock`; ``running``: the worker has taken it up (its status). A coarse
    view gets the count at the tick, rounded down to a whole step of
    ``1/SZBENCH_PROGRESS_FRACTION_STEPS``, and sees the evaluation started only from the
    first tick after its start: within a step and between two ticks the answer does not
    move, whatever each run took. Once the evaluation has finished, its figures are final.

    >>> from szbench.disclosure.decision import Release
    >>> from szbench.models import Disclosure
    >>> view = View(False, True, True, Disclosure.AGGREGATE, Release.ROUNDED, False, 2,
    ...             progress=ProgressDetail.COARSE)
    >>> at = datetime(2026, 1, 1, 12, 7, tzinfo=UTC)
    >>> began = datetime(2026, 1, 1, 11, 50, tzinfo=UTC)
    >>> p = shown_progress(view, done=7, done_at_tick=6, total=10, started_at=began, moment=at)
    >>> (p.done, p.done_at_most, p.fraction, p.as_of.strftime("%H:%M"))
    (5, 7, 0.5, '12:00')
    >>> (p.started_at.strftime("%H:%M"), p.next_update.strftime("%H:%M"))
    ('12:00', '12:15')
    """
    moment = as_utc(moment or now())
    if view.progress == ProgressDetail.FULL or total <= 0:
        fraction = done / total if total > 0 else 0.0
        return ShownProgress(
            view.progress,
            done,
            total,
            fraction,
            0 < total <= done,
            moment,
            done_at_most=done,
            started=started_at is not None or running or finished,
            started_at=shown_moment(view, started_at),
        )
    steps = PROGRESS_FRACTION_STEPS
    tick = progress_clock(moment)
    if finished:
        done_at_tick = done
    began = None if started_at is None else round_up_to_clock(started_at)
    # Finished, it has run; running with no start stored (rows older than the column), it
    # started long ago.
    started = finished or (began <= tick if began is not None else running)
    reached = min(max(done_at_tick, 0), total) * steps // total if started else 0
    least = -(-total * reached // steps)
    if not started:
        most = 0  # nothing had run by the tick
    elif reached == steps:
        most = total
    else:
        most = -(-total * (reached + 1) // steps) - 1
    return ShownProgress(
        ProgressDetail.COARSE,
        done=least,
        total=total,
        fraction=reached / steps,
        all_run=reached == steps,
        as_of=tick,
        done_at_most=most,
        started=started,
        started_at=began if started else None,
        next_update=None if finished else tick + timedelta(seconds=PROGRESS_STEP_S),
    )


def shown_moment(view: View, moment: datetime | None) -> datetime | None:
    """A start, finish or event time as this viewer may read it: a coarse view gets it
    rounded up to the next tick of the progress clock (the tick by which it happened)."""
    if moment is None or view.progress == ProgressDetail.FULL:
        return moment
    return round_up_to_clock(moment)
