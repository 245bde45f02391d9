"""Bodies of the leaderboard routes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from szbench.evaluations.schemas import Metrics, Provenance
from szbench.models import DatasetKind


class Interval(BaseModel):
    low: float | None
    high: float | None


class RankStability(BaseModel):
    """Where this entry ranks subject by subject (1 = best), over the subjects all share."""

    median: float | None
    low: float | None = Field(description="Lower percentile of the per-subject rank.")
    high: float | None = Field(description="Upper percentile of the per-subject rank.")
    best_share: float | None = Field(description="Share of subjects on which it ranks first.")
    histogram: list[int] = Field(description="Subjects at rank 1, 2, ... n.")


class LeaderboardEntry(Metrics):
    rank: int
    evaluation_id: int
    algorithm_id: int
    algorithm: str
    title: str
    owner: str
    algorithm_version_id: int
    algorithm_version: str
    published: bool
    mine: bool = Field(description="The caller's own entry (shown to them even when unpublished).")
    subjects: int
    recordings: int
    ci: dict[str, Interval] | None = Field(
        description="Bootstrap confidence interval over subjects, per metric."
    )
    rank_stability: RankStability | None
    provenance: Provenance


class StatisticsInfo(BaseModel):
    status: str
    confidence_level: float
    resamples: int


class Leaderboard(BaseModel):
    dataset: str
    dataset_version: str
    kind: DatasetKind
    ranking: str
    sort: str
    order: str
    statistics: StatisticsInfo
    items: list[LeaderboardEntry]
    total: int
    limit: int
    offset: int


class LeaderboardIndexRow(BaseModel):
    dataset: str
    title: str
    kind: DatasetKind
    dataset_version: str
    entries: int
