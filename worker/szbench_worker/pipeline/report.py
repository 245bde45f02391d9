"""The scorer's dataset report as rows: one per subject, one per dataset, written once."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from sqlalchemy.orm import Session

from szbench.models import DatasetResult, Evaluation, SubjectResult
from szbench_scoring import RecordingScore
from szbench_scoring.report import DatasetReport
from szbench_worker.pipeline.rows import insert_ignoring_conflicts, now


def _num(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _metric_columns(event: Any, sample: Any) -> dict[str, float | None]:
    return {
        "event_sensitivity": _num(event.sensitivity),
        "event_precision": _num(event.precision),
        "event_f1": _num(event.f1),
        "event_fp_rate": _num(event.fp_rate),
        "sample_sensitivity": _num(sample.sensitivity),
        "sample_precision": _num(sample.precision),
        "sample_f1": _num(sample.f1),
        "sample_fp_rate": _num(sample.fp_rate),
    }


def _counts_dict(score: RecordingScore) -> dict[str, dict[str, int]]:
    return {
        kind: {
            "tp": c.tp,
            "fp": c.fp,
            "fn": c.fn,
            "ref_true": c.ref_true,
            "num_samples": c.num_samples,
            "fs_hz": c.fs_hz,
        }
        for kind, c in (("event", score.event), ("sample", score.sample))
    }


def report_dict(report: DatasetReport, *, scorer_version: str) -> dict[str, Any]:
    """The whole report as stored in ``DatasetResult.report``.

    Top level: szcore-evaluation's ``sample_results``/``event_results`` (per-subject mean
    and ``*_std``), then ``pooled`` (the ratios of the summed counts), the summed counts,
    the parameters and the scorer version.
    """
    return {
        **report.to_szcore_json(),
        "pooled": report.to_szcore_json(pooled=True),
        "pooled_counts": _counts_dict(report.pooled),
        "params": dataclasses.asdict(report.params),
        "scorer_version": scorer_version,
        "subjects": len(report.subjects),
        "recordings": len(report.recordings),
        "missing_hypotheses": report.n_missing,
    }


def store_report(session: Session, evaluation: Evaluation, report: DatasetReport) -> None:
    """The evaluation's SubjectResult and DatasetResult rows (each at most once)."""
    for subject in report.subjects:
        session.execute(
            insert_ignoring_conflicts(session, SubjectResult.__table__)
            .values(
                evaluation_id=evaluation.id,
                subject=subject.subject,
                recordings=subject.n_recordings,
                counts={
                    **_counts_dict(subject.counts),
                    "missing_hypotheses": subject.n_missing,
                },
                **_metric_columns(subject.event, subject.sample),
            )
            .on_conflict_do_nothing(index_elements=["evaluation_id", "subject"])
        )
    session.execute(
        insert_ignoring_conflicts(session, DatasetResult.__table__)
        .values(
            evaluation_id=evaluation.id,
            subjects=len(report.subjects),
            recordings=len(report.recordings),
            missing_hypotheses=report.n_missing,
            report=report_dict(report, scorer_version=evaluation.scorer_version),
            created_at=now(session),
            **_metric_columns(report.event_mean, report.sample_mean),
        )
        .on_conflict_do_nothing(index_elements=["evaluation_id"])
    )
