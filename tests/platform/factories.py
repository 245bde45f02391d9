"""Test data: plain functions that add rows to a session and flush."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from szbench import changes
from szbench.auth import service as auth
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    ApiToken,
    Dataset,
    DatasetKind,
    DatasetResult,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    Recording,
    RecordingRun,
    Role,
    RunOutcome,
    SubjectResult,
    User,
    VersionStatus,
    Visibility,
)

_seq = itertools.count(1)


def n() -> int:
    return next(_seq)


def user(session: Session, role: Role = Role.RESEARCHER, **kw: Any) -> User:
    kw.setdefault("email", f"user{n()}@example.org")
    kw.setdefault("name", kw["email"].split("@")[0])
    return auth.create_user(session, role=role, password=kw.pop("password", None), **kw)


def token(session: Session, owner: User, scopes: list[str] | None = None) -> tuple[ApiToken, str]:
    return auth.create_token(session, owner, name="test", scopes=scopes)


def headers(session: Session, owner: User, scopes: list[str] | None = None) -> dict[str, str]:
    _, secret = token(session, owner, scopes)
    return {"Authorization": f"Bearer {secret}"}


def phase(session: Session, **kw: Any) -> Phase:
    kw.setdefault("slug", f"phase-{n()}")
    row = Phase(**kw)
    session.add(row)
    session.flush()
    return row


def algorithm(session: Session, owner: User, **kw: Any) -> Algorithm:
    kw.setdefault("name", f"algo-{n()}")
    kw.setdefault("title", kw["name"].title())
    kw.setdefault("visibility", Visibility.PUBLIC)
    row = Algorithm(owner_id=owner.id, **kw)
    session.add(row)
    session.flush()
    return row


def version(session: Session, algo: Algorithm, **kw: Any) -> AlgorithmVersion:
    i = n()
    kw.setdefault("version", f"1.{i}")
    kw.setdefault("image_digest", f"sha256:{i:064x}")
    kw.setdefault("status", VersionStatus.ACTIVE)
    row = AlgorithmVersion(algorithm_id=algo.id, created_by_id=algo.owner_id, **kw)
    session.add(row)
    session.flush()
    return row


def dataset(session: Session, kind: DatasetKind = DatasetKind.HELD_OUT, **kw: Any) -> Dataset:
    kw.setdefault("slug", f"ds-{n()}")
    row = Dataset(kind=kind, **kw)
    session.add(row)
    session.flush()
    return row


def dataset_version(
    session: Session, ds: Dataset, path: str = "/nonexistent", **kw: Any
) -> DatasetVersion:
    kw.setdefault("version", f"v{n()}")
    row = DatasetVersion(dataset_id=ds.id, path=path, **kw)
    session.add(row)
    session.flush()
    return row


def recording(session: Session, dv: DatasetVersion, subject: str = "01", **kw: Any) -> Recording:
    i = n()
    kw.setdefault("key", f"sub-{subject}_ses-01_task-szMonitoring_run-{i:02d}")
    kw.setdefault("duration_s", 3600.0)
    kw.setdefault("checksum", f"{i:064x}")
    kw.setdefault("eeg_path", f"eeg/{kw['key']}.edf")
    kw.setdefault("annotations_path", f"annotations/{kw['key']}_events.tsv")
    row = Recording(dataset_version_id=dv.id, subject=subject, **kw)
    session.add(row)
    session.flush()
    return row


def evaluation(
    session: Session,
    av: AlgorithmVersion,
    dv: DatasetVersion,
    *,
    status: EvaluationStatus = EvaluationStatus.DONE,
    kind: EvaluationKind = EvaluationKind.FULL,
    **kw: Any,
) -> Evaluation:
    kw.setdefault("scorer_version", "0.1.0")
    kw.setdefault("recordings_total", 2)
    kw.setdefault("recordings_done", 2 if status == EvaluationStatus.DONE else 0)
    if status.finished:
        kw.setdefault("finished_at", datetime.now(UTC))
    row = Evaluation(
        algorithm_version_id=av.id,
        dataset_version_id=dv.id,
        image_digest=av.image_digest or "",
        status=status,
        kind=kind,
        **kw,
    )
    session.add(row)
    session.flush()
    # As the pipeline does when an evaluation finishes (szbench.changes).
    changes.evaluations_changed(session, [row.id])
    return row


def run(
    session: Session,
    ev: Evaluation,
    rec: Recording,
    outcome: RunOutcome | None = RunOutcome.OK,
    **kw: Any,
) -> RecordingRun:
    kw.setdefault("submitter_message", "ok")
    kw.setdefault("admin_log", "container log: secret host details")
    kw.setdefault("worker_host", "worker-1")
    kw.setdefault("wall_time_s", 12.5)
    kw.setdefault("peak_memory_bytes", 10**8)
    row = RecordingRun(
        evaluation_id=ev.id,
        recording_id=rec.id,
        image_digest=ev.image_digest,
        recording_checksum=rec.checksum,
        scorer_version=ev.scorer_version,
        outcome=outcome,
        **kw,
    )
    session.add(row)
    session.flush()
    return row


def result(
    session: Session,
    ev: Evaluation,
    subjects: dict[str, dict[str, float | None]],
    **kw: Any,
) -> DatasetResult:
    """Subject results from ``{subject: {metric: value}}`` and their means as the dataset result."""
    for subject, metrics in subjects.items():
        session.add(SubjectResult(evaluation_id=ev.id, subject=subject, recordings=1, **metrics))
    means: dict[str, float | None] = {}
    for metric in ("event_f1", "event_sensitivity", "event_precision", "event_fp_rate"):
        values = [m[metric] for m in subjects.values() if m.get(metric) is not None]
        means[metric] = sum(values) / len(values) if values else None  # type: ignore[arg-type]
    means.update(kw.pop("metrics", {}))
    row = DatasetResult(
        evaluation_id=ev.id, subjects=len(subjects), recordings=len(subjects), **means, **kw
    )
    session.add(row)
    session.flush()
    changes.evaluations_changed(session, [ev.id])
    return row
