"""Bodies of the cross-dataset result routes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from szbench.disclosure.decision import Release
from szbench.evaluations.schemas import RELEASE_DESCRIPTION, Metrics, Provenance


class AlgorithmResultRow(Metrics):
    evaluation_id: int
    dataset: str
    dataset_version: str
    algorithm_version: str
    official: bool
    published: bool
    subjects: int
    recordings: int
    release: Release = Field(description=RELEASE_DESCRIPTION)
    provenance: Provenance


class AlgorithmResults(BaseModel):
    algorithm_id: int
    algorithm: str
    items: list[AlgorithmResultRow]
    total: int
    limit: int
    offset: int
