"""The facts that decide what a viewer may learn of one evaluation on one dataset version.

Plain values (:class:`Facts`, :class:`PhaseRules`), read from the database here, so that
:func:`szbench.disclosure.decision.decide` is a function of values alone.

The rules follow the data being read: the dataset version's own level, and the rules of
*every* phase that names it (:attr:`Facts.data_phases`), whatever phase (if any) the
evaluated algorithm version was submitted to. Every active version is evaluated on every
active held-out dataset version, so a version outside a phase reads the very data the phase
names, and must learn no more of it than the phase's own submissions do. A phase's rules
reach only the dataset versions it names: data registered later follows its own.

The evaluation's *own phase* (:attr:`Facts.phase`: its version's phase, when that phase
names the dataset version) matters once it no longer accepts submissions (closed, or past
its closing date: read at every request, so the date passing needs no write): its entries
are over and published by its rules (exact figures at its level), while everything else on
the same data still follows the phases that are open.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    Disclosure,
    Evaluation,
    Phase,
    PhaseDatasetVersion,
    ReleaseRule,
    as_utc,
)


@dataclass(frozen=True)
class PhaseRules:
    """The rules of a phase, as they stand now."""

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
    #: The evaluation's own phase (its version's), where it names the dataset version.
    phase: PhaseRules | None = None
    #: Every phase that names the dataset version, in id order.
    data_phases: tuple[PhaseRules, ...] = ()
    subjects: int = 0
    owner_id: int | None = None
    # The algorithm's team: its members learn what its owner learns (policy.acts_for).
    team_id: int | None = None


def phase_closed(is_open: bool, closes_at: datetime | None, now: datetime | None = None) -> bool:
    """A phase closed by an admin, or past its closing date."""
    now = now or datetime.now(UTC)
    return not is_open or (closes_at is not None and now >= as_utc(closes_at))


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


#: A phase's columns, in :func:`facts_from_row`'s and :func:`rules_from_row`'s order.
PHASE_COLUMNS = (
    Phase.slug,
    Phase.disclosure,
    Phase.release_rule,
    Phase.ladder_step,
    Phase.is_open,
    Phase.closes_at,
)


def join_own_phase(query: Any) -> Any:
    """Outer-join :class:`Phase` as each evaluation's own phase: its version's phase when
    that phase names the evaluation's dataset version, else none (NULLs). ``query`` must
    already join :class:`AlgorithmVersion` to :class:`Evaluation`."""
    named = and_(
        PhaseDatasetVersion.phase_id == AlgorithmVersion.phase_id,
        PhaseDatasetVersion.dataset_version_id == Evaluation.dataset_version_id,
    )
    return query.outerjoin(PhaseDatasetVersion, named).outerjoin(
        Phase, Phase.id == PhaseDatasetVersion.phase_id
    )


def rules_from_row(phase: tuple[Any, ...], now: datetime | None = None) -> PhaseRules | None:
    """:class:`PhaseRules` from a phase's :data:`PHASE_COLUMNS` (None when all are NULL)."""
    slug, level, release_rule, step, is_open, closes_at = phase
    if slug is None:
        return None
    return phase_rules(
        slug=slug,
        level=level,
        release_rule=release_rule,
        ladder_step=step,
        is_open=is_open,
        closes_at=closes_at,
        now=now,
    )


def data_phases(
    session: Session, dataset_version_ids: Iterable[int], now: datetime | None = None
) -> dict[int, tuple[PhaseRules, ...]]:
    """The rules of every phase naming each dataset version (one query)."""
    ids = sorted(set(dataset_version_ids))
    found: dict[int, list[PhaseRules]] = {i: [] for i in ids}
    if ids:
        rows = session.execute(
            select(PhaseDatasetVersion.dataset_version_id, *PHASE_COLUMNS)
            .join(Phase, Phase.id == PhaseDatasetVersion.phase_id)
            .where(PhaseDatasetVersion.dataset_version_id.in_(ids))
            .order_by(Phase.id)
        ).all()
        for dv_id, *phase in rows:
            rules = rules_from_row(tuple(phase), now)
            if rules is not None:
                found[dv_id].append(rules)
    return {i: tuple(rules) for i, rules in found.items()}


def facts_from_row(
    kind: DatasetKind,
    dataset_level: Disclosure | None,
    phase: tuple[Any, ...],
    *,
    data: tuple[PhaseRules, ...],
    subjects: int | None,
    owner_id: int | None,
    team_id: int | None = None,
    now: datetime | None = None,
) -> Facts:
    """:class:`Facts` from a row: the dataset's kind and level, the :data:`PHASE_COLUMNS`
    of the evaluation's own phase (all NULL when it has none naming the data), the rules of
    the phases naming the dataset version (``data``: :func:`data_phases`) and the result's
    subject count."""
    return Facts(
        held_out=kind != DatasetKind.PUBLIC_SAMPLE,
        dataset_level=dataset_level or Disclosure.AGGREGATE,
        phase=rules_from_row(phase, now),
        data_phases=data,
        subjects=subjects or 0,
        owner_id=owner_id,
        team_id=team_id,
    )


def own_phase(evaluation: Evaluation) -> Phase | None:
    """``evaluation``'s own phase: its version's, when it names the evaluation's dataset
    version (see :func:`join_own_phase`)."""
    phase = evaluation.algorithm_version.phase
    if phase is None:
        return None
    named = any(dv.id == evaluation.dataset_version_id for dv in phase.dataset_versions)
    return phase if named else None


def facts_of(evaluation: Evaluation, now: datetime | None = None) -> Facts:
    dv = evaluation.dataset_version
    dataset = dv.dataset
    phase = own_phase(evaluation)
    result = evaluation.result
    return Facts(
        held_out=dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        dataset_level=dataset.disclosure or Disclosure.AGGREGATE,
        phase=rules_of(phase, now) if phase is not None else None,
        data_phases=tuple(rules_of(p, now) for p in dv.phases),
        subjects=result.subjects if result is not None else 0,
        owner_id=evaluation.algorithm_version.algorithm.owner_id,
        team_id=evaluation.algorithm_version.algorithm.team_id,
    )
