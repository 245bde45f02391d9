"""Bodies of the phase routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import Disclosure, FailedRecordings

_OPENS = "Submissions are accepted from then on (ISO 8601; without an offset: UTC)."
_CLOSES = "The deadline: submissions are refused from then on (ISO 8601; without an offset: UTC)."
_DISCLOSURE = (
    "Overrides the datasets' disclosure for evaluations of this phase's versions (e.g. "
    "recording once the phase is over); null: each dataset's own level."
)
_FAILED = (
    "Overrides the datasets' rule for evaluations with failed recordings: unranked (shown "
    "apart) or no_detections (scored as no detections, ranked); null: each dataset's own rule."
)


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
    opens_at: datetime | None = Field(default=None, description=_OPENS)
    closes_at: datetime | None = Field(default=None, description=_CLOSES)


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
    opens_at: datetime | None = Field(
        default=None, description=_OPENS + " Send null explicitly to remove it."
    )
    closes_at: datetime | None = Field(
        default=None, description=_CLOSES + " Send null explicitly to remove it."
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
    opens_at: datetime | None
    closes_at: datetime | None
    accepting: bool = Field(
        description="Takes submissions now: open, and now within [opens_at, closes_at)."
    )
    created_at: datetime


class PublishOut(BaseModel):
    published: int = Field(description="Evaluations newly published.")
