"""Bodies of the dataset routes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from szbench.models import DatasetKind, Disclosure, FailedRecordings


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
    licence: str = Field(default="", description="Terms of use, e.g. CC-BY-4.0.")
    citation: str = Field(default="", description="How to cite the dataset.")
    kind: DatasetKind
    disclosure: Disclosure = Field(
        description="What non-admins see of results on held-out data: aggregate (dataset-level "
        "figures only), subject (per-subject figures too) or recording (per-recording counts, "
        "outcomes and reference timelines too). A phase may override it; public samples are "
        "always disclosed fully."
    )
    failed_recordings: FailedRecordings = Field(
        default=FailedRecordings.UNRANKED,
        description="What its leaderboards make of an evaluation in which recordings failed "
        "(crashed, timeout, out_of_memory, no_output, invalid_output): unranked (shown apart, "
        "not ranked) or no_detections (each failed recording scored as no detections, the "
        "SzCORE rule for a missing file, and ranked). A phase may override it.",
    )
    created_at: datetime


class DatasetDetail(DatasetOut):
    versions: list[DatasetVersionOut]
    run_limits: dict[str, Any] | None = Field(default=None, description="Admins only.")


class DatasetCreate(BaseModel):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")
    title: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=20000)
    licence: str = Field(default="", max_length=200)
    citation: str = Field(default="", max_length=5000)
    kind: DatasetKind = Field(
        default=DatasetKind.HELD_OUT,
        description="held_out (default): never served to non-admins. public_sample: its "
        "recordings and annotations are downloadable by anyone signed in; needs "
        "confirm_public.",
    )
    confirm_public: bool = Field(
        default=False, description="Required (true) to create a public sample."
    )
    run_limits: dict[str, Any] | None = None
    disclosure: Disclosure = Disclosure.AGGREGATE
    failed_recordings: FailedRecordings = FailedRecordings.UNRANKED


class DatasetUpdate(BaseModel):
    title: str | None = Field(default=None, max_length=200, description="Omitted: unchanged.")
    description: str | None = Field(
        default=None, max_length=20000, description="Omitted: unchanged."
    )
    licence: str | None = Field(default=None, max_length=200, description="Omitted: unchanged.")
    citation: str | None = Field(default=None, max_length=5000, description="Omitted: unchanged.")
    disclosure: Disclosure | None = Field(
        default=None, description="See DatasetOut.disclosure; omitted: unchanged."
    )
    failed_recordings: FailedRecordings | None = Field(
        default=None, description="See DatasetOut.failed_recordings; omitted: unchanged."
    )
    kind: DatasetKind | None = Field(
        default=None,
        description="held_out, or public_sample (needs confirm_public: its recordings and "
        "annotations become downloadable by anyone signed in); omitted: unchanged.",
    )
    confirm_public: bool = Field(
        default=False, description="Required (true) to make a dataset a public sample."
    )


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
