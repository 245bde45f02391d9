"""Datasets: check a BIDS tree in the SzCORE layout and prepare its standardised copy.

A source dataset is a BIDS tree ``sub-*/ses-*/eeg/<stem>_eeg.<ext>`` (EDF, BDF, BrainVision
``.vhdr`` or EEGLAB ``.set``) with ``<stem>_events.tsv`` next to each recording. Preparing it
writes::

    OUT/manifest.json       what was imported (see :class:`Manifest`)
    OUT/eeg/...             standardised EDFs only (what an algorithm may see)
    OUT/annotations/...     validated events TSVs, never inside eeg/

A recording that cannot be imported is skipped and reported with the file and the reason; the
others are imported. The manifest is rewritten (atomically) after every recording, so an
interruption or a bad file never loses what was already imported, and a second ``prepare``
into the same OUT reuses every recording whose source is unchanged.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from szbench_scoring import AnnotationError, read_annotations, write_annotations
from szbench_worker.eeg.errors import EEGError
from szbench_worker.eeg.labels import OUTPUT_LABELS, TARGET_SFREQ_HZ
from szbench_worker.eeg.standardise import (
    EEG_EXTENSIONS,
    SourceInfo,
    file_checksum,
    inspect_recording,
    standardise_recording,
)

MANIFEST_FORMAT = 1
MANIFEST_NAME = "manifest.json"
#: How far an annotation's recordingDuration may be from the EEG's length before it is an error.
DURATION_TOLERANCE_S = 1.0

Progress = Callable[[int, int, str], None]
"""``progress(done, total, current)``: called before each recording and once at the end."""


class DatasetError(ValueError):
    """A dataset-level problem (no recordings, a bad manifest, OUT inside the source...)."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class Problem:
    """One file that cannot be imported, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


# --------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class ManifestRecording:
    """One standardised recording; paths are relative to the prepared dataset's root."""

    id: str
    subject: str
    session: str
    run: str
    eeg_path: str
    annotations_path: str
    duration_s: float
    source_sfreq_hz: float
    source_checksum: str
    checksum: str
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A prepared dataset, as ``load_manifest`` reads it from ``OUT/manifest.json``."""

    root: Path
    name: str
    created: str
    channels: tuple[str, ...]
    sfreq_hz: int
    recordings: tuple[ManifestRecording, ...]
    format: int = MANIFEST_FORMAT

    def eeg_file(self, recording: ManifestRecording) -> Path:
        """Absolute path of a recording's standardised EDF."""
        return self.root / recording.eeg_path

    def annotations_file(self, recording: ManifestRecording) -> Path:
        """Absolute path of a recording's validated events TSV."""
        return self.root / recording.annotations_path

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "name": self.name,
            "created": self.created,
            "channels": list(self.channels),
            "sfreq_hz": self.sfreq_hz,
            "recordings": [
                {**asdict(r), "flags": list(r.flags)}
                for r in sorted(self.recordings, key=lambda r: r.id)
            ],
        }


