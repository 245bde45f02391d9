"""Challenge phases and publishing hidden results."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from szbench.errors import Conflict, NotFound
from szbench.models import AlgorithmVersion, Evaluation, Phase


def list_phases(session: Session, *, limit: int, offset: int) -> tuple[list[Phase], int]:
    total = session.scalar(select(func.count(Phase.id))) or 0
    rows = session.scalars(select(Phase).order_by(Phase.id).limit(limit).offset(offset)).all()
    return list(rows), total


def get_phase(session: Session, slug: str) -> Phase:
    phase = session.scalar(select(Phase).where(Phase.slug == slug))
    if phase is None:
        raise NotFound(f"phase {slug!r} does not exist")
    return phase


def create_phase(session: Session, *, slug: str, **fields: object) -> Phase:
    if session.scalar(select(Phase.id).where(Phase.slug == slug)) is not None:
        raise Conflict(f"slug: phase {slug!r} already exists")
    phase = Phase(slug=slug, **fields)
    session.add(phase)
    session.flush()
    return phase


def update_phase(session: Session, phase: Phase, **changes: object) -> Phase:
    for key, value in changes.items():
        # None means "unchanged", except for the disclosure override, where it removes it.
        if value is not None or key == "disclosure":
            setattr(phase, key, value)
    session.flush()
    return phase


def publish_phase(session: Session, phase: Phase) -> int:
    """Publish every evaluation of every version submitted to ``phase``; how many changed."""
    versions = select(AlgorithmVersion.id).where(AlgorithmVersion.phase_id == phase.id)
    result = session.execute(
        update(Evaluation)
        .where(Evaluation.algorithm_version_id.in_(versions), Evaluation.published.is_(False))
        .values(published=True)
        .execution_options(synchronize_session=False)
    )
    session.flush()
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def publish_evaluation(session: Session, evaluation: Evaluation) -> Evaluation:
    evaluation.published = True
    session.flush()
    return evaluation
