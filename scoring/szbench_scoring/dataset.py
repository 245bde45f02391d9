"""Scoring of a whole reference/hypothesis folder pair (szcore-evaluation's layout)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from szbench_scoring._batch_parse import ParsedBatch, parse_batch
from szbench_scoring.annotations import AnnotationError
from szbench_scoring.report import DatasetReport, RecordingResult, aggregate
from szbench_scoring.scoring import ScoringParams, score_batch

__all__ = ["DatasetLayoutError", "find_recordings", "score_dataset"]

# Files are read and scored in batches of about this many bytes: large enough to amortise
# numpy's per-call cost over many small files, small enough to bound memory.
_BATCH_BYTES = 4 << 20


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
    prefix = len(os.path.join(root, ""))
    for s in subjects:
        for path in _walk(os.path.join(root, s), pattern):
            rel = path[prefix:]
            rec_id = rel if os.sep == "/" else rel.replace(os.sep, "/")
            recordings.append(RecordingFiles(s, rec_id, path, os.path.join(hyp_root, rel)))
    return subjects, recordings


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
    batch = _Batch()
    for rec in recordings:
        batch.add(rec)
        if batch.size >= _BATCH_BYTES:
            results += batch.score(p, strict)
            batch = _Batch()
    if batch.files:
        results += batch.score(p, strict)
    return aggregate(results, subjects=subjects, params=p)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        # Ask for the size (+1 to see the end): asking for much more than the file makes
        # Python allocate, then shrink, a buffer that large, which costs more than the read.
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class _Batch:
    """Recordings read but not yet scored (their text is parsed and scored together)."""

    def __init__(self) -> None:
        self.files: list[RecordingFiles] = []
        self.texts: list[tuple[bytes, str]] = []  # references, then hypotheses
        self.hyp_texts: list[tuple[bytes, str]] = []
        self.hyp_of: list[int] = []  # index in hyp_texts, -1 when missing
        self.errors: dict[tuple[int, int], AnnotationError] = {}
        self.size = 0

    def add(self, rec: RecordingFiles) -> None:
        i = len(self.files)
        self.files.append(rec)
        # Unreadable files become errors of their recording; a missing hypothesis is no
        # detection.
        try:
            data = _read(rec.ref_path)
        except OSError as e:
            data = b""
            self.errors[(0, i)] = AnnotationError(rec.ref_path, None, f"cannot read: {e}")
        self.texts.append((data, rec.ref_path))
        self.size += len(data)
        try:
            data = _read(rec.hyp_path)
        except FileNotFoundError:
            self.hyp_of.append(-1)
            return
        except OSError as e:
            data = b""
            self.errors[(1, i)] = AnnotationError(rec.hyp_path, None, f"cannot read: {e}")
        self.hyp_of.append(len(self.hyp_texts))
        self.hyp_texts.append((data, rec.hyp_path))
        self.size += len(data)

    def score(self, params: ScoringParams, strict: bool) -> list[RecordingResult]:
        n = len(self.files)
        parsed = parse_batch(self.texts + self.hyp_texts)
        fs = params.mask_fs_hz
        hyp_file = np.asarray(self.hyp_of, dtype=np.int64)
        has_hyp = hyp_file >= 0
        hyp_file = np.where(has_hyp, hyp_file + n, -1)
        # int(recordingDuration * fs): NaN (a file with an error) becomes -1, never used.
        dur = np.nan_to_num(parsed.durations * fs, nan=-1.0)
        n_mask_file = np.floor(dur).astype(np.int64)
        n_ref = n_mask_file[:n]
        n_hyp = np.where(has_hyp, n_mask_file[np.maximum(hyp_file, 0)], n_ref)

        out: list[RecordingResult | None] = [None] * n
        errors = parsed.errors
        scored: list[int] = []
        for i, rec in enumerate(self.files):
            missing = not has_hyp[i]
            err = self.errors.get((0, i)) or errors[i]
            if err is None and not missing:
                err = self.errors.get((1, i)) or errors[hyp_file[i]]
            if err is None:
                err = _duration_error(parsed, i, int(hyp_file[i]), int(n_ref[i]), int(n_hyp[i]), fs)
            if err is not None:
                out[i] = RecordingResult(rec.subject, rec.recording, None, err, missing)
            else:
                scored.append(i)

        # Events of the scored recordings, numbered 0..len(scored)-1, from the parsed arrays:
        # the references are files 0..n-1, so their events come first.
        idx = np.asarray(scored, dtype=np.int64)
        split = int(parsed.bounds[n])
        rec_of_ref = np.full(n, -1, dtype=np.int64)
        rec_of_ref[idx] = np.arange(idx.shape[0])
        ref_rec = rec_of_ref[parsed.file[:split]]
        rec_of_hyp = np.full(len(errors) - n + 1, -1, dtype=np.int64)
        with_hyp = has_hyp[idx]
        rec_of_hyp[hyp_file[idx][with_hyp] - n] = np.flatnonzero(with_hyp)
        hyp_rec = rec_of_hyp[parsed.file[split:] - n]
        ref_ev, hyp_ev = parsed.events[:split], parsed.events[split:]
        if idx.shape[0] < n:
            keep_ref, keep_hyp = ref_rec >= 0, hyp_rec >= 0
            ref_ev, ref_rec = ref_ev[keep_ref], ref_rec[keep_ref]
            hyp_ev, hyp_rec = hyp_ev[keep_hyp], hyp_rec[keep_hyp]
        scores = score_batch(ref_ev, ref_rec, hyp_ev, hyp_rec, n_ref[idx], params)
        for i, score in zip(scored, scores, strict=True):
            rec = self.files[i]
            out[i] = RecordingResult(rec.subject, rec.recording, score, None, not has_hyp[i])
        results = [r for r in out if r is not None]
        if strict:
            for r in results:
                if r.error is not None:
                    raise r.error
        return results


def _duration_error(
    parsed: ParsedBatch, ref: int, hyp: int, n_ref: int, n_hyp: int, fs: int
) -> AnnotationError | None:
    """The same checks as :func:`score_many`, on parsed arrays."""
    ref_dur = float(parsed.durations[ref])
    if n_ref <= 0:
        return AnnotationError(
            parsed.sources[ref],
            None,
            f"recordingDuration {ref_dur} s is shorter than one mask sample at {fs} Hz",
        )
    if hyp >= 0 and n_hyp != n_ref:
        return AnnotationError(
            parsed.sources[hyp],
            None,
            f"recordingDuration {float(parsed.durations[hyp])} s does not match the "
            f"reference's {ref_dur} s ({n_hyp} vs {n_ref} samples at {fs} Hz)",
        )
    return None
