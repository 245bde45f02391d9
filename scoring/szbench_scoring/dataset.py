"""Scoring of a whole reference/hypothesis folder pair (szcore-evaluation's layout)."""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from szbench_scoring.annotations import AnnotationError, Annotations, _parse_many
from szbench_scoring.report import DatasetReport, RecordingResult, aggregate
from szbench_scoring.scoring import ScoringParams, score_many

__all__ = ["DatasetLayoutError", "find_recordings", "score_dataset"]

# Files are read and scored in batches of about this many bytes: large enough to amortise
# numpy's per-call cost over many small files, small enough to bound memory.
_BATCH_BYTES = 8 << 20


class DatasetLayoutError(ValueError):
    """The reference folder cannot be scored at all (missing, or no ``sub-*`` folder).

    Examples
    --------
    >>> score_dataset("/nonexistent/ref", "/nonexistent/hyp")
    Traceback (most recent call last):
    ...
    szbench_scoring.dataset.DatasetLayoutError: reference folder not found: /nonexistent/ref
    """


@dataclass(frozen=True)
class RecordingFiles:
    """The files of one recording: ``recording`` is the reference path relative to its root."""

    subject: str
    recording: str
    ref_path: str
    hyp_path: str


def _walk(root: str, pattern: str) -> Iterator[str]:
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.is_dir(follow_symlinks=True):
            yield from _walk(e.path, pattern)
        elif fnmatch.fnmatchcase(e.name, pattern):
            yield e.path


def find_recordings(
    ref_dir: str | os.PathLike[str],
    hyp_dir: str | os.PathLike[str],
    pattern: str = "*.tsv",
) -> tuple[list[str], list[RecordingFiles]]:
    """List the subjects and recordings of a reference tree.

    Subjects are the ``sub-*`` folders directly under ``ref_dir``; recordings are the files
    matching ``pattern`` anywhere below a subject (szcore-evaluation: ``sub-*/**/*.tsv``).
    The hypothesis of a recording is the same relative path under ``hyp_dir``.

    Parameters
    ----------
    ref_dir, hyp_dir : path-like
        Reference and hypothesis roots.
    pattern : str
        File name pattern of annotation files.

    Returns
    -------
    subjects : list of str
        Sorted subject ids, including subjects without any file.
    recordings : list of RecordingFiles
        Sorted by subject then path.

    Raises
    ------
    DatasetLayoutError
        When ``ref_dir`` is not a folder or holds no ``sub-*`` folder.
    """
    root = os.fspath(ref_dir)
    if not os.path.isdir(root):
        raise DatasetLayoutError(f"reference folder not found: {root}")
    hyp_root = os.fspath(hyp_dir)
    subjects = sorted(
        e.name
        for e in os.scandir(root)
        if e.name.startswith("sub-") and e.is_dir(follow_symlinks=True)
    )
    if not subjects:
        raise DatasetLayoutError(f"no sub-* folder in the reference folder {root}")
    recordings: list[RecordingFiles] = []
    for s in subjects:
        for path in _walk(os.path.join(root, s), pattern):
            rel = os.path.relpath(path, root)
            recordings.append(
                RecordingFiles(s, Path(rel).as_posix(), path, os.path.join(hyp_root, rel))
            )
    return subjects, recordings


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def score_dataset(
    ref_dir: str | os.PathLike[str],
    hyp_dir: str | os.PathLike[str],
    params: ScoringParams | None = None,
    *,
    pattern: str = "*.tsv",
    strict: bool = False,
) -> DatasetReport:
    """Score every recording of a reference tree against a hypothesis tree.

    Parameters
    ----------
    ref_dir : path-like
        Reference root holding ``sub-*/**/<pattern>`` annotation files.
    hyp_dir : path-like
        Hypothesis root with the same relative paths. A missing hypothesis file counts as no
        detections and is counted in ``report.n_missing``; a missing ``hyp_dir`` makes every
        hypothesis missing.
    params : ScoringParams, optional
        SzCORE defaults when omitted.
    pattern : str
        File name pattern of annotation files (default ``*.tsv``, as szcore-evaluation).
    strict : bool
        False (default): a recording whose reference or hypothesis cannot be read, or whose
        hypothesis has another recordingDuration, is recorded as an error for that recording
        (``report.errors``; ``report.complete`` is False) and counts in no metric.
        True: the first such error is raised.

    Returns
    -------
    DatasetReport

    Raises
    ------
    DatasetLayoutError
        When ``ref_dir`` is missing or holds no ``sub-*`` folder.
    AnnotationError
        Only with ``strict=True``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from szbench_scoring import write_annotations
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> f = "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_events.tsv"
    >>> write_annotations(root / "ref" / f, [(100, 160)], 3600)
    >>> write_annotations(root / "hyp" / f, [(90, 120), (2000, 2005)], 3600)
    >>> rep = score_dataset(root / "ref", root / "hyp")
    >>> rep.to_szcore_json()["event_results"]["precision"]
    0.5
    """
    p = params or ScoringParams()
    subjects, recordings = find_recordings(ref_dir, hyp_dir, pattern)
    results: list[RecordingResult] = []
    batch: list[RecordingFiles] = []
    size = 0
    for rec in recordings:
        batch.append(rec)
        with contextlib.suppress(OSError):  # an unreadable file is reported when read
            size += os.path.getsize(rec.ref_path)
        if size >= _BATCH_BYTES:
            results += _score_batch(batch, p, strict)
            batch, size = [], 0
    if batch:
        results += _score_batch(batch, p, strict)
    return aggregate(results, subjects=subjects, params=p)


