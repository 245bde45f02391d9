"""SzCORE seizure-detection scoring on sorted interval arrays (numpy only).

Reads and writes SzCORE annotation TSVs, scores hypotheses against references exactly as
szcore-evaluation 0.0.7 over timescoring 0.0.7 (sample and event scoring), and aggregates the
counts per subject and per dataset. See ``docs/scoring.md``.

Examples
--------
>>> from szbench_scoring import score_events
>>> s = score_events([(100, 160)], [(140, 150), (900, 905)], recording_duration_s=3600)
>>> s.event.tp, s.event.fp, s.event.metrics.f1
(1, 1, 0.6666666666666666)
"""

from szbench_scoring.annotations import (
    BACKGROUND,
    EVENT_TYPES,
    SEIZURE_TYPES,
    AnnotationError,
    Annotations,
    format_annotations,
    parse_annotations,
    read_annotations,
    read_many,
    write_annotations,
)
from szbench_scoring.dataset import DatasetLayoutError, find_recordings, score_dataset
from szbench_scoring.report import DatasetReport, RecordingResult, SubjectResult, aggregate
from szbench_scoring.scoring import (
    Counts,
    Metrics,
    RecordingScore,
    ScoringParams,
    score_events,
    score_many,
    score_recording,
)

#: Changes whenever a number the scorer produces could change; results are cached per version.
SCORER_VERSION = "szbench-scoring 1.0 (SzCORE: szcore-evaluation 0.0.7 / timescoring 0.0.7)"

__all__ = [
    "BACKGROUND",
    "EVENT_TYPES",
    "SCORER_VERSION",
    "SEIZURE_TYPES",
    "AnnotationError",
    "Annotations",
    "Counts",
    "DatasetLayoutError",
    "DatasetReport",
    "Metrics",
    "RecordingResult",
    "RecordingScore",
    "ScoringParams",
    "SubjectResult",
    "aggregate",
    "find_recordings",
    "format_annotations",
    "parse_annotations",
    "read_annotations",
    "read_many",
    "score_dataset",
    "score_events",
    "score_many",
    "score_recording",
    "write_annotations",
]
