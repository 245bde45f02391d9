"""Change counters: what the read caches (:mod:`szbench.stamped_cache`) key their answers on.

Evaluations, algorithms and dataset versions each have a ``revision`` counter. Every service
that changes what a cached answer shows bumps the counters it affects, in the transaction of
the change, so the next read (in any process) sees a new key:

- a result stored, an evaluation finished, published or hidden: the evaluation, its
  algorithm and its dataset version (:func:`evaluations_changed`);
- an algorithm's visibility, withdrawal, name, title or team, and its team's members: the
  algorithm and every dataset version it has evaluations on (:func:`algorithm_changed`);
- a dataset's kind, disclosure or failed-recordings rule: its versions
  (:func:`dataset_changed`);
- a phase's disclosure, failed-recordings or release rule, its step, its dates, opening or
  closing, and the dataset versions it names: the dataset versions it names before and
  after (:func:`phase_changed`).

An evaluation's answers key on its own counter and those of its algorithm and dataset
version; an algorithm's on its own and those of the dataset versions of its evaluations; a
leaderboard's on its dataset version's. Counters only grow, so a sum of them is a stamp that
no two changes can cancel. Rules that change with time alone (a phase's closing date passing)
are not writes: the caches read them as facts on every request.

Rows are always bumped in one order (evaluations, then algorithms, then dataset versions),
so that two transactions bumping overlapping rows wait for each other instead of deadlocking.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetVersion,
    Evaluation,
    PhaseDatasetVersion,
)


def _bump(
    session: Session, table: type[Evaluation | Algorithm | DatasetVersion], ids: set[int]
) -> None:
    if not ids:
        return
    session.execute(
        update(table)
        .where(table.id.in_(sorted(ids)))
        .values(revision=table.revision + 1)
        .execution_options(synchronize_session=False)
    )


def evaluations_changed(session: Session, evaluation_ids: Iterable[int]) -> None:
    """What is shown of these evaluations changed (result, status, published)."""
    ids = set(evaluation_ids)
    if not ids:
        return
    session.flush()
    rows = session.execute(
        select(AlgorithmVersion.algorithm_id, Evaluation.dataset_version_id)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .where(Evaluation.id.in_(ids))
    ).all()
    _bump(session, Evaluation, ids)
    _bump(session, Algorithm, {algorithm for algorithm, _ in rows})
    _bump(session, DatasetVersion, {dv for _, dv in rows})


def algorithm_changed(session: Session, algorithm_id: int) -> None:
    """What is shown of this algorithm changed (visibility, withdrawal, names, team)."""
    algorithm_changed_many(session, [algorithm_id])


def algorithm_changed_many(session: Session, algorithm_ids: Iterable[int]) -> None:
    """:func:`algorithm_changed` for several (a team's members changed: who sees them)."""
    ids = set(algorithm_ids)
    if not ids:
        return
    session.flush()
    dvs = session.scalars(
        select(Evaluation.dataset_version_id)
        .join(AlgorithmVersion, Evaluation.algorithm_version_id == AlgorithmVersion.id)
        .where(AlgorithmVersion.algorithm_id.in_(ids))
        .distinct()
    ).all()
    _bump(session, Algorithm, ids)
    _bump(session, DatasetVersion, set(dvs))


def dataset_changed(session: Session, dataset_id: int) -> None:
    """A rule of this dataset (kind, disclosure, failed recordings) changed."""
    session.flush()
    ids = session.scalars(
        select(DatasetVersion.id).where(DatasetVersion.dataset_id == dataset_id)
    ).all()
    _bump(session, DatasetVersion, set(ids))


def phase_changed(session: Session, phase_id: int, *, also: Iterable[int] = ()) -> None:
    """A rule of this phase changed: the dataset versions it names (and ``also``, those it
    named before the change) show it."""
    session.flush()
    named = session.scalars(
        select(PhaseDatasetVersion.dataset_version_id).where(
            PhaseDatasetVersion.phase_id == phase_id
        )
    ).all()
    _bump(session, DatasetVersion, {*named, *also})
