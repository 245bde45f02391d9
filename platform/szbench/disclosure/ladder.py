"""The Ladder (Blum & Hardt, "The Ladder: A Reliable Leaderboard for Machine Learning
Competitions", ICML 2015): released scores that adaptive resubmission cannot climb.

A submission's score is released only when it beats the best score released so far by more
than the step, and then rounded to the step; otherwise nothing new is released. Whether a
submission looked better than the last thus tells the submitter almost nothing, so selecting
the submissions that "did well" and combining them (the boosting attack) no longer overfits
the held-out set, while real improvements of a step or more still show.

Who shares a bar, and what each entry shows, on one dataset version (the Ladder applies to
the data a Ladder phase names, whatever phase each version was submitted to):

- **the bar** is the best score released to the algorithm's owner on that data, and to its
  team where a team submitted the version (:attr:`Submission.gates`): a renamed copy, a new
  algorithm of the same owner or a second account's version of a team's algorithm meets the
  same bar, so none of them restarts the Ladder;
- **the figure** of an evaluation is the score it earned itself (:func:`earned`): a
  submission that does not clear the bar shows none, never the figure another of its
  submitter's algorithms or versions earned. An algorithm's figure is the best its own
  evaluations earned (:func:`szbench.leaderboards.service` shows the version that earned it).

The sequence is the finished, official evaluations (default scoring, not smoke tests) on the
dataset version, in the order they finished: a new evaluation only appends, so what was
released for an evaluation never changes while the phases and teams stay as they are.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.disclosure.decision import Release, View
from szbench.disclosure.facts import join_own_phase, phase_closed
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetResult,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
)


def round_to_step(score: float, step: float) -> float:
    """``score`` to the nearest multiple of ``step``.

    >>> round_to_step(0.4361, 0.01)
    0.44
    """
    return round(round(score / step) * step, 10)


def _clears(score: float | None, bar: float | None, step: float) -> bool:
    return score is not None and math.isfinite(score) and (bar is None or score > bar + step)


def ladder(scores: Iterable[float | None], step: float) -> list[float | None]:
    """The best released score after each submission of one submitter (higher is better;
    None or NaN: no score).

    >>> ladder([0.30, 0.305, 0.32, 0.31, 0.50], 0.01)
    [0.3, 0.3, 0.32, 0.32, 0.5]
    """
    best: float | None = None
    released: list[float | None] = []
    for score in scores:
        if _clears(score, best, step):
            assert score is not None
            best = round_to_step(score, step)
        released.append(best)
    return released


@dataclass(frozen=True)
class Submission:
    """One evaluation in a dataset version's Ladder sequence."""

    evaluation_id: int
    algorithm_id: int
    #: Who shares the bar: ``("user", owner id)``, and ``("team", team id)`` where a team
    #: submitted the version.
    gates: tuple[Hashable, ...]
    score: float | None


def earned(submissions: Iterable[Submission], step: float) -> dict[int, float | None]:
    """The score each submission earned itself, in finishing order: its score rounded to
    ``step`` where it beats the best released to any of its gates by more than ``step``,
    else None.

    >>> a = [Submission(1, 10, ("alice",), 0.56), Submission(2, 11, ("alice",), 0.0),
    ...      Submission(3, 11, ("alice",), 0.565), Submission(4, 11, ("alice",), 0.61)]
    >>> earned(a, 0.01)
    {1: 0.56, 2: None, 3: None, 4: 0.61}
    """
    best: dict[Hashable, float] = {}
    out: dict[int, float | None] = {}
    for submission in submissions:
        bar = max((best[g] for g in submission.gates if g in best), default=None)
        if _clears(submission.score, bar, step):
            assert submission.score is not None
            value = round_to_step(submission.score, step)
            for gate in submission.gates:
                best[gate] = max(best.get(gate, value), value)
            out[submission.evaluation_id] = value
        else:
            out[submission.evaluation_id] = None
    return out


def _sequence(session: Session, dataset_version_id: int) -> list[Submission]:
    """The dataset version's Ladder sequence: its finished official evaluations, but those
    whose own phase names the data and is over (published by that phase's rules)."""
    query = (
        select(
            Evaluation.id,
            Algorithm.id,
            Algorithm.owner_id,
            AlgorithmVersion.team_id,
            DatasetResult.event_f1,
            Phase.id,
            Phase.is_open,
            Phase.closes_at,
        )
        .join(DatasetResult, DatasetResult.evaluation_id == Evaluation.id)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .where(
            Evaluation.dataset_version_id == dataset_version_id,
            Evaluation.status == EvaluationStatus.DONE,
            Evaluation.official.is_(True),
            Evaluation.kind != EvaluationKind.SMOKE_TEST,
        )
        .order_by(Evaluation.finished_at, Evaluation.id)
    )
    sequence = []
    for (
        eid,
        algorithm_id,
        owner_id,
        team_id,
        score,
        phase_id,
        is_open,
        closes_at,
    ) in session.execute(join_own_phase(query)).all():
        if phase_id is not None and phase_closed(is_open, closes_at):
            continue
        gates: tuple[Hashable, ...] = (("user", owner_id),)
        if team_id is not None:
            gates += (("team", team_id),)
        sequence.append(Submission(eid, algorithm_id, gates, score))
    return sequence


def ladder_scores(
    session: Session, evaluations: Iterable[tuple[int, View]]
) -> dict[int, float | None]:
    """The score each evaluation whose view is the Ladder's earned (others are left out):
    one query per dataset version the evaluations are on."""
    wanted = {eid: view for eid, view in evaluations if view.release == Release.LADDER}
    if not wanted:
        return {}
    on = dict(
        session.execute(
            select(Evaluation.id, Evaluation.dataset_version_id).where(
                Evaluation.id.in_(list(wanted))
            )
        ).all()
    )
    released: dict[int, float | None] = {}
    for dv_id in sorted(set(on.values())):
        ids = [eid for eid, dv in on.items() if dv == dv_id]
        step = max(wanted[eid].ladder_step or 0.0 for eid in ids)
        scores = earned(_sequence(session, dv_id), step)
        for eid in ids:
            released[eid] = scores.get(eid)
    return released
