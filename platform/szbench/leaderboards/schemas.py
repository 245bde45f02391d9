"""Bodies of the leaderboard routes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from szbench.disclosure.decision import Release
from szbench.evaluations.schemas import RELEASE_DESCRIPTION, Metrics, Provenance
from szbench.models import DatasetKind, FailedRecordings, ReleaseRule


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


class DuplicateOf(BaseModel):
    """The earlier submission of the same image digest, which ranks in this one's place."""

    evaluation_id: int
    algorithm_id: int
    algorithm: str
    algorithm_version: str
    owner: str


class SameImage(BaseModel):
    """An earlier submission of the same image digest (a version the caller may see)."""

    algorithm_version_id: int
    algorithm_version: str
    algorithm_id: int
    algorithm: str
    submitted_at: datetime


class LeaderboardEntry(Metrics):
    rank: int | None = Field(description="Null for an entry shown apart, unranked.")
    complete: bool = Field(
        description="Every recording was scored from the algorithm's own output: none "
        "crashed, timed out, ran out of memory or wrote no or invalid output."
    )
    failed_recordings: int = Field(
        description="How many recordings failed (which ones is not disclosed on held-out data)."
    )
    failed_recordings_rule: FailedRecordings = Field(
        description="unranked: an incomplete evaluation is shown apart; no_detections: its "
        "failed recordings are scored as no detections and it ranks (the dataset's or phase's "
        "setting)."
    )
    unranked_reason: str | None = Field(
        description="failed (incomplete, not ranked by its rule), not_released (under the "
        "Ladder, its evaluation did not beat the best its submitter or team had been shown on "
        "this data by more than the step, so it shows no score of its own) or duplicate (an "
        "earlier submission of the same image ranks); null when ranked."
    )
    duplicate_of: DuplicateOf | None
    submitted_at: datetime | None = Field(description="When the algorithm version was uploaded.")
    started_at: datetime | None
    finished_at: datetime | None
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
    release: Release = Field(description=RELEASE_DESCRIPTION)
    ci: dict[str, Interval] | None = Field(
        description="Bootstrap confidence interval over subjects, per metric (rounded as "
        "the figures are; null where per-subject figures would show through it)."
    )
    rank_stability: RankStability | None
    statistics_withheld: str | None = Field(
        default=None,
        description="Why ci and rank_stability are null for this caller (too few subjects "
        "at the aggregate level, the Ladder, an unranked entry); null where they are shown.",
    )
    provenance: Provenance


class PhaseRelease(BaseModel):
    """How a phase that names this dataset version releases its entries' scores now."""

    phase: str
    rule: ReleaseRule = Field(
        description="exact, or ladder: a submitter's released event_f1 moves only when a "
        "submission beats their best by ladder_step, rounded to it (Blum & Hardt's Ladder)."
    )
    ladder_step: float | None
    closed: bool = Field(description="A closed phase releases exact scores.")


class BoardRelease(BaseModel):
    """The rules by which this board releases scores to non-admins (admins see exact)."""

    decimals: int = Field(
        description="Held-out data disclosed at the aggregate level: F1, sensitivity and "
        "precision rounded to this many decimals, FP/day on the grid of docs/security.md, the "
        "other metrics and every raw count withheld."
    )
    phases: list[PhaseRelease] = Field(
        description="Phases naming this dataset version and their rule. Every evaluation on "
        "this data, in any phase or none, follows the open ones (the lowest level, the Ladder "
        "where any releases by it); an entry of a closed phase follows that phase's rules."
    )
    rule: Release | None = Field(
        default=None,
        description="How an evaluation on this data is released to a non-admin now (but an "
        "entry of a closed phase of its own): exact, rounded or ladder.",
    )
    bits_per_evaluation: float | None = Field(
        default=None,
        description="The most bits one evaluation here tells a non-admin about the held-out "
        "data through its released figures, failed count and status, by that rule "
        "(docs/security.md); null where the figures are exact.",
    )
    timing_bits_per_evaluation: float | None = Field(
        default=None,
        description="The most bits one held-out evaluation here tells a non-admin through "
        "when its progress moves (the progress clock and its finish); null for a public "
        "sample.",
    )
    bits_per_comparison: float | None = Field(
        default=None,
        description="The most bits one paired test with another entry tells a non-admin at "
        "the aggregate level; null where no test is released (the Ladder, too few subjects) "
        "or the figures are exact.",
    )


class StatisticsInfo(BaseModel):
    status: str
    confidence_level: float
    resamples: int


class Leaderboard(BaseModel):
    dataset: str
    dataset_version: str
    kind: DatasetKind
    ranking: str
    release: BoardRelease
    failed_recordings: FailedRecordings = Field(
        description="The dataset's rule for evaluations with failed recordings (a phase may "
        "override it for its entries; see each entry's failed_recordings_rule)."
    )
    unranked_total: int = Field(
        description="Entries shown apart (failed, not_released or duplicate); listed with "
        "unranked=true."
    )
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
    entries: int = Field(description="Ranked entries in the leaderboard's default view.")
    unranked: int = Field(
        default=0,
        description="Entries shown apart there (failed, no score released by the Ladder, or "
        "duplicate images).",
    )


class FrozenBoard(BaseModel):
    """A leaderboard as an anonymous visitor saw it when the snapshot was taken: the figures
    exactly as released then (rounded, by the Ladder or exact, per entry's ``release``)."""

    dataset: str
    dataset_title: str
    dataset_version: str
    manifest_checksum: str = Field(description="The dataset version's manifest checksum.")
    kind: DatasetKind
    disclosure: str = Field(description="The dataset's disclosure level when frozen.")
    ranking: str
    release: BoardRelease
    failed_recordings: FailedRecordings
    scorer_versions: list[str] = Field(description="Every scorer version among the entries.")
    statistics: StatisticsInfo
    unranked_total: int
    total: int = Field(description="Entries, ranked and unranked, all listed in items.")
    items: list[LeaderboardEntry] = Field(
        description="Ranked entries in rank order, then those shown apart; each entry's "
        "provenance names its image digest and scorer version."
    )
    authors: dict[int, str] = Field(
        default_factory=dict, description="Each entry's algorithm's authors, by algorithm_id."
    )
    external: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Results clinical centres published for the entries' versions "
        "(docs/federation.md): centre, dataset, figures, the bundle's sha256, withdrawn.",
    )


class SnapshotSummary(BaseModel):
    id: int
    dataset: str
    dataset_version: str
    content_sha256: str
    reason: str = Field(description="admin, or phase_closed (taken when a phase closed).")
    phase: str | None
    created_at: datetime
    url: str = Field(description="The snapshot's page (stable; from SZBENCH_PUBLIC_URL).")
    api_url: str


class Snapshot(SnapshotSummary):
    """An immutable leaderboard snapshot. ``content_sha256`` is the sha256 of ``board``
    written as canonical JSON (keys sorted, no blanks, UTF-8)."""

    board: FrozenBoard
