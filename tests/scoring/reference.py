"""The SzCORE reference (epilepsy2bids 0.0.7 + timescoring 0.0.7), as szcore-evaluation calls it.

Test-only helpers: they turn annotation text or files into the reference's masks and scores,
exactly as ``szcore_evaluation.evaluate.evaluate_dataset`` does for one recording.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from epilepsy2bids.annotations import Annotations as E2BAnnotations
from epilepsy2bids.annotations import EventType
from timescoring import scoring as ts
from timescoring.annotations import Annotation

FS = 1


@dataclass(frozen=True)
class RefCounts:
    sample: tuple[int, int, int, int]  # tp, fp, ref_true, num_samples
    event: tuple[int, int, int, int]


def _mask(ann: E2BAnnotations) -> Annotation:
    return Annotation(ann.getMask(FS), FS)


def rows_to_e2b(rows: list[tuple[float, float, str, float]]) -> E2BAnnotations:
    """Build the reference's annotation object from parsed rows (what ``loadTsv`` yields)."""
    ann = E2BAnnotations()
    for onset, duration, event_type, rec_dur in rows:
        ann.events.append(
            {
                "onset": onset,
                "duration": duration,
                "eventType": EventType[event_type],
                "confidence": "n/a",
                "channels": "n/a",
                "dateTime": "n/a",
                "recordingDuration": rec_dur,
            }
        )
    return ann


def score_reference(ref: E2BAnnotations, hyp: E2BAnnotations | None) -> RefCounts:
    r = _mask(ref)
    h = _mask(hyp) if hyp is not None else Annotation(r.mask.copy() * 0, FS)
    s = ts.SampleScoring(r, h)
    e = ts.EventScoring(r, h)
    return RefCounts(
        (int(s.tp), int(s.fp), int(s.refTrue), int(s.numSamples)),
        (int(e.tp), int(e.fp), int(e.refTrue), int(e.numSamples)),
    )


def score_reference_files(ref_path: Path, hyp_path: Path) -> RefCounts:
    """Read both TSVs with pandas (epilepsy2bids' ``loadTsv``) and score them."""
    return score_reference(E2BAnnotations.loadTsv(ref_path), E2BAnnotations.loadTsv(hyp_path))
