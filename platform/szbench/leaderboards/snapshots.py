"""Leaderboard snapshots: a board frozen so that a paper can cite the exact figures it quotes.

A snapshot stores the board as :func:`szbench.leaderboards.service.leaderboard` shows it to
an anonymous visitor (``viewer=None``), whoever takes it: what every reader of the paper may
see, never an admin's exact figures nor an owner's hidden entry, so a snapshot is no channel
around :func:`szbench.disclosure.decision.decide`. The figures are those released at that
moment (rounded to ``SZBENCH_RELEASED_DECIMALS``, by the Ladder, or exact once a phase
closed), with every entry's image digest and scorer version, the dataset version's manifest
checksum and the board's rules.

Admins take snapshots (API and leaderboard page); one is taken of each dataset version a
phase names when the phase closes (the notifications tick notices the closing, whether an
admin closed it or its date passed). A board unchanged since its newest snapshot gets no
second one: taking it returns the existing snapshot. Snapshots are never changed or removed:
this module offers no way to, and a database trigger refuses UPDATE and DELETE.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import citations
from szbench.datasets import queries as datasets
from szbench.errors import NotFound
from szbench.federation import service as federation
from szbench.leaderboards.schemas import FrozenBoard, Snapshot, SnapshotSummary
from szbench.leaderboards.service import BoardQuery, leaderboard
from szbench.models import (
    Algorithm,
    Dataset,
    DatasetVersion,
    LeaderboardSnapshot,
    Phase,
    PhaseDatasetVersion,
    User,
)

ADMIN = "admin"
PHASE_CLOSED = "phase_closed"


def canonical_json(board: dict[str, Any]) -> bytes:
    """The bytes ``content_sha256`` is the hash of (docs/api.md, "Snapshots")."""
    return json.dumps(
        board, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def freeze(session: Session, dataset: Dataset, dv: DatasetVersion) -> dict[str, Any]:
    """The board on ``dv`` as an anonymous visitor sees it now, as JSON data."""
    board = leaderboard(
        session,
        BoardQuery(slug=dataset.slug, version=dv.version, limit=None, unranked=True),
        # Never the caller: a snapshot shows what every reader may see.
        viewer=None,
    )
    frozen = FrozenBoard(
        dataset=dataset.slug,
        dataset_title=dataset.title,
        dataset_version=dv.version,
        manifest_checksum=dv.manifest_checksum,
        kind=board.kind,
        disclosure=dataset.disclosure.value,
        ranking=board.ranking,
        release=board.release,
        failed_recordings=board.failed_recordings,
        scorer_versions=sorted({e.provenance.scorer_version for e in board.items}),
        statistics=board.statistics,
        unranked_total=board.unranked_total,
        total=board.total,
        items=board.items,
        authors={
            algorithm_id: authors
            for algorithm_id, authors in session.execute(
                select(Algorithm.id, Algorithm.authors).where(
                    Algorithm.id.in_({e.algorithm_id for e in board.items})
                )
            )
        },
        external=federation.snapshot_entries(
            session, {e.algorithm_version_id for e in board.items}
        ),
    )
    # Through JSON text, so the stored data is what the API answers (NaN as null).
    data: dict[str, Any] = json.loads(frozen.model_dump_json())
    return data


def take(
    session: Session,
    slug: str,
    version: str | None,
    *,
    reason: str = ADMIN,
    by: User | None = None,
    phase: str | None = None,
) -> tuple[LeaderboardSnapshot, bool]:
    """A snapshot of the board on ``slug``'s ``version`` (default: newest active) and
    whether it is new: the newest snapshot is returned when the board has not changed."""
    dataset = datasets.get_dataset(session, slug)
    dv = datasets.get_version(session, dataset, version)
    board = freeze(session, dataset, dv)
    digest = hashlib.sha256(canonical_json(board)).hexdigest()
    newest = session.scalars(
        select(LeaderboardSnapshot)
        .where(LeaderboardSnapshot.dataset_version_id == dv.id)
        .order_by(LeaderboardSnapshot.id.desc())
        .limit(1)
    ).first()
    if newest is not None and newest.content_sha256 == digest:
        return newest, False
    snapshot = LeaderboardSnapshot(
        dataset_version_id=dv.id,
        dataset=dataset.slug,
        dataset_version=dv.version,
        content_sha256=digest,
        board=board,
        reason=reason,
        phase=phase,
        created_by_id=by.id if by is not None else None,
    )
    session.add(snapshot)
    session.flush()
    return snapshot, True


def take_for_phase(session: Session, phase: Phase) -> list[LeaderboardSnapshot]:
    """Snapshots of each dataset version ``phase`` names (called when it closes)."""
    named = session.execute(
        select(Dataset.slug, DatasetVersion.version)
        .join(DatasetVersion, DatasetVersion.dataset_id == Dataset.id)
        .join(PhaseDatasetVersion, PhaseDatasetVersion.dataset_version_id == DatasetVersion.id)
        .where(PhaseDatasetVersion.phase_id == phase.id)
        .order_by(DatasetVersion.id)
    ).all()
    taken = []
    for slug, version in named:
        snapshot, _ = take(session, slug, version, reason=PHASE_CLOSED, phase=phase.slug)
        taken.append(snapshot)
    return taken


def get(session: Session, slug: str, snapshot_id: int) -> LeaderboardSnapshot:
    snapshot = session.get(LeaderboardSnapshot, snapshot_id)
    # The dataset's slug is part of the address: another slug names no snapshot.
    if snapshot is None or snapshot.dataset != slug:
        raise NotFound(f"leaderboard {slug!r} has no snapshot {snapshot_id}")
    return snapshot


def list_snapshots(
    session: Session, slug: str, version: str | None = None
) -> list[LeaderboardSnapshot]:
    """Snapshots of ``slug``'s boards (one version's when named), newest first."""
    datasets.get_dataset(session, slug)  # names a missing dataset as such
    query = select(LeaderboardSnapshot).where(LeaderboardSnapshot.dataset == slug)
    if version is not None:
        query = query.where(LeaderboardSnapshot.dataset_version == version)
    return list(session.scalars(query.order_by(LeaderboardSnapshot.id.desc())))


# --- answers and citations ---------------------------------------------------------------------


def page_url(snapshot: LeaderboardSnapshot) -> str:
    return citations.site_url("leaderboards", snapshot.dataset, "snapshots", str(snapshot.id))


def summary(snapshot: LeaderboardSnapshot) -> SnapshotSummary:
    return SnapshotSummary(
        id=snapshot.id,
        dataset=snapshot.dataset,
        dataset_version=snapshot.dataset_version,
        content_sha256=snapshot.content_sha256,
        reason=snapshot.reason,
        phase=snapshot.phase,
        created_at=snapshot.created_at,
        url=page_url(snapshot),
        api_url=citations.site_url(
            "api", "v1", "leaderboards", snapshot.dataset, "snapshots", str(snapshot.id)
        ),
    )


def detail(snapshot: LeaderboardSnapshot) -> Snapshot:
    return Snapshot(
        **summary(snapshot).model_dump(), board=FrozenBoard.model_validate(snapshot.board)
    )


def _board_title(board: FrozenBoard) -> str:
    return f"{board.dataset_title or board.dataset} {board.dataset_version}"


def citation(snapshot: LeaderboardSnapshot) -> citations.Citation:
    """The snapshot itself: the board, its rules and its content hash."""
    board = FrozenBoard.model_validate(snapshot.board)
    return citations.Citation(
        key=f"szbench-{snapshot.dataset}-{snapshot.dataset_version}-snapshot-{snapshot.id}",
        kind="dataset",
        title=f"Leaderboard of {_board_title(board)} (snapshot {snapshot.id})",
        authors=[],
        url=page_url(snapshot),
        released=snapshot.created_at,
        version=f"snapshot {snapshot.id}",
        notes=[
            f"Dataset {board.dataset} version {board.dataset_version}",
            f"Ranked by {board.ranking}",
            f"Scorer {', '.join(board.scorer_versions) or 'none'}",
            f"{len(board.items)} {'entry' if len(board.items) == 1 else 'entries'}",
            *_external_note(board.external),
            f"Content sha256 {snapshot.content_sha256}",
        ],
        keywords=["seizure detection", "EEG", "SzCORE", "leaderboard"],
    )


def entry_citation(snapshot: LeaderboardSnapshot, evaluation_id: int) -> citations.Citation:
    """One entry of the snapshot: its algorithm version, image digest and figures as frozen."""
    board = FrozenBoard.model_validate(snapshot.board)
    entry = next((e for e in board.items if e.evaluation_id == evaluation_id), None)
    if entry is None:
        raise NotFound(f"snapshot {snapshot.id} has no entry for evaluation {evaluation_id}")
    place = "unranked" if entry.rank is None else f"rank {entry.rank}"
    f1 = "n/a" if entry.event_f1 is None else f"{entry.event_f1:g}"
    return citations.Citation(
        key=f"szbench-{snapshot.dataset}-snapshot-{snapshot.id}-evaluation-{evaluation_id}",
        kind="software",
        title=entry.title or entry.algorithm,
        authors=citations.split_authors(board.authors.get(entry.algorithm_id, "")),
        # A query, not a fragment: "#" breaks \url inside another command's argument.
        url=f"{page_url(snapshot)}?entry={evaluation_id}",
        released=snapshot.created_at,
        version=entry.algorithm_version,
        notes=[
            f"Image {entry.provenance.image_digest}",
            f"{place.capitalize()} on {_board_title(board)}, leaderboard snapshot {snapshot.id}",
            f"Event F1 {f1} ({entry.release.value} release)",
            f"Scorer {entry.provenance.scorer_version}",
            *_external_note(
                [
                    x
                    for x in board.external
                    if x["algorithm_version_id"] == entry.algorithm_version_id
                ]
            ),
        ],
        keywords=["seizure detection", "EEG", "SzCORE"],
    )


def _external_note(external: list[dict[str, object]]) -> list[str]:
    """Centres' signed results as a citation notes them (withdrawn ones left out)."""
    kept = [x for x in external if not x.get("withdrawn")]
    if not kept:
        return []
    parts = []
    for x in kept:
        figures = x.get("figures")
        f1 = figures.get("event_f1") if isinstance(figures, dict) else None
        parts.append(
            f"{x['centre']} {x['dataset']}: event F1 {'n/a' if f1 is None else f'{f1:g}'} "
            f"(bundle sha256 {x['payload_sha256']})"
        )
    return ["External validation by centres: " + "; ".join(parts)]
