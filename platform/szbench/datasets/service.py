"""Dataset services: create a dataset, register a prepared version and its recordings.

A *prepared* dataset is the folder ``szbench dataset prepare`` writes (docs/datasets.md):
``manifest.json``, ``eeg/`` with standardised EDFs and ``annotations/`` with the reference
TSVs. Registering a version reads only the manifest (the API host never parses EEG) and
checks that every file it names exists inside the folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import changes
from szbench.errors import BadRequest, Conflict
from szbench.models import (
    Dataset,
    DatasetKind,
    DatasetVersion,
    Disclosure,
    FailedRecordings,
    Recording,
)

_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")

#: Keys of ``Dataset.run_limits`` the worker understands (the rest is refused, by name).
RUN_LIMIT_KEYS = frozenset(
    {
        "timeout_s",
        "memory_bytes",
        "cpus",
        "pids",
        "tmpfs_bytes",
        "output_bytes",
        "output_files",
        "log_bytes",
        "queue",
    }
)


def create_dataset(
    session: Session,
    *,
    slug: str,
    title: str = "",
    description: str = "",
    kind: DatasetKind = DatasetKind.HELD_OUT,
    run_limits: dict[str, Any] | None = None,
    disclosure: Disclosure = Disclosure.AGGREGATE,
    failed_recordings: FailedRecordings = FailedRecordings.UNRANKED,
    licence: str = "",
    citation: str = "",
    confirm_public: bool = False,
) -> Dataset:
    """Create a dataset (no versions yet). Raises Conflict when the slug is taken.

    Held-out by default: a public sample (``kind``) needs ``confirm_public``, since anyone
    signed in may then download its recordings and annotations.
    """
    _check_public(slug, kind, confirm_public)
    if not _SLUG.fullmatch(slug):
        raise BadRequest(f"slug: {slug!r} is not a valid slug (lower-case letters, digits, . _ -)")
    limits = dict(run_limits or {})
    unknown = sorted(set(limits) - RUN_LIMIT_KEYS)
    if unknown:
        raise BadRequest(
            f"run_limits: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(RUN_LIMIT_KEYS))}"
        )
    if "queue" in limits and limits["queue"] not in ("cpu", "gpu"):
        raise BadRequest(f"run_limits.queue: must be 'cpu' or 'gpu', got {limits['queue']!r}")
    for key, value in limits.items():
        if key == "queue":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise BadRequest(f"run_limits.{key}: must be a positive number, got {value!r}")
    if session.scalar(select(Dataset.id).where(Dataset.slug == slug)) is not None:
        raise Conflict(f"slug: a dataset with slug {slug!r} already exists")
    dataset = Dataset(
        slug=slug,
        title=title or slug,
        description=description,
        kind=kind,
        run_limits=limits,
        disclosure=disclosure,
        failed_recordings=failed_recordings,
        licence=licence,
        citation=citation,
    )
    session.add(dataset)
    session.flush()
    return dataset


def _check_public(slug: str, kind: DatasetKind, confirmed: bool) -> None:
    if kind == DatasetKind.PUBLIC_SAMPLE and not confirmed:
        raise BadRequest(
            f"kind: a public sample's recordings and annotations can be downloaded by anyone "
            f"signed in; making {slug[:100]!r} public needs an explicit confirmation "
            "(confirm_public)"
        )


def set_kind(
    session: Session, dataset: Dataset, kind: DatasetKind, *, confirm_public: bool = False
) -> Dataset:
    """Make ``dataset`` held-out (always allowed) or a public sample (only confirmed: its
    recordings and annotations become downloadable, and its results fully disclosed)."""
    _check_public(dataset.slug, kind, confirm_public)
    dataset.kind = kind
    session.flush()
    changes.dataset_changed(session, dataset.id)
    return dataset


def set_failed_recordings(session: Session, dataset: Dataset, rule: FailedRecordings) -> Dataset:
    """Whether evaluations with failed recordings rank on ``dataset``'s leaderboards (scored
    as no detections) or are shown apart."""
    dataset.failed_recordings = rule
    session.flush()
    changes.dataset_changed(session, dataset.id)
    return dataset


def set_facts(
    session: Session,
    dataset: Dataset,
    *,
    title: str | None = None,
    description: str | None = None,
    licence: str | None = None,
    citation: str | None = None,
) -> Dataset:
    """Change what ``dataset``'s page says about it; ``None`` leaves a field unchanged."""
    if title is not None:
        dataset.title = title
    if description is not None:
        dataset.description = description
    if licence is not None:
        dataset.licence = licence
    if citation is not None:
        dataset.citation = citation
    session.flush()
    return dataset


def count_seizures(annotations_file: Path) -> int | None:
    """Seizure events in a reference file (merged as the scorer merges them); ``None`` when
    the file cannot be read: registration does not judge the reference, scoring does."""
    from szbench_scoring.annotations import AnnotationError, read_annotations

    try:
        return len(read_annotations(annotations_file).events)
    except (AnnotationError, OSError, UnicodeDecodeError, ValueError):
        return None


#: A reference annotation file larger than this is not copied into the database (scoring
#: then needs the file where the dataset is); real ones are a few hundred bytes.
REFERENCE_MAX_BYTES = 1024**2


def reference_text(annotations_file: Path) -> str | None:
    """The reference file's text for :attr:`Recording.reference_tsv`, or None when it cannot
    be read (registration does not judge the reference, scoring does) or is too large."""
    try:
        if annotations_file.stat().st_size > REFERENCE_MAX_BYTES:
            return None
        return annotations_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def set_disclosure(session: Session, dataset: Dataset, disclosure: Disclosure) -> Dataset:
    """What non-admins see of results on ``dataset`` from now on (see
    :mod:`szbench.disclosure`)."""
    dataset.disclosure = disclosure
    session.flush()
    changes.dataset_changed(session, dataset.id)
    return dataset


