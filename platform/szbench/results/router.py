"""Results: per dataset, per subject, per recording (drill-down), side by side, downloads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel

from szbench.algorithms import service as algorithms
from szbench.api.cache import cached_json
from szbench.api.deps import SessionDep
from szbench.api.downloads import table_response
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, Page, PageDep
from szbench.auth.dependencies import Anyone
from szbench.disclosure import decision
from szbench.evaluations import queries as evaluations
from szbench.evaluations.queries import provenances
from szbench.evaluations.schemas import DatasetResultOut, RunOut, SubjectResultsPage
from szbench.models import RunOutcome
from szbench.results import queries, service
from szbench.results.schemas import AlgorithmResultRow, AlgorithmResults

router = APIRouter(tags=["results"], responses=ERROR_RESPONSES)

Format = Annotated[Literal["csv", "json"], Query(description="Download format.")]
_DOWNLOAD: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}, "application/json": {}}}
}


@router.get("/evaluations/{evaluation_id}/result", response_model=DatasetResultOut)
def get_result(
    request: Request, evaluation_id: IdPath, session: SessionDep, caller: Anyone
) -> Response:
    """Dataset-level figures of an evaluation (per-subject means ranked on, std, pooled)."""

    def build() -> bytes:
        evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
        return _json(queries.dataset_result(session, evaluation, viewer=caller.user))

    answer = service.evaluation_answer(
        session, evaluation_id, viewer=caller.user, variant="result", build=build
    )
    return cached_json(request, answer, signed_in=caller.user is not None)


@router.get("/evaluations/{evaluation_id}/subjects", response_model=SubjectResultsPage)
def list_subject_results(
    request: Request, evaluation_id: IdPath, session: SessionDep, caller: Anyone, page: PageDep
) -> Response:
    """Per-subject results of an evaluation."""

    def build() -> bytes:
        evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
        items, total = queries.subject_results(
            session, evaluation, viewer=caller.user, limit=page.limit, offset=page.offset
        )
        provenance = provenances(session, [evaluation], viewer=caller.user)[evaluation.id]
        return _json(
            SubjectResultsPage(
                items=items,
                total=total,
                limit=page.limit,
                offset=page.offset,
                provenance=provenance,
            )
        )

    answer = service.evaluation_answer(
        session,
        evaluation_id,
        viewer=caller.user,
        variant=("subjects", page.limit, page.offset),
        build=build,
        authorize=service.authorize_subjects,
    )
    return cached_json(request, answer, signed_in=caller.user is not None)


@router.get("/evaluations/{evaluation_id}/recordings", response_model=Page[RunOut])
def list_recording_results(
    evaluation_id: IdPath,
    session: SessionDep,
    caller: Anyone,
    page: PageDep,
    outcome: RunOutcome | None = None,
    subject: Annotated[str | None, Query(max_length=100)] = None,
) -> Page[RunOut]:
    """Per-recording runs: outcome, counts, the submitter's message, provenance (logs: admins)."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    items, total = queries.recording_runs(
        session,
        evaluation,
        viewer=caller.user,
        outcome=outcome,
        subject=subject,
        limit=page.limit,
        offset=page.offset,
    )
    return Page(items=items, total=total, limit=page.limit, offset=page.offset)


@router.get(
    "/evaluations/{evaluation_id}/recordings/{run_id}/detections",
    response_class=Response,
    responses={200: {"content": {"text/tab-separated-values": {}}}},
)
def get_detections(
    evaluation_id: IdPath, run_id: IdPath, session: SessionDep, caller: Anyone
) -> Response:
    """The algorithm's output TSV for one recording (public samples: owner; admins: all)."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    text = queries.detections(session, evaluation, run_id, viewer=caller.user)
    return Response(text, media_type="text/tab-separated-values")


@router.get(
    "/evaluations/{evaluation_id}/subjects/download", response_class=Response, responses=_DOWNLOAD
)
def download_subject_results(
    evaluation_id: IdPath, session: SessionDep, caller: Anyone, format: Format = "csv"
) -> Response:
    """All per-subject results of an evaluation as CSV or JSON."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    items, _ = queries.subject_results(session, evaluation, viewer=caller.user, limit=None)
    columns = ["subject", "recordings", *queries.METRICS, "counts"]
    return table_response(
        [i.model_dump() for i in items],
        columns=columns,
        filename=f"evaluation-{evaluation.id}-subjects",
        fmt=format,
    )


@router.get(
    "/evaluations/{evaluation_id}/recordings/download", response_class=Response, responses=_DOWNLOAD
)
def download_recording_results(
    evaluation_id: IdPath, session: SessionDep, caller: Anyone, format: Format = "csv"
) -> Response:
    """All per-recording results of an evaluation as CSV or JSON."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    items, _ = queries.recording_runs(session, evaluation, viewer=caller.user, limit=None)
    columns = [
        "recording", "subject", "outcome", "exit_code", "submitter_message",
        "event_tp", "event_fp", "event_fn", "event_ref_true",
        "sample_tp", "sample_fp", "sample_fn", "sample_ref_true", "num_samples",
        "worker_host", "gpu_model", "gpu_driver", "wall_time_s", "peak_memory_bytes",
        "image_digest", "scorer_version",
    ]  # fmt: skip
    rows = [{**i.model_dump(exclude={"provenance"}), **i.provenance.model_dump()} for i in items]
    return table_response(
        rows, columns=columns, filename=f"evaluation-{evaluation.id}-recordings", fmt=format
    )


@router.get("/algorithms/{algorithm_id}/results", response_model=AlgorithmResults)
def algorithm_results(
    request: Request,
    algorithm_id: IdPath,
    session: SessionDep,
    caller: Anyone,
    page: PageDep,
    official_only: Annotated[bool, Query(description="Only default-parameter scoring.")] = True,
) -> Response:
    """An algorithm's results on every dataset version, side by side."""

    def build() -> bytes:
        algorithm = algorithms.get_algorithm(session, algorithm_id, viewer=caller.user)
        window, total = queries.algorithm_results(
            session,
            algorithm,
            viewer=caller.user,
            official_only=official_only,
            limit=page.limit,
            offset=page.offset,
        )
        prov = provenances(session, window, viewer=caller.user)
        views = [(e, decision.view_of(caller.user, e)) for e in window]
        released = queries.released_metrics(session, views)
        items = [
            AlgorithmResultRow(
                evaluation_id=e.id,
                dataset=e.dataset_version.dataset.slug,
                dataset_version=e.dataset_version.version,
                algorithm_version=e.algorithm_version.version,
                official=e.official,
                published=e.published,
                subjects=e.result.subjects if e.result else 0,
                recordings=e.result.recordings if e.result else 0,
                release=view.release,
                provenance=prov[e.id],
                **released[e.id],
            )
            for e, view in views
        ]
        return _json(
            AlgorithmResults(
                algorithm_id=algorithm.id,
                algorithm=algorithm.name,
                items=items,
                total=total,
                limit=page.limit,
                offset=page.offset,
            )
        )

    answer = service.algorithm_answer(
        session,
        algorithm_id,
        viewer=caller.user,
        variant=(official_only, page.limit, page.offset),
        build=build,
    )
    return cached_json(request, answer, signed_in=caller.user is not None)


def _json(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()
