"""Read side of datasets (the write side is the pipeline's :mod:`szbench.datasets.service`)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from szbench.auth import policy
from szbench.errors import Forbidden, NotFound
from szbench.models import Dataset, DatasetVersion, Recording, User


def list_datasets(session: Session, *, limit: int, offset: int) -> tuple[list[Dataset], int]:
    total = session.scalar(select(func.count(Dataset.id))) or 0
    rows = session.scalars(select(Dataset).order_by(Dataset.id).limit(limit).offset(offset)).all()
    return list(rows), total


def get_dataset(session: Session, slug: str) -> Dataset:
    dataset = session.scalar(
        select(Dataset).where(Dataset.slug == slug).options(selectinload(Dataset.versions))
    )
    if dataset is None:
        raise NotFound(f"dataset {slug!r} does not exist")
    return dataset


def recording_counts(session: Session, dataset: Dataset) -> dict[int, int]:
    ids = [v.id for v in dataset.versions]
    if not ids:
        return {}
    rows = session.execute(
        select(Recording.dataset_version_id, func.count(Recording.id))
        .where(Recording.dataset_version_id.in_(ids))
        .group_by(Recording.dataset_version_id)
    ).all()
    return {dv: n for dv, n in rows}


def get_version(session: Session, dataset: Dataset, version: str | None) -> DatasetVersion:
    """The named version, or the newest active one when ``version`` is None."""
    versions = [
        v for v in dataset.versions if (version is None and v.is_active) or v.version == version
    ]
    if not versions:
        wanted = f"version {version!r}" if version else "an active version"
        raise NotFound(f"dataset {dataset.slug!r} has no {wanted}")
    return versions[-1]


def _check_data_access(viewer: User | None, dataset: Dataset) -> None:
    if not policy.can_read_recordings(viewer, dataset):
        raise Forbidden(
            f"dataset {dataset.slug!r} is held out: its recordings and annotations are for admins"
        )


def list_recordings(
    session: Session,
    dataset_version: DatasetVersion,
    *,
    viewer: User | None,
    limit: int,
    offset: int,
) -> tuple[list[Recording], int]:
    _check_data_access(viewer, dataset_version.dataset)
    where = Recording.dataset_version_id == dataset_version.id
    total = session.scalar(select(func.count(Recording.id)).where(where)) or 0
    rows = session.scalars(
        select(Recording).where(where).order_by(Recording.key).limit(limit).offset(offset)
    ).all()
    return list(rows), total


def recording_file(
    session: Session,
    dataset_version: DatasetVersion,
    key: str,
    *,
    viewer: User | None,
    kind: str,
) -> Path:
    """The EEG (``kind="eeg"``) or reference annotations (``"annotations"``) of a recording."""
    _check_data_access(viewer, dataset_version.dataset)
    recording = session.scalar(
        select(Recording).where(
            Recording.dataset_version_id == dataset_version.id, Recording.key == key
        )
    )
    if recording is None:
        raise NotFound(f"recording {key!r} is not in this dataset version")
    relative = recording.eeg_path if kind == "eeg" else recording.annotations_path
    root = Path(dataset_version.path).resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise NotFound(f"recording {key!r}: its {kind} file is not on this server")
    return path
