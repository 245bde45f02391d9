"""``/api/v1/datasets``: datasets, versions, recordings; admin registration."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from fastapi.responses import FileResponse

from szbench import citations
from szbench.api.deps import SessionDep
from szbench.api.downloads import citation_response
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import AdminOnly, Anyone, SignedIn
from szbench.datasets import queries
from szbench.datasets import service as dataset_service
from szbench.datasets.schemas import (
    DatasetCreate,
    DatasetDetail,
    DatasetOut,
    DatasetUpdate,
    DatasetVersionCreate,
    DatasetVersionOut,
    DatasetVersionRegistered,
    PlannedVersion,
    RecordingOut,
)
from szbench.evaluations import service as evaluation_service
from szbench.models import AlgorithmVersion, Dataset, DatasetVersion

router = APIRouter(prefix="/datasets", tags=["datasets"], responses=ERROR_RESPONSES)


def _detail(session: SessionDep, dataset: Dataset, *, admin: bool) -> DatasetDetail:
    counts = queries.recording_counts(session, dataset)
    versions = [
        DatasetVersionOut(
            id=v.id,
            version=v.version,
            is_active=v.is_active,
            manifest_checksum=v.manifest_checksum,
            created_at=v.created_at,
            recordings=counts.get(v.id, 0),
        )
        for v in dataset.versions
    ]
    return DatasetDetail(
        **DatasetOut.model_validate(dataset).model_dump(),
        versions=versions,
        run_limits=dataset.run_limits if admin else None,
    )


def _planned(rows: list[AlgorithmVersion]) -> list[PlannedVersion]:
    return [
        PlannedVersion(
            algorithm_version_id=v.id,
            algorithm_id=v.algorithm_id,
            algorithm=v.algorithm.name,
            version=v.version,
            image_digest=v.image_digest,
        )
        for v in rows
    ]


@router.get("", response_model=Page[DatasetOut])
def list_datasets(session: SessionDep, _caller: Anyone, page: PageDep) -> Page[DatasetOut]:
    """All datasets (public samples and held-out ones; held-out data itself is never listed)."""
    rows, total = queries.list_datasets(session, limit=page.limit, offset=page.offset)
    return Page(
        items=[DatasetOut.model_validate(d) for d in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=DatasetDetail, status_code=status.HTTP_201_CREATED)
def create_dataset(body: DatasetCreate, session: SessionDep, _admin: AdminOnly) -> DatasetDetail:
    """Create a dataset (then register prepared versions of it)."""
    dataset = dataset_service.create_dataset(session, **body.model_dump())
    session.refresh(dataset, ["versions"])
    return _detail(session, dataset, admin=True)


@router.patch("/{slug}", response_model=DatasetDetail)
def update_dataset(
    slug: str, body: DatasetUpdate, session: SessionDep, _admin: AdminOnly
) -> DatasetDetail:
    """Change a dataset's kind, disclosure level, rule for failed recordings or page facts."""
    dataset = queries.get_dataset(session, slug)
    dataset_service.set_facts(
        session,
        dataset,
        title=body.title,
        description=body.description,
        licence=body.licence,
        citation=body.citation,
    )
    if body.disclosure is not None:
        dataset_service.set_disclosure(session, dataset, body.disclosure)
    if body.failed_recordings is not None:
        dataset_service.set_failed_recordings(session, dataset, body.failed_recordings)
    if body.kind is not None and body.kind != dataset.kind:
        dataset_service.set_kind(session, dataset, body.kind, confirm_public=body.confirm_public)
    return _detail(session, dataset, admin=True)


@router.get("/{slug}", response_model=DatasetDetail)
def get_dataset(slug: str, session: SessionDep, caller: Anyone) -> DatasetDetail:
    """One dataset with its versions and recording counts."""
    return _detail(session, queries.get_dataset(session, slug), admin=caller.is_admin)


