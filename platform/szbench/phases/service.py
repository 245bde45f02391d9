"""Challenge phases and publishing hidden results.

A phase's rules (disclosure level, failed-recordings rule, release rule) apply to the dataset
versions it names (:attr:`~szbench.models.Phase.dataset_versions`) and nowhere else: data
registered later, or any other data its versions are evaluated on, follows its own rules.
Every change of a rule bumps the change counters of the data it names
(:mod:`szbench.changes`), in the same transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from szbench import changes
from szbench.errors import BadRequest, Conflict, NotFound
from szbench.models import AlgorithmVersion, Dataset, DatasetVersion, Evaluation, Phase, as_utc


def list_phases(session: Session, *, limit: int, offset: int) -> tuple[list[Phase], int]:
    total = session.scalar(select(func.count(Phase.id))) or 0
    rows = session.scalars(select(Phase).order_by(Phase.id).limit(limit).offset(offset)).all()
    return list(rows), total


def get_phase(session: Session, slug: str) -> Phase:
    phase = session.scalar(select(Phase).where(Phase.slug == slug))
    if phase is None:
        raise NotFound(f"phase {slug!r} does not exist")
    return phase


def _check_dates(opens_at: datetime | None, closes_at: datetime | None) -> None:
    opens, closes = as_utc(opens_at), as_utc(closes_at)
    if opens is not None and closes is not None and closes <= opens:
        raise BadRequest(
            f"closes_at: {closes:%Y-%m-%d %H:%M} UTC is not after opens_at "
            f"{opens:%Y-%m-%d %H:%M} UTC"
        )


def refusal(phase: Phase, now: datetime | None = None) -> str | None:
    """Why ``phase`` takes no submission at ``now`` (closed, not open yet, past its
    deadline), or None when it takes them."""
    now = now or datetime.now(UTC)
    opens, closes = as_utc(phase.opens_at), as_utc(phase.closes_at)
    if not phase.is_open:
        return f"phase: {phase.slug!r} is closed for submissions"
    if opens is not None and now < opens:
        return f"phase: {phase.slug!r} opens for submissions at {opens:%Y-%m-%d %H:%M} UTC"
    if closes is not None and now >= closes:
        return f"phase: {phase.slug!r} closed for submissions at {closes:%Y-%m-%d %H:%M} UTC"
    return None


def accepting(session: Session, now: datetime | None = None) -> list[Phase]:
    """Phases that take submissions at ``now``, oldest first."""
    rows = session.scalars(select(Phase).where(Phase.is_open.is_(True)).order_by(Phase.id))
    return [p for p in rows if refusal(p, now) is None]


def resolve_dataset_versions(
    session: Session, refs: list[tuple[str, str]], *, field: str = "dataset_versions"
) -> list[DatasetVersion]:
    """The dataset versions named by ``(dataset slug, version)`` pairs; BadRequest naming the
    first that does not exist."""
    found = []
    for i, (slug, version) in enumerate(refs):
        dv = session.scalar(
            select(DatasetVersion)
            .join(Dataset, DatasetVersion.dataset_id == Dataset.id)
            .where(Dataset.slug == slug, DatasetVersion.version == version)
        )
        if dv is None:
            raise BadRequest(
                f"{field}[{i}]: dataset {slug[:100]!r} has no version {version[:100]!r}"
            )
        if dv not in found:
            found.append(dv)
    return found


def set_dataset_versions(session: Session, phase: Phase, versions: list[DatasetVersion]) -> Phase:
    """Name the dataset versions ``phase``'s rules apply to (replacing the previous list)."""
    before = [dv.id for dv in phase.dataset_versions]
    phase.dataset_versions = list(versions)
    session.flush()
    changes.phase_changed(session, phase.id, also=before)
    return phase


def create_phase(
    session: Session,
    *,
    slug: str,
    opens_at: datetime | None = None,
    closes_at: datetime | None = None,
    dataset_versions: list[DatasetVersion] | None = None,
    **fields: object,
) -> Phase:
    if session.scalar(select(Phase.id).where(Phase.slug == slug)) is not None:
        raise Conflict(f"slug: phase {slug!r} already exists")
    opens_at, closes_at = as_utc(opens_at), as_utc(closes_at)
    _check_dates(opens_at, closes_at)
    phase = Phase(slug=slug, opens_at=opens_at, closes_at=closes_at, **fields)
    session.add(phase)
    session.flush()
    if dataset_versions:
        set_dataset_versions(session, phase, dataset_versions)
    return phase


#: Fields where None is a value (removes the override or the date), not "unchanged".
NULLABLE = (
    "disclosure",
    "opens_at",
    "closes_at",
    "failed_recordings",
    "release_rule",
    "ladder_step",
)


def update_phase(session: Session, phase: Phase, **changed: Any) -> Phase:
    for key in ("opens_at", "closes_at"):
        if key in changed:
            changed[key] = as_utc(changed[key])
    _check_dates(changed.get("opens_at", phase.opens_at), changed.get("closes_at", phase.closes_at))
    for key, value in changed.items():
        # None means "unchanged", except where it is a value (NULLABLE).
        if value is not None or key in NULLABLE:
            setattr(phase, key, value)
    session.flush()
    # Its dates, opening and rules decide what is shown of its results on the data it names.
    changes.phase_changed(session, phase.id)
    return phase


def publish_phase(session: Session, phase: Phase) -> int:
    """Publish every evaluation of every version submitted to ``phase``; how many changed."""
    versions = select(AlgorithmVersion.id).where(AlgorithmVersion.phase_id == phase.id)
    hidden = list(
        session.scalars(
            select(Evaluation.id).where(
                Evaluation.algorithm_version_id.in_(versions), Evaluation.published.is_(False)
            )
        )
    )
    if hidden:
        session.execute(
            update(Evaluation)
            .where(Evaluation.id.in_(hidden))
            .values(published=True)
            .execution_options(synchronize_session=False)
        )
        changes.evaluations_changed(session, hidden)
    session.flush()
    return len(hidden)


def publish_evaluation(session: Session, evaluation: Evaluation) -> Evaluation:
    evaluation.published = True
    session.flush()
    changes.evaluations_changed(session, [evaluation.id])
    return evaluation
