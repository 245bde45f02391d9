"""Bodies of the phase routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import Disclosure, FailedRecordings, ReleaseRule

_OPENS = "Submissions are accepted from then on (ISO 8601; without an offset: UTC)."
_CLOSES = "The deadline: submissions are refused from then on (ISO 8601; without an offset: UTC)."
_DISCLOSURE = (
    "Overrides the disclosure of the dataset versions this phase names (dataset_versions) "
    "for evaluations of its versions (e.g. recording once the phase is over); null: each "
    "dataset's own level. Other data keeps its own level."
)
_FAILED = (
    "Overrides the rule of the dataset versions this phase names for evaluations with failed "
    "recordings: unranked (shown apart) or no_detections (scored as no detections, ranked); "
    "null: each dataset's own rule."
)
_RELEASE = (
    "How held-out scores on the dataset versions it names reach non-admins while the phase "
    "is open: exact, or ladder (Blum & Hardt's Ladder: a submitter's released event F1 "
    "changes only when a submission beats their best by ladder_step, rounded to it; the other "
    "figures wait until the phase closes). null: the default, ladder for a phase without a "
    "closing date (continuous), exact for one with a deadline. A closed phase releases exact "
    "scores."
)
_STEP = "The Ladder's step; null: SZBENCH_LADDER_STEP."
_NAMED = (
    "The dataset versions the phase's rules apply to, as {dataset, version}; evaluations of "
    "its versions on any other data follow that data's own rules."
)


class DatasetVersionRef(BaseModel):
    dataset: str = Field(max_length=100, description="Dataset slug.")
    version: str = Field(max_length=100)


class PhaseCreate(BaseModel):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")
    title: str = Field(default="", max_length=200)
    hidden: bool = Field(
        default=False, description="Results stay with their owners until published."
    )
    submission_quota: int | None = Field(default=None, ge=0, le=10**6)
    is_open: bool = True
    disclosure: Disclosure | None = Field(default=None, description=_DISCLOSURE)
    failed_recordings: FailedRecordings | None = Field(default=None, description=_FAILED)
    release_rule: ReleaseRule | None = Field(default=None, description=_RELEASE)
    ladder_step: float | None = Field(default=None, gt=0, le=0.5, description=_STEP)
    opens_at: datetime | None = Field(default=None, description=_OPENS)
    closes_at: datetime | None = Field(default=None, description=_CLOSES)
    dataset_versions: list[DatasetVersionRef] = Field(
        default_factory=list, max_length=100, description=_NAMED
    )


class PhaseUpdate(BaseModel):
    title: str | None = Field(default=None, max_length=200)
    hidden: bool | None = None
    submission_quota: int | None = Field(default=None, ge=0, le=10**6)
    is_open: bool | None = None
    disclosure: Disclosure | None = Field(
        default=None, description=_DISCLOSURE + " Send null explicitly to remove the override."
    )
    failed_recordings: FailedRecordings | None = Field(
        default=None, description=_FAILED + " Send null explicitly to remove the override."
    )
    release_rule: ReleaseRule | None = Field(
        default=None, description=_RELEASE + " Send null explicitly for the default."
    )
    ladder_step: float | None = Field(
        default=None, gt=0, le=0.5, description=_STEP + " Send null explicitly for the default."
    )
    opens_at: datetime | None = Field(
        default=None, description=_OPENS + " Send null explicitly to remove it."
    )
    closes_at: datetime | None = Field(
        default=None, description=_CLOSES + " Send null explicitly to remove it."
    )
    dataset_versions: list[DatasetVersionRef] | None = Field(
        default=None, max_length=100, description=_NAMED + " Omitted: unchanged."
    )


class PhaseOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    slug: str
    title: str
    hidden: bool
    submission_quota: int | None
    is_open: bool
    disclosure: Disclosure | None
    failed_recordings: FailedRecordings | None = None
    release_rule: ReleaseRule | None = Field(default=None, description=_RELEASE)
    ladder_step: float | None = None
    opens_at: datetime | None
    closes_at: datetime | None
    dataset_versions: list[DatasetVersionRef] = Field(default_factory=list, description=_NAMED)
    accepting: bool = Field(
        description="Takes submissions now: open, and now within [opens_at, closes_at)."
    )
    release: ReleaseRule = Field(
        description="The rule in force now: exact once the phase is closed, else release_rule "
        "or its default."
    )
    created_at: datetime


class PublishOut(BaseModel):
    published: int = Field(description="Evaluations newly published.")
