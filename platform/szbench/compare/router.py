"""``/api/v1/comparisons``: algorithms side by side on one dataset version, paired tests."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import MAX_ID
from szbench.auth.dependencies import Anyone
from szbench.compare import service
from szbench.compare.schemas import Comparison

router = APIRouter(prefix="/comparisons", tags=["results"], responses=ERROR_RESPONSES)


@router.get("", response_model=Comparison)
def compare(
    session: SessionDep,
    caller: Anyone,
    evaluation: Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_ID)]],
        Query(
            max_length=service.MAX_COMPARED,
            description="Evaluation ids (2 to 8) on one dataset version; repeat the parameter.",
        ),
    ],
    metric: Annotated[
        str, Query(max_length=50, description="Per-subject metric; default the ranking one.")
    ] = service.RANKING_METRIC,
) -> Comparison:
    """Per-subject values side by side and a paired test (bootstrap interval, permutation p)."""
    return service.compare(session, evaluation, viewer=caller.user, metric=metric)