def _relative_file(prepared: Path, value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{field}: must be a non-empty relative path")
    rel = PurePosixPath(value)
    if rel.is_absolute() or ".." in rel.parts:
        raise BadRequest(f"{field}: {value!r} must be a path inside the dataset folder")
    if not (prepared / rel).is_file():
        raise BadRequest(f"{field}: {value!r} does not exist in the prepared dataset")
    return str(rel)


def _first(entry: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in entry:
            return entry[name]
    return None


def read_manifest(prepared_path: Path) -> tuple[list[dict[str, Any]], str]:
    """The recordings listed by ``prepared_path/manifest.json`` and the manifest's sha256.

    Each returned dict has the :class:`~szbench.models.Recording` column names. Raises
    BadRequest naming the manifest field that is missing or wrong.
    """
    manifest = prepared_path / "manifest.json"
    if not manifest.is_file():
        raise BadRequest(f"prepared_path: no manifest.json in {prepared_path.name!r}")
    raw = manifest.read_bytes()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"manifest.json: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    entries = data.get("recordings") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadRequest("manifest.json: 'recordings' must be a non-empty list")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"manifest.json: recordings[{i}]"
        if not isinstance(entry, dict):
            raise BadRequest(f"{where}: must be an object")
        key = _first(entry, "id", "key", "recording_id")
        if not isinstance(key, str) or not key:
            raise BadRequest(f"{where}.id: missing")
        if key in seen:
            raise BadRequest(f"{where}.id: {key!r} listed twice")
        seen.add(key)
        subject = entry.get("subject")
        if not isinstance(subject, str) or not subject:
            raise BadRequest(f"{where}.subject: missing")
        checksum = entry.get("checksum")
        if not isinstance(checksum, str) or not checksum:
            raise BadRequest(f"{where}.checksum: missing")
        duration = _first(entry, "duration_s", "duration")
        if isinstance(duration, bool) or not isinstance(duration, int | float) or duration <= 0:
            raise BadRequest(f"{where}.duration_s: must be a positive number, got {duration!r}")
        # The standardised rate is the dataset's (top level); per entry only as a fallback.
        sfreq = data.get("sfreq_hz") or _first(entry, "sfreq_hz", "sfreq") or 256.0
        flags = entry.get("flags") or []
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise BadRequest(f"{where}.flags: must be a list of strings")
        rows.append(
            {
                "key": key,
                "subject": subject,
                "session": str(entry.get("session") or ""),
                "run": str(entry.get("run") or ""),
                "duration_s": float(duration),
                "sfreq_hz": float(sfreq),
                "source_checksum": str(entry.get("source_checksum") or ""),
                "checksum": checksum,
                "eeg_path": _relative_file(
                    prepared_path, _first(entry, "eeg_path", "eeg"), f"{where}.eeg_path"
                ),
                "annotations_path": _relative_file(
                    prepared_path,
                    _first(entry, "annotations_path", "annotations"),
                    f"{where}.annotations_path",
                ),
                "flags": flags,
            }
        )
    return rows, "sha256:" + hashlib.sha256(raw).hexdigest()


def register_dataset_version(
    session: Session, dataset: Dataset, *, version: str, prepared_path: Path
) -> DatasetVersion:
    """Register a prepared folder as a new version of ``dataset``, with its recordings.

    Raises BadRequest naming the manifest field at fault, Conflict when the version exists.
    """
    if not version or len(version) > 100:
        raise BadRequest("version: must be 1 to 100 characters")
    prepared_path = Path(prepared_path).resolve()
    if not prepared_path.is_dir():
        raise BadRequest(f"prepared_path: {prepared_path.name!r} is not a folder")
    exists = session.scalar(
        select(DatasetVersion.id).where(
            DatasetVersion.dataset_id == dataset.id, DatasetVersion.version == version
        )
    )
    if exists is not None:
        raise Conflict(f"dataset {dataset.slug!r} already has a version {version!r}")
    rows, manifest_checksum = read_manifest(prepared_path)
    dv = DatasetVersion(
        dataset=dataset,
        version=version,
        path=str(prepared_path),
        manifest_checksum=manifest_checksum,
        is_active=True,
    )
    session.add(dv)
    session.flush()
    session.add_all(
        Recording(
            dataset_version_id=dv.id,
            seizures=count_seizures(prepared_path / row["annotations_path"]),
            reference_tsv=reference_text(prepared_path / row["annotations_path"]),
            **row,
        )
        for row in rows
    )
    session.flush()
    return dv


def find_dataset(session: Session, slug: str) -> Dataset | None:
    """The dataset called ``slug``, if there is one."""
    return session.scalars(select(Dataset).where(Dataset.slug == slug)).first()


def ensure_version(session: Session, dataset: Dataset, *, prepared_path: Path) -> DatasetVersion:
    """The version of ``dataset`` registered from this folder with this very manifest, else a
    new one numbered after the others (``szbench evaluate`` registers a folder once)."""
    prepared_path = Path(prepared_path).resolve()
    _, checksum = read_manifest(prepared_path)
    versions = session.scalars(
        select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
    ).all()
    for existing in versions:
        if existing.path == str(prepared_path) and existing.manifest_checksum == checksum:
            return existing
    return register_dataset_version(
        session, dataset, version=str(len(versions) + 1), prepared_path=prepared_path
    )
