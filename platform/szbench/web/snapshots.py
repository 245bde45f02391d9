"""Snapshot pages: a frozen leaderboard with its rules and "Cite this"; admins take one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from szbench import citations
from szbench.api.deps import SessionDep
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.leaderboards import snapshots
from szbench.leaderboards.schemas import FrozenBoard
from szbench.leaderboards.statistics import CI_METRICS
from szbench.web.common import CsrfChecked, redirect, render
from szbench.web.pages import METRIC_LABELS

router = APIRouter(include_in_schema=False)


@router.get("/leaderboards/{slug}/snapshots/{snapshot_id}", response_class=HTMLResponse)
def snapshot_page(
    request: Request,
    slug: str,
    snapshot_id: int,
    session: SessionDep,
    caller: Anyone,
    entry: Annotated[int | None, Query(description="The cited entry, highlighted.")] = None,
) -> Response:
    """A leaderboard snapshot: the board as frozen, its rules, its hash and "Cite this"."""
    snapshot = snapshots.get(session, slug, snapshot_id)
    board = FrozenBoard.model_validate(snapshot.board)
    api = f"/api/v1/leaderboards/{slug}/snapshots/{snapshot.id}"
    context = {
        "title": f"Leaderboard snapshot {snapshot.id}: {board.dataset_title or board.dataset}",
        "snapshot": snapshot,
        "board": board,
        "info": snapshots.summary(snapshot),
        "api": api,
        "cited": entry,
        "bibtex": citations.bibtex(snapshots.citation(snapshot)),
        "labels": METRIC_LABELS,
        "ci_metrics": CI_METRICS,
        "decimals": board.release.decimals,
    }
    return render(request, "snapshot.html", caller, context)


@router.post("/leaderboards/{slug}/snapshots", response_class=HTMLResponse)
def take_snapshot(
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    version: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    """Freeze the board as an anonymous visitor sees it (admins), then show the snapshot."""
    snapshot, new = snapshots.take(session, slug, version or None, by=caller.user)
    message = (
        f"Snapshot {snapshot.id} taken."
        if new
        else f"The board has not changed since snapshot {snapshot.id}."
    )
    return redirect(f"/leaderboards/{slug}/snapshots/{snapshot.id}", message)
