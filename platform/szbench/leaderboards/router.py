"""``/api/v1/leaderboards``: ranked, sortable, with confidence intervals; CSV/JSON."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status

from szbench.api.cache import cached_json
from szbench.api.deps import SessionDep
from szbench.api.downloads import citation_response, table_response
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import PageDep
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.datasets.router import CITATION_RESPONSES, CitationFormat
from szbench.leaderboards import service, snapshots
from szbench.leaderboards.schemas import (
    Leaderboard,
    LeaderboardIndexRow,
    Snapshot,
    SnapshotSummary,
)

router = APIRouter(prefix="/leaderboards", tags=["leaderboards"], responses=ERROR_RESPONSES)

Version = Annotated[
    str | None, Query(max_length=100, description="Dataset version; default newest active.")
]
Sort = Annotated[
    str, Query(max_length=50, description="rank, a metric name, algorithm, subjects or recordings.")
]
Order = Annotated[Literal["asc", "desc"] | None, Query(description="Default: best first.")]
Versions = Annotated[
    Literal["latest", "all"],
    Query(description="Each algorithm's latest version, or every version."),
]
Unranked = Annotated[
    bool,
    Query(
        description="Also list, after the ranked entries and without a rank, the entries "
        "shown apart: evaluations with failed recordings (unless the dataset or phase scores "
        "them as no detections) and later submissions of an image already on the board."
    ),
]


@router.get("", response_model=list[LeaderboardIndexRow])
def list_leaderboards(session: SessionDep, caller: Anyone) -> list[LeaderboardIndexRow]:
    """Dataset versions that have ranked results, with their entry counts."""
    return service.index(session, viewer=caller.user)


@router.get("/{slug}", response_model=Leaderboard)
def get_leaderboard(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: Anyone,
    page: PageDep,
    version: Version = None,
    sort: Sort = "rank",
    order: Order = None,
    versions: Versions = "latest",
    unranked: Unranked = False,
) -> Response:
    """A dataset version's leaderboard: SzCORE rank, metrics, bootstrap CIs, rank stability."""

    def build() -> bytes:
        query = service.BoardQuery(
            slug=slug,
            version=version,
            sort=sort,
            order=order,
            versions=versions,
            limit=page.limit,
            offset=page.offset,
            unranked=unranked,
        )
        board = service.leaderboard(session, query, viewer=caller.user)
        return board.model_dump_json().encode()

    answer = service.leaderboard_answer(
        session,
        slug,
        version,
        viewer=caller.user,
        variant=(sort, order, versions, unranked, page.limit, page.offset),
        build=build,
    )
    return cached_json(request, answer, signed_in=caller.user is not None)


@router.get(
    "/{slug}/download",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}, "application/json": {}}}},
)
def download_leaderboard(
    slug: str,
    session: SessionDep,
    caller: Anyone,
    version: Version = None,
    sort: Sort = "rank",
    order: Order = None,
    versions: Versions = "latest",
    unranked: Unranked = False,
    format: Annotated[Literal["csv", "json"], Query(description="Download format.")] = "csv",
) -> Response:
    """The whole leaderboard as CSV or JSON."""
    query = service.BoardQuery(
        slug=slug,
        version=version,
        sort=sort,
        order=order,
        versions=versions,
        limit=None,
        unranked=unranked,
    )
    board = service.leaderboard(session, query, viewer=caller.user)
    rows, columns = service.download_rows(board)
    name = f"leaderboard-{board.dataset}-{board.dataset_version}"
    return table_response(rows, columns=columns, filename=name, fmt=format)


# --- snapshots (immutable: no route changes or removes one) ---------------------------------


@router.get("/{slug}/snapshots", response_model=list[SnapshotSummary])
def list_snapshots(
    slug: str, session: SessionDep, _caller: Anyone, version: Version = None
) -> list[SnapshotSummary]:
    """Snapshots of a dataset's leaderboards (one version's when named), newest first."""
    return [snapshots.summary(s) for s in snapshots.list_snapshots(session, slug, version)]


@router.post(
    "/{slug}/snapshots",
    response_model=Snapshot,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": Snapshot, "description": "Unchanged since this snapshot."}},
)
def take_snapshot(
    slug: str, response: Response, session: SessionDep, admin: AdminOnly, version: Version = None
) -> Snapshot:
    """Freeze the board as an anonymous visitor sees it (admins); an unchanged board
    answers 200 with its newest snapshot."""
    snapshot, new = snapshots.take(session, slug, version, by=admin.user)
    if not new:
        response.status_code = status.HTTP_200_OK
    return snapshots.detail(snapshot)


@router.get("/{slug}/snapshots/{snapshot_id}", response_model=Snapshot)
def get_snapshot(slug: str, snapshot_id: int, session: SessionDep, _caller: Anyone) -> Snapshot:
    """One snapshot: the frozen board, its rules, every entry's image digest, its hash."""
    return snapshots.detail(snapshots.get(session, slug, snapshot_id))


@router.get(
    "/{slug}/snapshots/{snapshot_id}/citation",
    response_class=Response,
    responses=CITATION_RESPONSES,
)
def cite_snapshot(
    slug: str,
    snapshot_id: int,
    session: SessionDep,
    _caller: Anyone,
    format: CitationFormat = "bibtex",
) -> Response:
    """Cite this snapshot: BibTeX or CITATION.cff, with its stable address and hash."""
    return citation_response(snapshots.citation(snapshots.get(session, slug, snapshot_id)), format)


@router.get(
    "/{slug}/snapshots/{snapshot_id}/entries/{evaluation_id}/citation",
    response_class=Response,
    responses=CITATION_RESPONSES,
)
def cite_snapshot_entry(
    slug: str,
    snapshot_id: int,
    evaluation_id: int,
    session: SessionDep,
    _caller: Anyone,
    format: CitationFormat = "bibtex",
) -> Response:
    """Cite one entry of a snapshot: its algorithm version, image digest and frozen figures."""
    snapshot = snapshots.get(session, slug, snapshot_id)
    return citation_response(snapshots.entry_citation(snapshot, evaluation_id), format)
