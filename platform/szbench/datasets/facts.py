"""What a dataset page says about a dataset: its size per version and, where disclosed, per
subject.

Held-out data shows only totals (subjects, recordings, hours, seizures) unless its dataset
discloses per-subject figures (``subject`` or ``recording``): a subject's seizure count is a
fact of the held-out reference, the same one ``/subjects`` discloses from that level on (see
docs/security.md). Public samples and admins see every subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.disclosure import decision
from szbench.disclosure import facts as rule_facts
from szbench.errors import Forbidden, NotFound, Unauthorized
from szbench.models import Dataset, DatasetKind, DatasetVersion, Disclosure, Recording, User


@dataclass(frozen=True)
class Size:
    """Counts of one version, or of one subject in it."""

    recordings: int
    hours: float
    #: Seizure events in the reference; None when a recording's count is unknown (registered
    #: before counts were kept).
    seizures: int | None
    subjects: int = 1


@dataclass(frozen=True)
class VersionFacts:
    version: DatasetVersion
    total: Size
    #: ``(subject, size)`` in subject order; None where per-subject figures are not disclosed.
    subjects: list[tuple[str, Size]] | None
    #: Why they are not (None: they are).
    withheld: str | None = None


def subjects_view(
    dataset: Dataset, phases: tuple[rule_facts.PhaseRules, ...], viewer: User | None
) -> decision.View:
    """What ``viewer`` may learn of a version of ``dataset`` named by ``phases``, decided
    where every such rule is: per-subject counts (seizures included) follow the same
    rules as per-subject results of evaluations on that data."""
    facts = rule_facts.Facts(
        held_out=dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        dataset_level=dataset.disclosure or Disclosure.AGGREGATE,
        data_phases=phases,
    )
    return decision.decide(viewer, facts)


def _size(recordings: int, seconds: float | None, seizures: int | None, unknown: int) -> Size:
    return Size(
        recordings=recordings,
        hours=(seconds or 0.0) / 3600.0,
        seizures=None if unknown else int(seizures or 0),
    )


def version_facts(session: Session, dataset: Dataset, viewer: User | None) -> list[VersionFacts]:
    """Facts of each version of ``dataset``, newest first."""
    ids = [v.id for v in dataset.versions]
    if not ids:
        return []
    per_subject = session.execute(
        select(
            Recording.dataset_version_id,
            Recording.subject,
            func.count(Recording.id),
            func.sum(Recording.duration_s),
            func.sum(Recording.seizures),
            # count(col) skips NULLs: the difference is the recordings without a count.
            func.count(Recording.id) - func.count(Recording.seizures),
        )
        .where(Recording.dataset_version_id.in_(ids))
        .group_by(Recording.dataset_version_id, Recording.subject)
        .order_by(Recording.dataset_version_id, Recording.subject)
    ).all()
    rows: dict[int, list[tuple[str, int, float, int | None, int]]] = {}
    for dv_id, subject, n, seconds, seizures, unknown in per_subject:
        rows.setdefault(dv_id, []).append((subject, n, seconds or 0.0, seizures, unknown))
    phases = rule_facts.data_phases(session, ids)
    out = []
    for version in reversed(dataset.versions):
        mine = rows.get(version.id, [])
        total = _size(
            sum(r[1] for r in mine),
            sum(r[2] for r in mine),
            sum(r[3] or 0 for r in mine),
            sum(r[4] for r in mine),
        )
        total = Size(total.recordings, total.hours, total.seizures, subjects=len(mine))
        view = subjects_view(dataset, phases[version.id], viewer)
        subjects = [(r[0], _size(r[1], r[2], r[3], r[4])) for r in mine] if view.subjects else None
        withheld = None if view.subjects else view.withheld("Per-subject figures") + "."
        out.append(VersionFacts(version=version, total=total, subjects=subjects, withheld=withheld))
    return out


def sample_files(
    session: Session, dataset: Dataset, version: DatasetVersion, viewer: User | None
) -> list[tuple[str, Path]]:
    """``(name in the archive, file)`` of a public-sample version as prepared: its
    manifest.json and every recording's EEG and reference, so ``szbench evaluate --dataset``
    reads the unpacked folder as it is. Held-out data is never offered, admins included (they
    have the server's folders)."""
    if dataset.kind != DatasetKind.PUBLIC_SAMPLE:
        raise Forbidden(f"dataset {dataset.slug!r} is held out: it cannot be downloaded")
    if viewer is None:
        raise Unauthorized(f"sign in to download the public sample {dataset.slug!r}")
    root = Path(version.path).resolve()
    names = ["manifest.json"]
    for eeg, reference in session.execute(
        select(Recording.eeg_path, Recording.annotations_path)
        .where(Recording.dataset_version_id == version.id)
        .order_by(Recording.key)
    ):
        names += [eeg, reference]
    files = []
    for name in names:
        path = (root / name).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise NotFound(f"{dataset.slug} {version.version}: {name} is not on this server")
        files.append((name, path))
    return files