def _score_batch(
    batch: list[RecordingFiles], params: ScoringParams, strict: bool
) -> list[RecordingResult]:
    # Unreadable files become errors of their recording; a missing hypothesis is no detection.
    texts: list[tuple[bytes, str]] = []
    read_errors: dict[tuple[int, int], AnnotationError] = {}
    missing: list[bool] = []
    for i, rec in enumerate(batch):
        try:
            texts.append((_read(rec.ref_path), rec.ref_path))
        except OSError as e:
            texts.append((b"", rec.ref_path))
            read_errors[(0, i)] = AnnotationError(rec.ref_path, None, f"cannot read: {e}")
    hyp_texts: list[tuple[bytes, str]] = []
    hyp_index: list[int] = []
    for i, rec in enumerate(batch):
        try:
            data = _read(rec.hyp_path)
        except FileNotFoundError:
            missing.append(True)
            continue
        except OSError as e:
            data = b""
            read_errors[(1, i)] = AnnotationError(rec.hyp_path, None, f"cannot read: {e}")
        missing.append(False)
        hyp_index.append(i)
        hyp_texts.append((data, rec.hyp_path))
    parsed = _parse_many(texts + hyp_texts)
    refs = [read_errors.get((0, i), r) for i, r in enumerate(parsed[: len(texts)])]
    hyps: list[Annotations | AnnotationError | None] = [None] * len(batch)
    for i, h in zip(hyp_index, parsed[len(texts) :], strict=True):
        hyps[i] = read_errors.get((1, i), h)
    out: list[RecordingResult | None] = [None] * len(batch)
    pairs: list[tuple[Annotations, Annotations | None]] = []
    pair_index: list[int] = []
    for i, (rec, ref, hyp) in enumerate(zip(batch, refs, hyps, strict=True)):
        err = ref if isinstance(ref, AnnotationError) else hyp
        if isinstance(err, AnnotationError):
            if strict:
                raise err
            out[i] = RecordingResult(rec.subject, rec.recording, None, err, missing[i])
            continue
        assert isinstance(ref, Annotations)
        assert not isinstance(hyp, AnnotationError)
        pairs.append((ref, hyp))
        pair_index.append(i)
    for i, res in zip(pair_index, score_many(pairs, params), strict=True):
        rec = batch[i]
        if isinstance(res, AnnotationError):
            if strict:
                raise res
            out[i] = RecordingResult(rec.subject, rec.recording, None, res, missing[i])
        else:
            out[i] = RecordingResult(rec.subject, rec.recording, res, None, missing[i])
    return [r for r in out if r is not None]
