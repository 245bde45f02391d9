"""Bodies of the evaluation and result routes, provenance included."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from szbench.disclosure.decision import Release
from szbench.models import EvaluationKind, EvaluationStatus, RunOutcome


class Provenance(BaseModel):
    """Where a result comes from: enough to reproduce it."""

    image_digest: str
    dataset: str
    dataset_version: str
    scorer_version: str
    scoring_params: dict[str, Any]
    official: bool
    worker_hosts: list[str] = Field(
        default_factory=list, description="The hosts that ran it; for admins only (empty)."
    )
    gpu_models: list[str] = Field(
        default_factory=list,
        description="GPU models of its runs; on held-out data, for non-admins, once it is "
        "over (they appear as runs are stored).",
    )
    gpu_drivers: list[str] = Field(
        default_factory=list, description="GPU drivers of its runs; as gpu_models."
    )
    wall_time_s: float | None = Field(default=None, description="Sum over the runs.")
    peak_memory_bytes: int | None = Field(default=None, description="Largest over the runs.")


class RunProvenance(BaseModel):
    image_digest: str
    recording_checksum: str | None = Field(
        description="The recording's sha256; on held-out data for admins only (null)."
    )
    scorer_version: str
    worker_host: str | None = Field(description="The host that ran it; for admins only (null).")
    gpu_model: str | None
    gpu_driver: str | None
    wall_time_s: float | None
    peak_memory_bytes: int | None
    started_at: datetime | None
    finished_at: datetime | None
    reused_from_id: int | None


class Progress(BaseModel):
    status: EvaluationStatus
    state: str = Field(
        description="The status, except 'scoring' for a running evaluation whose every "
        "recording has finished (its results are being computed; it can no longer be cancelled)."
    )
    detail: str = Field(
        default="full",
        description="'full': the figures as they stand. 'coarse' (held-out data, "
        "non-admins): recordings_done and fraction_done in steps of "
        "1/SZBENCH_PROGRESS_FRACTION_STEPS as they stood at as_of, the last tick of a clock "
        "of SZBENCH_PROGRESS_STEP_S seconds; no per-recording time (docs/security.md).",
    )
    recordings_done: int = Field(
        description="Recordings run; for a coarse view the least the shown step allows, as "
        "of as_of."
    )
    recordings_done_at_most: int | None = Field(
        default=None,
        description="Coarse view of a running evaluation: the most recordings that may have "
        "run by as_of (recordings_done to this); null otherwise.",
    )
    recordings_total: int
    fraction_done: float = Field(default=0.0, description="recordings_done / recordings_total.")
    as_of: datetime | None = Field(
        default=None,
        description="The moment a coarse answer about a running evaluation describes (the "
        "progress clock's last tick); null when 'full' or finished.",
    )
    next_update_at: datetime | None = Field(
        default=None,
        description="Coarse view of a running evaluation: the next tick, when this answer "
        "next moves (nothing in it moves before, except the end); null otherwise.",
    )
    outcomes: dict[str, int] = Field(
        description="Finished runs by outcome. Where per-recording results are not disclosed "
        "(held-out data below the 'recording' level, non-admins): empty while the evaluation "
        "runs, then only 'ok' and 'failed' counts."
    )
    failed_recordings: int | None = Field(
        default=None,
        description="Recordings that crashed, timed out, ran out of memory or wrote no or "
        "invalid output. Where per-recording results are not disclosed: null until the "
        "evaluation is over.",
    )
    complete: bool | None = Field(
        default=None,
        description="Finished with no failed recording. False: not a normal result (see the "
        "leaderboard's failed_recordings rule); null while running.",
    )
    estimated_remaining_s: float | None = Field(
        default=None,
        description="An estimate, not a promise, of the seconds left in an unfinished "
        "evaluation (for a coarse view: from as_of; for one not shown started: the whole "
        "run); estimate_basis says what it rests on.",
    )
    estimated_finish_at: datetime | None = Field(
        default=None,
        description="When the estimate says it will finish (for a coarse view: rounded up to "
        "the progress clock; null while it is not shown started).",
    )
    estimate_basis: str | None = None
    held_by: str | None = Field(
        default=None,
        description="While a platform fault holds this unfinished evaluation (the task queue "
        "unreachable, no worker for its queue, or its workers unable to run containers), a "
        "sentence saying which; null otherwise.",
    )


class EvaluationOut(BaseModel):
    id: int
    kind: EvaluationKind
    status: EvaluationStatus
    algorithm_id: int
    algorithm: str
    algorithm_version_id: int
    algorithm_version: str
    dataset: str
    dataset_version: str
    dataset_version_id: int
    official: bool
    published: bool
    queue: str
    message: str
    recordings_done: int
    recordings_total: int
    source_evaluation_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EvaluationDetail(EvaluationOut):
    progress: Progress
    provenance: Provenance


class EvaluationCreate(BaseModel):
    algorithm_version_id: int = Field(ge=1, le=2**31 - 1)
    dataset: str = Field(max_length=100, description="Dataset slug.")
    version: str | None = Field(default=None, max_length=100, description="Default: newest active.")


class RescoreIn(BaseModel):
    scoring_params: dict[str, Any] = Field(
        description="Scorer parameters (see the scorer's ScoringParams); defaults are official."
    )


class Metrics(BaseModel):
    event_sensitivity: float | None
    event_precision: float | None
    event_f1: float | None
    event_fp_rate: float | None
    sample_sensitivity: float | None
    sample_precision: float | None
    sample_f1: float | None
    sample_fp_rate: float | None


RELEASE_DESCRIPTION = (
    "How these figures are released to the caller: exact; rounded (held-out data disclosed "
    "at the aggregate level: the leaderboard's figures at a fixed precision, the others null, "
    "no raw counts); or ladder (an open phase that releases by the Ladder: only the "
    "submitter's ladder score as event_f1, the others null). See docs/security.md."
)


class DatasetResultOut(Metrics):
    evaluation_id: int
    subjects: int
    recordings: int
    missing_hypotheses: int
    release: Release = Field(description=RELEASE_DESCRIPTION)
    report: dict[str, Any] = Field(
        description="The scorer's report as released: exact, it has the per-subject means "
        "and *_std (the std only where intervals are disclosed), pooled ratios and counts; "
        "rounded, the released figures (and their *_std where intervals are disclosed); "
        "always the scorer's parameters."
    )
    provenance: Provenance


class SubjectResultOut(Metrics):
    subject: str
    recordings: int
    counts: dict[str, Any]


class SubjectResultsPage(BaseModel):
    items: list[SubjectResultOut]
    total: int
    limit: int
    offset: int
    provenance: Provenance


class RunOut(BaseModel):
    id: int
    recording_id: int
    recording: str
    subject: str
    outcome: RunOutcome | None
    exit_code: int | None = Field(
        description="Admins, and the owner of a public-sample run; null for everyone else."
    )
    submitter_message: str = Field(
        description="The detailed reason for admins and for the owner of a public-sample run; "
        "for everyone else a fixed text per outcome (nothing a held-out run wrote or did)."
    )
    admin_log: str | None = Field(default=None, description="Admins only.")
    log: str | None = Field(
        default=None,
        description="The tail of what the container wrote to stdout/stderr: admins, and the "
        "owner of a public-sample run (the smoke test); null for everyone else and on "
        "held-out data, where a run's output could carry the data out.",
    )
    attempts: int
    event_tp: int | None
    event_fp: int | None
    event_fn: int | None
    event_ref_true: int | None
    sample_tp: int | None
    sample_fp: int | None
    sample_fn: int | None
    sample_ref_true: int | None
    num_samples: int | None
    has_detections: bool
    provenance: RunProvenance


class PublishedOut(BaseModel):
    id: int
    published: bool
