"""Bodies of the dataset routes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import DatasetKind, Disclosure


class DatasetVersionOut(BaseModel):
    id: int
    version: str
    is_active: bool
    manifest_checksum: str
    created_at: datetime
    recordings: int = 0


class DatasetOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    slug: str
    title: str
    description: str
    kind: DatasetKind
    disclosure: Disclosure = Field(
        description="What non-admins see of results on held-out data: aggregate (dataset-level "
        "figures only), subject (per-subject figures too) or recording (per-recording counts, "
        "outcomes and reference timelines too). A phase may override it; public samples are "
        "always disclosed fully."
    )
    created_at: datetime


class DatasetDetail(DatasetOut):
    versions: list[DatasetVersionOut]
    run_limits: dict[str, Any] | None = Field(default=None, description="Admins only.")


class DatasetCreate(BaseModel):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")
    title: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=20000)
    kind: DatasetKind = DatasetKind.HELD_OUT
    run_limits: dict[str, Any] | None = None
    disclosure: Disclosure = Disclosure.AGGREGATE


class DatasetUpdate(BaseModel):
    disclosure: Disclosure = Field(description="See DatasetOut.disclosure.")


class DatasetVersionCreate(BaseModel):
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
    prepared_path: str = Field(
        min_length=1,
        max_length=1000,
        description="Folder written by `szbench dataset prepare`, on the server's datasets volume.",
    )
    queue_benchmark: bool = Field(
        default=True, description="Queue every active algorithm version on the new version."
    )


class PlannedVersion(BaseModel):
    algorithm_version_id: int
    algorithm_id: int
    algorithm: str
    version: str
    image_digest: str | None


class DatasetVersionRegistered(BaseModel):
    dry_run: bool
    dataset: str
    version: str
    dataset_version_id: int | None
    recordings: int
    subjects: int
    benchmark: list[PlannedVersion] = Field(
        description="Algorithm versions queued (or, in a dry run, that would be queued)."
    )
    evaluation_ids: list[int] = Field(default_factory=list)


class RecordingOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    key: str
    subject: str
    session: str
    run: str
    duration_s: float
    sfreq_hz: float
    checksum: str
    flags: list[str]
