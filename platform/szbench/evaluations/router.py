"""``/api/v1/evaluations``: list, follow, create, cancel, re-run, re-score, publish."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from szbench import citations
from szbench.algorithms import service as algorithms
from szbench.api.cache import cached_json
from szbench.api.deps import SessionDep
from szbench.api.downloads import citation_response
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, IdQuery, Page, PageDep
from szbench.auth.dependencies import AdminOnly, Anyone, Submitter
from szbench.datasets import queries as datasets
from szbench.datasets.router import CITATION_RESPONSES, CitationFormat
from szbench.evaluations import queries
from szbench.evaluations import service as evaluation_service
from szbench.evaluations.schemas import (
    EvaluationCreate,
    EvaluationDetail,
    EvaluationOut,
    Progress,
    PublishedOut,
    RescoreIn,
)
from szbench.models import EvaluationKind, EvaluationStatus
from szbench.phases import service as phases
from szbench.stamped_cache import Answer

router = APIRouter(prefix="/evaluations", tags=["evaluations"], responses=ERROR_RESPONSES)


@router.get("", response_model=Page[EvaluationOut])
def list_evaluations(
    session: SessionDep,
    caller: Anyone,
    page: PageDep,
    algorithm_id: IdQuery = None,
    algorithm_version_id: IdQuery = None,
    dataset: Annotated[str | None, Query(max_length=100)] = None,
    dataset_version: Annotated[str | None, Query(max_length=100)] = None,
    status_: Annotated[EvaluationStatus | None, Query(alias="status")] = None,
    kind: EvaluationKind | None = None,
    mine: Annotated[
        bool, Query(description="Only evaluations of the caller's algorithms.")
    ] = False,
) -> Page[EvaluationOut]:
    """Evaluations the caller may see, newest first."""
    where = queries.EvaluationFilter(
        algorithm_id=algorithm_id,
        algorithm_version_id=algorithm_version_id,
        dataset=dataset,
        dataset_version=dataset_version,
        status=status_,
        kind=kind,
        mine=mine,
    )
    rows, total = queries.list_evaluations(
        session, viewer=caller.user, where=where, limit=page.limit, offset=page.offset
    )
    return Page(
        items=queries.to_outs(session, rows, viewer=caller.user),
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=EvaluationDetail, status_code=status.HTTP_201_CREATED)
def create_evaluation(
    body: EvaluationCreate, session: SessionDep, caller: Submitter
) -> EvaluationDetail:
    """Evaluate one of the caller's algorithm versions on a dataset version."""
    assert caller.user is not None
    version = algorithms.get_managed_version(session, body.algorithm_version_id, user=caller.user)
    dv = datasets.get_version(session, datasets.get_dataset(session, body.dataset), body.version)
    evaluation = evaluation_service.create_evaluation(
        session, algorithm_version=version, dataset_version=dv, created_by=caller.user
    )
    return queries.to_detail(session, evaluation, viewer=caller.user)


@router.get("/{evaluation_id}", response_model=EvaluationDetail)
def get_evaluation(evaluation_id: IdPath, session: SessionDep, caller: Anyone) -> EvaluationDetail:
    """One evaluation with its progress and provenance."""
    return queries.to_detail(
        session,
        queries.get_evaluation(session, evaluation_id, viewer=caller.user),
        viewer=caller.user,
    )


@router.get(
    "/{evaluation_id}/citation",
    response_class=Response,
    responses=CITATION_RESPONSES,
)
def cite_evaluation(
    evaluation_id: IdPath, session: SessionDep, caller: Anyone, format: CitationFormat = "bibtex"
) -> Response:
    """Cite this entry: algorithm version, image digest, dataset version, scorer (no figures:
    cite a leaderboard snapshot to quote them)."""
    evaluation = queries.get_evaluation(session, evaluation_id, viewer=caller.user)
    return citation_response(citations.evaluation_citation(evaluation), format)


@router.get("/{evaluation_id}/progress", response_model=Progress)
def get_progress(
    evaluation_id: IdPath, request: Request, session: SessionDep, caller: Anyone
) -> Response:
    """Recordings done of total and finished runs by outcome (cheap enough to poll; send
    the ETag back in If-None-Match and an unchanged answer is a bodyless 304)."""
    progress = queries.progress(
        session,
        queries.get_evaluation(session, evaluation_id, viewer=caller.user),
        viewer=caller.user,
    )
    body = progress.model_dump_json().encode()
    # The answer moves with the runs (no change counter is bumped per run): tagged by its
    # content, less the seconds left, which move with the clock (the finish moment is in it).
    tagged = progress.model_dump_json(exclude={"estimated_remaining_s"}).encode()
    etag = '"' + hashlib.sha256(tagged).hexdigest()[:32] + '"'
    return cached_json(request, Answer(body, etag), signed_in=True)


@router.post("/{evaluation_id}/cancel", response_model=EvaluationDetail)
def cancel_evaluation(
    evaluation_id: IdPath, session: SessionDep, caller: Submitter
) -> EvaluationDetail:
    """Cancel a queued or running evaluation (owner or admin)."""
    assert caller.user is not None
    evaluation = queries.get_managed_evaluation(session, evaluation_id, user=caller.user)
    evaluation = evaluation_service.cancel_evaluation(session, evaluation)
    return queries.to_detail(session, evaluation, viewer=caller.user)


@router.post(
    "/{evaluation_id}/rerun", response_model=EvaluationDetail, status_code=status.HTTP_201_CREATED
)
def rerun_evaluation(
    evaluation_id: IdPath, session: SessionDep, caller: Submitter
) -> EvaluationDetail:
    """Run the same image digest again with fresh container runs (a new evaluation)."""
    assert caller.user is not None
    evaluation = queries.get_managed_evaluation(session, evaluation_id, user=caller.user)
    new = evaluation_service.rerun_evaluation(session, evaluation, created_by=caller.user)
    return queries.to_detail(session, new, viewer=caller.user)


@router.post(
    "/{evaluation_id}/rescore", response_model=EvaluationDetail, status_code=status.HTTP_201_CREATED
)
def rescore_evaluation(
    evaluation_id: IdPath, body: RescoreIn, session: SessionDep, caller: Submitter
) -> EvaluationDetail:
    """Score the stored detections again with other scorer parameters (no container run)."""
    assert caller.user is not None
    evaluation = queries.get_managed_evaluation(session, evaluation_id, user=caller.user)
    new = evaluation_service.rescore_evaluation(
        session, evaluation, scoring_params=body.scoring_params, created_by=caller.user
    )
    return queries.to_detail(session, new, viewer=caller.user)


@router.post("/{evaluation_id}/publish", response_model=PublishedOut)
def publish_evaluation(
    evaluation_id: IdPath, session: SessionDep, admin: AdminOnly
) -> PublishedOut:
    """Publish a hidden evaluation's results to everyone (admins)."""
    evaluation = queries.get_evaluation(session, evaluation_id, viewer=admin.user)
    phases.publish_evaluation(session, evaluation)
    return PublishedOut(id=evaluation.id, published=evaluation.published)
