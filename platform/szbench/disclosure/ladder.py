"""The Ladder (Blum & Hardt, "The Ladder: A Reliable Leaderboard for Machine Learning
Competitions", ICML 2015): released scores that adaptive resubmission cannot climb.

Each submitter has a best released score per (phase, dataset version). A new submission's
score is released only when it beats that best by at least the phase's step, and then
rounded to the step; otherwise the submitter reads their best again. Whether a submission
looked better than the last thus tells the submitter almost nothing, so selecting the
submissions that "did well" and combining them (the boosting attack) no longer overfits the
held-out set, while real improvements of a step or more still show.

A submitter's sequence is their finished, official evaluations (default scoring, not smoke
tests) of versions in the phase on the dataset version, in the order they finished: a new
evaluation only appends, so what was released for an evaluation never changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.disclosure.decision import Release, View
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetResult,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
)


def round_to_step(score: float, step: float) -> float:
    """``score`` to the nearest multiple of ``step``.

    >>> round_to_step(0.4361, 0.01)
    0.44
    """
    return round(round(score / step) * step, 10)


def ladder(scores: Iterable[float | None], step: float) -> list[float | None]:
    """The released score after each submission (higher is better; None or NaN: no score).

    >>> ladder([0.30, 0.305, 0.32, 0.31, 0.50], 0.01)
    [0.3, 0.3, 0.32, 0.32, 0.5]
    """
    best: float | None = None
    released: list[float | None] = []
    for score in scores:
        if score is not None and math.isfinite(score) and (best is None or score > best + step):
            best = round_to_step(score, step)
        released.append(best)
    return released


def ladder_scores(
    session: Session, evaluations: Iterable[tuple[int, View]]
) -> dict[int, float | None]:
    """The ladder score released for each evaluation whose view is the Ladder's (others are
    left out): one query per (phase, dataset version, owner) the evaluations belong to."""
    wanted = {eid: view for eid, view in evaluations if view.release == Release.LADDER}
    if not wanted:
        return {}
    keys = session.execute(
        select(
            Evaluation.id,
            AlgorithmVersion.phase_id,
            Evaluation.dataset_version_id,
            Algorithm.owner_id,
        )
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
        .where(Evaluation.id.in_(list(wanted)))
    ).all()
    groups: dict[tuple[Any, ...], list[int]] = {}
    for eid, phase_id, dv_id, owner_id in keys:
        step = wanted[eid].ladder_step
        groups.setdefault((phase_id, dv_id, owner_id, step), []).append(eid)
    released: dict[int, float | None] = {}
    for (phase_id, dv_id, owner_id, step), ids in groups.items():
        sequence = session.execute(
            select(Evaluation.id, DatasetResult.event_f1)
            .join(DatasetResult, DatasetResult.evaluation_id == Evaluation.id)
            .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
            .join(Algorithm, AlgorithmVersion.algorithm_id == Algorithm.id)
            .where(
                AlgorithmVersion.phase_id == phase_id,
                Evaluation.dataset_version_id == dv_id,
                Algorithm.owner_id == owner_id,
                Evaluation.status == EvaluationStatus.DONE,
                Evaluation.official.is_(True),
                Evaluation.kind != EvaluationKind.SMOKE_TEST,
            )
            .order_by(Evaluation.finished_at, Evaluation.id)
        ).all()
        assert step is not None  # decide() sets it for every Ladder view
        scores = ladder([score for _, score in sequence], step)
        by_id = {eid: score for (eid, _), score in zip(sequence, scores, strict=True)}
        for eid in ids:
            released[eid] = by_id.get(eid)
    return released
