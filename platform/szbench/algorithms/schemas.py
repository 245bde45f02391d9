"""Bodies of the algorithm routes."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from szbench.leaderboards.schemas import SameImage
from szbench.models import VersionStatus, Visibility

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,99}$"
_LINK = "An http(s) link (e.g. the code repository or the paper); empty for none."
_EXTERNAL = (
    "Clinical centres subscribed to this hub may run its public active versions on their "
    "private EEG and publish signed results here (docs/federation.md)."
)


class AlgorithmCreate(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, description="Short name, unique per owner.")
    title: str = Field(default="", max_length=200)
    authors: str = Field(default="", max_length=500)
    licence: str = Field(default="", max_length=100)
    description: str = Field(default="", max_length=20000)
    visibility: Visibility = Visibility.PUBLIC
    code_url: str = Field(default="", max_length=500, description=_LINK)
    paper_url: str = Field(default="", max_length=500, description=_LINK)
    external_evaluation: bool = Field(default=False, description=_EXTERNAL)


class AlgorithmUpdate(BaseModel):
    title: str | None = Field(default=None, max_length=200)
    authors: str | None = Field(default=None, max_length=500)
    licence: str | None = Field(default=None, max_length=100)
    description: str | None = Field(default=None, max_length=20000)
    visibility: Visibility | None = None
    code_url: str | None = Field(default=None, max_length=500, description=_LINK)
    paper_url: str | None = Field(default=None, max_length=500, description=_LINK)
    external_evaluation: bool | None = Field(default=None, description=_EXTERNAL)
    withdrawn: bool | None = Field(
        default=None,
        description="true: off every leaderboard (results kept, shown on the algorithm's "
        "page); false: back on them.",
    )


class VersionCreate(BaseModel):
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$", examples=["1.0.0"])
    upload_id: str | None = Field(
        default=None, max_length=64, description="A complete upload session."
    )
    image_reference: str | None = Field(
        default=None,
        max_length=500,
        description="Instead of an upload: 'registry/name[:tag]@sha256:<64 hex>'.",
    )
    phase: str | None = Field(default=None, max_length=100, description="Phase slug.")
    wants_gpu: bool = False


class PreflightIn(BaseModel):
    """What a submission will be, before any byte of its archive is sent."""

    algorithm_id: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="An existing algorithm of the caller's."
    )
    name: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="Or the short name of a new one."
    )
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
    phase: str | None = Field(default=None, max_length=100)
    filename: str | None = Field(default=None, max_length=500, description="The archive's.")
    size_bytes: int | None = Field(default=None, description="The archive's size.")


class PreflightOut(BaseModel):
    ok: bool = True
    existing_algorithm_id: int | None = Field(
        default=None,
        description="The caller's algorithm of that name, when it exists already (a retry "
        "after a refused first version): submit to it instead of creating it again.",
    )


class VersionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    algorithm_id: int
    version: str
    phase_id: int | None
    image_digest: str | None
    image_reference: str | None
    tarball_bytes: int | None
    status: VersionStatus
    status_message: str
    wants_gpu: bool
    created_at: datetime
    same_image_as: SameImage | None = Field(
        default=None,
        description="The earliest earlier submission of the same image digest that the caller "
        "may see: leaderboards rank that one and list this one as its duplicate.",
    )


class AlgorithmOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    owner_id: int
    team_id: int | None = Field(
        description="Its team, whose members see it and submit its versions; null: none."
    )
    name: str
    title: str
    authors: str
    licence: str
    description: str
    visibility: Visibility
    code_url: str
    paper_url: str
    external_evaluation: bool = Field(description=_EXTERNAL)
    withdrawn_at: datetime | None = Field(
        description="When it was withdrawn from the leaderboards; null when on them."
    )
    created_at: datetime


class AlgorithmDetail(AlgorithmOut):
    versions: list[VersionOut]