def load_manifest(out: str | os.PathLike[str]) -> Manifest:
    """Read and check ``OUT/manifest.json`` of a prepared dataset.

    Raises :class:`DatasetError` naming the manifest and the field that is wrong.
    """
    root = Path(out)
    path = root / MANIFEST_NAME
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DatasetError(path, "no manifest: not a prepared dataset") from exc
    except (OSError, ValueError) as exc:
        raise DatasetError(path, f"unreadable manifest: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise DatasetError(path, f"unsupported manifest format {doc.get('format')!r}")
    recordings = []
    for i, item in enumerate(doc.get("recordings", [])):
        try:
            rec = ManifestRecording(
                id=str(item["id"]),
                subject=str(item["subject"]),
                session=str(item["session"]),
                run=str(item["run"]),
                eeg_path=str(item["eeg_path"]),
                annotations_path=str(item["annotations_path"]),
                duration_s=float(item["duration_s"]),
                source_sfreq_hz=float(item["source_sfreq_hz"]),
                source_checksum=str(item["source_checksum"]),
                checksum=str(item["checksum"]),
                flags=tuple(str(f) for f in item.get("flags", [])),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(path, f"recordings[{i}]: bad or missing field {exc}") from exc
        for rel in (rec.eeg_path, rec.annotations_path):
            # The worker mounts these paths into containers: never outside the dataset.
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise DatasetError(path, f"recordings[{i}]: path {rel!r} leaves the dataset")
        recordings.append(rec)
    try:
        return Manifest(
            root=root,
            name=str(doc["name"]),
            created=str(doc["created"]),
            channels=tuple(doc["channels"]),
            sfreq_hz=int(doc["sfreq_hz"]),
            recordings=tuple(recordings),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DatasetError(path, f"bad or missing field {exc}") from exc


def _write_manifest(manifest: Manifest) -> None:
    path = manifest.root / MANIFEST_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- source layout


@dataclass(frozen=True)
class SourceRecording:
    """One recording of a source BIDS tree."""

    id: str
    subject: str
    session: str
    run: str
    eeg_path: Path
    events_path: Path
    relative_dir: Path  # sub-XX/ses-YY/eeg

    @property
    def output_eeg(self) -> str:
        return (Path("eeg") / self.relative_dir / f"{self.id}_eeg.edf").as_posix()

    @property
    def output_annotations(self) -> str:
        return (Path("annotations") / self.relative_dir / f"{self.id}_events.tsv").as_posix()


def find_recordings(root: str | os.PathLike[str]) -> tuple[list[SourceRecording], list[Problem]]:
    """The recordings of a BIDS tree in the SzCORE layout, and files that do not fit it."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(root, "not a folder")
    found: list[SourceRecording] = []
    problems: list[Problem] = []
    seen: dict[str, Path] = {}
    for path in sorted(root.rglob("*_eeg.*")):
        if path.suffix.lower() not in EEG_EXTENSIONS or not path.is_file():
            continue  # BrainVision/EEGLAB side files (.eeg, .vmrk, .fdt), sidecars (.json)
        rel = path.relative_to(root)
        parts = rel.parts
        if (
            len(parts) != 4
            or not parts[0].startswith("sub-")
            or not parts[1].startswith("ses-")
            or parts[2] != "eeg"
        ):
            problems.append(Problem(path, "not in the layout sub-*/ses-*/eeg/<name>_eeg.<ext>"))
            continue
        stem = path.name[: -len("_eeg" + path.suffix)]
        entities = dict(re.findall(r"(sub|ses|task|acq|run)-([A-Za-z0-9]+)", stem))
        if f"sub-{entities.get('sub')}" != parts[0] or f"ses-{entities.get('ses')}" != parts[1]:
            problems.append(Problem(path, f"file name does not match its folders {parts[:2]}"))
            continue
        if stem in seen:
            problems.append(Problem(path, f"same recording as {seen[stem].name}"))
            continue
        seen[stem] = path
        events = path.with_name(f"{stem}_events.tsv")
        found.append(
            SourceRecording(
                id=stem,
                subject=parts[0],
                session=parts[1],
                run=f"run-{entities['run']}" if "run" in entities else "run-00",
                eeg_path=path,
                events_path=events,
                relative_dir=Path(*parts[:3]),
            )
        )
    for events in sorted(root.rglob("*_events.tsv")):
        stem = events.name[: -len("_events.tsv")]
        if stem not in seen:
            problems.append(Problem(events, "annotations without a recording"))
    return found, problems


# --------------------------------------------------------------------------- check


@dataclass(frozen=True)
class RecordingCheck:
    """What ``check_dataset`` found for one recording."""

    recording: SourceRecording
    info: SourceInfo | None
    problem: Problem | None
    n_seizures: int = 0


@dataclass(frozen=True)
class CheckReport:
    """The outcome of :func:`check_dataset`."""

    root: Path
    recordings: tuple[RecordingCheck, ...]
    problems: tuple[Problem, ...]  # every problem, layout ones included

    @property
    def ok(self) -> bool:
        return not self.problems and bool(self.recordings)

    @property
    def n_importable(self) -> int:
        return sum(1 for r in self.recordings if r.problem is None)


def _check_one(rec: SourceRecording, allow_flat_fill: bool) -> tuple[SourceInfo, Any]:
    """Header and annotation checks of one recording; raises EEGError or AnnotationError."""
    info = inspect_recording(rec.eeg_path, allow_flat_fill=allow_flat_fill)
    if not rec.events_path.is_file():
        raise EEGError(rec.events_path, "missing: every recording needs its _events.tsv")
    ann = read_annotations(rec.events_path)
    if abs(ann.recording_duration_s - info.duration_s) > DURATION_TOLERANCE_S:
        raise EEGError(
            rec.events_path,
            f"recordingDuration is {ann.recording_duration_s:g} s but the recording "
            f"{rec.eeg_path.name} lasts {info.duration_s:g} s",
        )
    return info, ann


def _problem(exc: Exception) -> Problem:
    if isinstance(exc, AnnotationError):
        where = exc.path if exc.row is None else f"{exc.path} (line {exc.row})"
        return Problem(Path(where), exc.reason)
    if isinstance(exc, EEGError):
        return Problem(exc.path, exc.reason)
    filename = getattr(exc, "filename", None)
    return Problem(Path(filename or "?"), f"{type(exc).__name__}: {exc}")


def check_dataset(
    path: str | os.PathLike[str],
    *,
    allow_flat_fill: bool = False,
    progress: Progress | None = None,
) -> CheckReport:
    """Check a source dataset without writing anything.

    Reads every recording's header (not its samples) and every annotation file with the
    scorer's parser, and reports each problem with the file and what is wrong.
    """
    root = Path(path)
    found, problems = find_recordings(root)
    if not found:
        problems.append(Problem(root, "no recordings (sub-*/ses-*/eeg/*_eeg.edf|bdf|vhdr|set)"))
    checks = []
    for i, rec in enumerate(found):
        if progress is not None:
            progress(i, len(found), rec.id)
        try:
            info, ann = _check_one(rec, allow_flat_fill)
            checks.append(RecordingCheck(rec, info, None, ann.n_events))
        except (EEGError, AnnotationError, OSError) as exc:
            problem = _problem(exc)
            problems.append(problem)
            checks.append(RecordingCheck(rec, None, problem))
    if progress is not None:
        progress(len(found), len(found), "")
    return CheckReport(root=root, recordings=tuple(checks), problems=tuple(problems))


# --------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class PrepareReport:
    """The outcome of :func:`prepare_dataset`."""

    manifest: Manifest
    imported: tuple[str, ...]  # ids standardised in this run
    reused: tuple[str, ...]  # ids already prepared from an identical source
    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems


def prepare_dataset(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    allow_flat_fill: bool = False,
    name: str | None = None,
    progress: Progress | None = None,
) -> PrepareReport:
    """Standardise a source dataset into ``out`` (layout in the module docstring).

    Each recording is checked (header, annotations with the scorer's parser, recording length
    against the annotations' ``recordingDuration``), standardised with
    :func:`~szbench_worker.eeg.standardise.standardise_recording`, and its annotations written
    again with ``recordingDuration`` equal to the standardised length (events clipped to it). A
    recording that fails is skipped and reported; the manifest is saved after every recording,
    so nothing imported is lost. Recordings already in ``out`` whose source checksum is
    unchanged are reused, not redone.
    """
    src, out = Path(src).resolve(), Path(out).resolve()
    if out == src or out.is_relative_to(src) or src.is_relative_to(out):
        raise DatasetError(out, f"the output must be outside the source {src} (and not hold it)")
    found, problems = find_recordings(src)
    if not found:
        raise DatasetError(src, "no recordings (sub-*/ses-*/eeg/*_eeg.edf|bdf|vhdr|set)")
    out.mkdir(parents=True, exist_ok=True)
    previous: dict[str, ManifestRecording] = {}
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    if (out / MANIFEST_NAME).exists():
        old = load_manifest(out)
        previous = {r.id: r for r in old.recordings}
        created = old.created
    manifest = Manifest(
        root=out,
        name=name or src.name,
        created=created,
        channels=OUTPUT_LABELS,
        sfreq_hz=TARGET_SFREQ_HZ,
        recordings=tuple(previous.values()),
    )
    entries = dict(previous)
    imported: list[str] = []
    reused: list[str] = []
    for i, rec in enumerate(found):
        if progress is not None:
            progress(i, len(found), rec.id)
        try:
            old_entry = previous.get(rec.id)
            source_checksum = file_checksum(rec.eeg_path)
            if (
                old_entry is not None
                and old_entry.source_checksum == source_checksum
                and (out / old_entry.eeg_path).is_file()
                and (out / old_entry.annotations_path).is_file()
            ):
                reused.append(rec.id)
                continue
            entries[rec.id] = _prepare_one(rec, out, allow_flat_fill, source_checksum)
            imported.append(rec.id)
        except (EEGError, AnnotationError, OSError) as exc:
            problems.append(_problem(exc))
            continue
        manifest = Manifest(
            root=out,
            name=manifest.name,
            created=created,
            channels=OUTPUT_LABELS,
            sfreq_hz=TARGET_SFREQ_HZ,
            recordings=tuple(entries.values()),
        )
        _write_manifest(manifest)
    if progress is not None:
        progress(len(found), len(found), "")
    _write_manifest(manifest)
    return PrepareReport(
        manifest=load_manifest(out),
        imported=tuple(imported),
        reused=tuple(reused),
        problems=tuple(problems),
    )


def _prepare_one(
    rec: SourceRecording, out: Path, allow_flat_fill: bool, source_checksum: str
) -> ManifestRecording:
    info, ann = _check_one(rec, allow_flat_fill)
    eeg_out = out / rec.output_eeg
    std = standardise_recording(
        rec.eeg_path,
        eeg_out,
        allow_flat_fill=allow_flat_fill,
        info=info,
        source_checksum=source_checksum,
    )
    # Algorithms see the standardised length and the scorer requires the hypothesis'
    # recordingDuration to equal the reference's, so the reference is rewritten to it.
    events = np.asarray(ann.events, dtype=float).reshape(-1, 2)
    keep = events[:, 0] < std.duration_s
    events = np.minimum(events[keep], std.duration_s)
    ann_out = out / rec.output_annotations
    tmp = ann_out.with_name(ann_out.name + ".tmp")
    write_annotations(
        tmp,
        events,
        std.duration_s,
        event_types=[str(t) for t in np.asarray(ann.event_types)[keep]],
        date_time=std.start.strftime("%Y-%m-%d %H:%M:%S"),
        decimals=3,  # millisecond times; avoids float noise such as 101.49999999999994
    )
    os.replace(tmp, ann_out)
    return ManifestRecording(
        id=rec.id,
        subject=rec.subject,
        session=rec.session,
        run=rec.run,
        eeg_path=rec.output_eeg,
        annotations_path=rec.output_annotations,
        duration_s=std.duration_s,
        source_sfreq_hz=std.source_sfreq_hz,
        source_checksum=std.source_checksum,
        checksum=std.checksum,
        flags=std.flags,
    )