@router.post(
    "/{slug}/versions",
    response_model=DatasetVersionRegistered,
    status_code=status.HTTP_201_CREATED,
)
def register_version(
    slug: str,
    body: DatasetVersionCreate,
    session: SessionDep,
    admin: AdminOnly,
    dry_run: Annotated[
        bool, Query(description="Check the manifest and list who would be queued; store nothing.")
    ] = False,
) -> DatasetVersionRegistered:
    """Register a prepared dataset version and queue continuous benchmarking on it."""
    dataset = queries.get_dataset(session, slug)
    nested = session.begin_nested() if dry_run else None
    try:
        dv: DatasetVersion = dataset_service.register_dataset_version(
            session, dataset, version=body.version, prepared_path=Path(body.prepared_path)
        )
        session.flush()
        session.refresh(dv, ["recordings"])
        subjects = {r.subject for r in dv.recordings}
        if dry_run or not body.queue_benchmark:
            planned = _planned(evaluation_service.plan_continuous_benchmark(session, dv))
            queued: list[int] = []
        else:
            created = evaluation_service.queue_continuous_benchmark(
                session, dv, created_by=admin.user
            )
            planned = _planned([e.algorithm_version for e in created])
            queued = [e.id for e in created]
        return DatasetVersionRegistered(
            dry_run=dry_run,
            dataset=dataset.slug,
            version=dv.version,
            dataset_version_id=None if dry_run else dv.id,
            recordings=len(dv.recordings),
            subjects=len(subjects),
            benchmark=planned,
            evaluation_ids=queued,
        )
    finally:
        if nested is not None:
            nested.rollback()


@router.get("/{slug}/versions/{version}/benchmark-plan", response_model=list[PlannedVersion])
def benchmark_plan(
    slug: str, version: str, session: SessionDep, _admin: AdminOnly
) -> list[PlannedVersion]:
    """Dry run: the algorithm versions continuous benchmarking would queue on this version."""
    dv = queries.get_version(session, queries.get_dataset(session, slug), version)
    return _planned(evaluation_service.plan_continuous_benchmark(session, dv))


@router.post("/{slug}/versions/{version}/benchmark", response_model=list[int])
def queue_benchmark(slug: str, version: str, session: SessionDep, admin: AdminOnly) -> list[int]:
    """Queue every active algorithm version not yet evaluated on this version; the new ids."""
    dv = queries.get_version(session, queries.get_dataset(session, slug), version)
    created = evaluation_service.queue_continuous_benchmark(session, dv, created_by=admin.user)
    return [e.id for e in created]


@router.get("/{slug}/versions/{version}/recordings", response_model=Page[RecordingOut])
def list_recordings(
    slug: str, version: str, session: SessionDep, caller: SignedIn, page: PageDep
) -> Page[RecordingOut]:
    """Recordings of a version (public samples: anyone signed in; held-out: admins only)."""
    dv = queries.get_version(session, queries.get_dataset(session, slug), version)
    rows, total = queries.list_recordings(
        session, dv, viewer=caller.user, limit=page.limit, offset=page.offset
    )
    return Page(
        items=[RecordingOut.model_validate(r) for r in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.get(
    "/{slug}/versions/{version}/recordings/{key}/annotations",
    response_class=FileResponse,
    responses={200: {"content": {"text/tab-separated-values": {}}}},
)
def recording_annotations(
    slug: str, version: str, key: str, session: SessionDep, caller: SignedIn
) -> FileResponse:
    """The reference annotations (events.tsv) of a recording (public samples or admins)."""
    dv = queries.get_version(session, queries.get_dataset(session, slug), version)
    path = queries.recording_file(session, dv, key, viewer=caller.user, kind="annotations")
    return FileResponse(path, media_type="text/tab-separated-values", filename=f"{key}_events.tsv")


@router.get(
    "/{slug}/versions/{version}/recordings/{key}/eeg",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def recording_eeg(
    slug: str, version: str, key: str, session: SessionDep, caller: SignedIn
) -> FileResponse:
    """The standardised EDF of a recording (public samples or admins)."""
    dv = queries.get_version(session, queries.get_dataset(session, slug), version)
    path = queries.recording_file(session, dv, key, viewer=caller.user, kind="eeg")
    return FileResponse(path, media_type="application/octet-stream", filename=f"{key}.edf")


CITATION_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {"application/x-bibtex": {}, "application/x-yaml": {}}}
}
CitationFormat = Annotated[
    citations.Format,
    Query(description="bibtex (one @misc entry) or cff (a CITATION.cff file, CFF 1.2.0)."),
]


@router.get(
    "/{slug}/versions/{version}/citation",
    response_class=Response,
    responses=CITATION_RESPONSES,
)
def cite_dataset_version(
    slug: str, version: str, session: SessionDep, _caller: Anyone, format: CitationFormat = "bibtex"
) -> Response:
    """Cite this dataset version: BibTeX or CITATION.cff, with its stable address."""
    dataset = queries.get_dataset(session, slug)
    dv = queries.get_version(session, dataset, version)
    return citation_response(citations.dataset_citation(dataset, dv), format)
