"""Bodies of the phase routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import Disclosure

_DISCLOSURE = (
    "Overrides the datasets' disclosure for evaluations of this phase's versions (e.g. "
    "recording once the phase is over); null: each dataset's own level."
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


class PhaseUpdate(BaseModel):
    title: str | None = Field(default=None, max_length=200)
    hidden: bool | None = None
    submission_quota: int | None = Field(default=None, ge=0, le=10**6)
    is_open: bool | None = None
    disclosure: Disclosure | None = Field(
        default=None, description=_DISCLOSURE + " Send null explicitly to remove the override."
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
    created_at: datetime


class PublishOut(BaseModel):
    published: int = Field(description="Evaluations newly published.")
