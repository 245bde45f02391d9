"""Scoring one stored run against its recording's reference annotations.

Scoring happens here, in the worker, after the run: the container never sees the reference.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from szbench.models import DatasetVersion, Evaluation, Recording, RecordingRun, RunOutcome
from szbench_scoring import (
    AnnotationError,
    Annotations,
    RecordingScore,
    ScoringParams,
    parse_annotations,
    read_annotations,
    score_recording,
)
from szbench_worker.runner import CONTAINER_OUTPUT_DIR, output_name_for


def scoring_params(evaluation: Evaluation) -> ScoringParams:
    """The evaluation's scoring parameters (SzCORE's defaults when none are stored)."""
    known = {f.name for f in dataclasses.fields(ScoringParams)}
    return ScoringParams(
        **{k: v for k, v in (evaluation.scoring_params or {}).items() if k in known}
    )


def reference(dataset_version: DatasetVersion, recording: Recording) -> Annotations:
    """The recording's reference annotations, read from the dataset version's folder; on a
    host without that folder, the copy the database took at registration."""
    path = Path(dataset_version.path) / recording.annotations_path
    if recording.reference_tsv is not None and not path.exists():
        return parse_annotations(recording.reference_tsv, str(path))
    return read_annotations(path)


def hypothesis(run: RecordingRun, recording: Recording) -> Annotations | None:
    """The stored detections parsed again (None when the run produced none)."""
    if run.outcome != RunOutcome.OK or run.detections_tsv is None:
        return None
    name = output_name_for(Path(recording.eeg_path))
    return parse_annotations(run.detections_tsv, source=f"{CONTAINER_OUTPUT_DIR}/{name}")


def score_run(
    run: RecordingRun, recording: Recording, dataset_version: DatasetVersion, params: ScoringParams
) -> None:
    """Score the run's stored detections (no detections when it failed) and store counts.

    A hypothesis that the scorer refuses (its duration gives another mask length than the
    reference's) turns the run into INVALID_OUTPUT, with the scorer's reason.
    """
    ref = reference(dataset_version, recording)
    hyp = hypothesis(run, recording)
    try:
        score = score_recording(ref, hyp, params)
    except AnnotationError as exc:
        if hyp is None:
            raise
        run.outcome = RunOutcome.INVALID_OUTPUT
        run.submitter_message = f"{exc.path}: {exc.reason}"
        score = score_recording(ref, None, params)
    _store_counts(run, score)


def _store_counts(run: RecordingRun, score: RecordingScore) -> None:
    run.event_tp, run.event_fp = score.event.tp, score.event.fp
    run.event_fn, run.event_ref_true = score.event.fn, score.event.ref_true
    run.sample_tp, run.sample_fp = score.sample.tp, score.sample.fp
    run.sample_fn, run.sample_ref_true = score.sample.fn, score.sample.ref_true
    run.num_samples = score.sample.num_samples


def clear_counts(run: RecordingRun) -> None:
    """Forget a run's counts (a run that the platform failed has none)."""
    for name in ("event", "sample"):
        for count in ("tp", "fp", "fn", "ref_true"):
            setattr(run, f"{name}_{count}", None)
    run.num_samples = None
