"""``/api/v1/algorithms``: algorithms, their versions and submissions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from szbench.algorithms import service
from szbench.algorithms.schemas import (
    AlgorithmCreate,
    AlgorithmDetail,
    AlgorithmOut,
    AlgorithmUpdate,
    PreflightIn,
    PreflightOut,
    VersionCreate,
    VersionOut,
)
from szbench.api.deps import SessionDep, SideSessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import IdPath, Page, PageDep
from szbench.auth.dependencies import Anyone, SignedIn, StreamingSubmitter, Submitter
from szbench.leaderboards import service as leaderboards
from szbench.uploads import service as uploads

router = APIRouter(prefix="/algorithms", tags=["algorithms"], responses=ERROR_RESPONSES)


@router.get("", response_model=Page[AlgorithmOut])
def list_algorithms(
    session: SessionDep,
    caller: Anyone,
    page: PageDep,
    mine: Annotated[bool, Query(description="Only the caller's own algorithms.")] = False,
) -> Page[AlgorithmOut]:
    """Algorithms the caller may see (public ones and their own)."""
    rows, total = service.list_algorithms(
        session, viewer=caller.user, mine=mine, limit=page.limit, offset=page.offset
    )
    return Page(
        items=[AlgorithmOut.model_validate(a) for a in rows],
        total=total,
        limit=page.limit,
        offset=page.offset,
    )


@router.post("", response_model=AlgorithmOut, status_code=status.HTTP_201_CREATED)
def create_algorithm(body: AlgorithmCreate, session: SessionDep, caller: Submitter) -> AlgorithmOut:
    """Create an algorithm (then submit versions of it)."""
    assert caller.user is not None
    algorithm = service.create_algorithm(session, owner=caller.user, **body.model_dump())
    return AlgorithmOut.model_validate(algorithm)


@router.get("/{algorithm_id}", response_model=AlgorithmDetail)
def get_algorithm(algorithm_id: IdPath, session: SessionDep, caller: Anyone) -> AlgorithmDetail:
    """One algorithm with its versions."""
    return AlgorithmDetail.model_validate(
        service.get_algorithm(session, algorithm_id, viewer=caller.user)
    )


@router.patch("/{algorithm_id}", response_model=AlgorithmOut)
def update_algorithm(
    algorithm_id: IdPath, body: AlgorithmUpdate, session: SessionDep, caller: SignedIn
) -> AlgorithmOut:
    """Change an algorithm's fields, links or visibility, or withdraw it (owner or admin)."""
    assert caller.user is not None
    algorithm = service.get_editable_algorithm(session, algorithm_id, user=caller.user)
    return AlgorithmOut.model_validate(
        service.update_algorithm(session, algorithm, **body.model_dump())
    )


@router.get("/{algorithm_id}/versions", response_model=Page[VersionOut])
def list_versions(
    algorithm_id: IdPath, session: SessionDep, caller: Anyone, page: PageDep
) -> Page[VersionOut]:
    """An algorithm's versions, oldest first."""
    algorithm = service.get_algorithm(session, algorithm_id, viewer=caller.user)
    versions = algorithm.versions
    window = versions[page.offset : page.offset + page.limit]
    twins = leaderboards.earlier_same_image(session, window, viewer=caller.user)
    return Page(
        items=[
            VersionOut.model_validate(v).model_copy(update={"same_image_as": twins.get(v.id)})
            for v in window
        ],
        total=len(versions),
        limit=page.limit,
        offset=page.offset,
    )


@router.post("/preflight", response_model=PreflightOut)
def preflight(body: PreflightIn, session: SessionDep, caller: Submitter) -> PreflightOut:
    """Check a submission before sending its archive: the version label, the phase and its
    dates, the quotas, the archive's name and size (the same refusals as the submit itself;
    nothing is written). A new algorithm's name that the caller already has answers its id."""
    assert caller.user is not None
    found = service.preflight(session, user=caller.user, **body.model_dump())
    return PreflightOut(existing_algorithm_id=found.id if found is not None else None)


@router.post(
    "/{algorithm_id}/versions", response_model=VersionOut, status_code=status.HTTP_201_CREATED
)
def submit_version(
    algorithm_id: IdPath,
    body: VersionCreate,
    session: SideSessionDep,
    caller: StreamingSubmitter,
) -> VersionOut:
    """Submit a version (a finished upload or a pinned image reference); starts its smoke test."""
    user = caller.user
    assert user is not None
    upload_id = body.upload_id if body.image_reference is None else None
    algorithm = service.get_managed_algorithm(session, algorithm_id, user=user)
    upload = uploads.get_upload(session, user, upload_id) if upload_id is not None else None
    # The archive check reads all of it: with no database connection held (the session is
    # outside the request slots), so that large submissions arriving together cannot take
    # the pool.
    session.commit()
    checked = None
    if upload is not None:
        try:
            checked = service.check_upload(upload)
        except service.ARCHIVE_REFUSALS as exc:
            # Refused for good: its bytes go now, not at the session's expiry.
            uploads.refuse_upload(session, upload.id, exc.detail)
            session.commit()
            raise
    row = service.submit_version(
        session, algorithm=algorithm, user=user, checked=checked, **body.model_dump()
    )
    session.flush()
    # Committed (and the smoke test enqueued) before the answer, by the session dependency.
    return VersionOut.model_validate(row)


@router.get("/{algorithm_id}/versions/{version_id}", response_model=VersionOut)
def get_version(
    algorithm_id: IdPath, version_id: IdPath, session: SessionDep, caller: Anyone
) -> VersionOut:
    """One version: image digest, status and the smoke test's message."""
    algorithm = service.get_algorithm(session, algorithm_id, viewer=caller.user)
    version = service.get_version(session, algorithm, version_id)
    twin = leaderboards.earlier_same_image(session, [version], viewer=caller.user).get(version.id)
    return VersionOut.model_validate(version).model_copy(update={"same_image_as": twin})
