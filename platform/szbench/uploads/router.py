"""``/api/v1/uploads``: resumable, streamed uploads of image archives.

1. ``POST /uploads`` with the filename and exact size: a session id (each user has a few
   open sessions at most, and a cap on the bytes they declare together).
2. ``PUT /uploads/{id}?offset=N`` (or ``Content-Range: bytes N-M/SIZE``) with raw bytes;
   repeat with the returned offset until ``complete``; after a dropped connection,
   ``GET /uploads/{id}`` tells where to resume. A body whose length differs from its
   ``Content-Range`` is refused and cut back.
3. ``POST /uploads/{id}/check``: the server checks the archive (and pushes it to the
   registry) in the background and answers at once; ``GET /uploads/{id}`` shows the step and
   its bytes done (``steps``) until ``done`` (or ``refused``, ``failed``).
4. ``POST /algorithms/{id}/versions`` with ``upload_id``: the version, from the steps'
   result (without step 3 the archive is checked in that request); an upload gives one
   version at most. ``DELETE /uploads/{id}`` abandons one (expired too).
"""

from __future__ import annotations

import re
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Request, Response, status

from szbench.algorithms import intake
from szbench.api.deps import SessionDep, SideSessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import StreamingSubmitter, Submitter
from szbench.errors import BadRequest
from szbench.models import UploadState
from szbench.uploads import service
from szbench.uploads.schemas import UploadCreate, UploadOut, UploadSteps

router = APIRouter(prefix="/uploads", tags=["uploads"], responses=ERROR_RESPONSES)

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def _steps(upload: service.UploadSession) -> UploadSteps | None:
    steps = upload.steps
    if upload.state is UploadState.REFUSED:
        done = steps.done_bytes if steps is not None else upload.size_bytes
        return UploadSteps(
            step="refused",
            done_bytes=done,
            total_bytes=steps.total_bytes if steps is not None else upload.size_bytes,
            running=False,
            detail=upload.refused_because,
        )
    if steps is None:
        return None
    info = (steps.result or {}).get("info") or {}
    return UploadSteps(
        step=steps.step,
        done_bytes=steps.done_bytes,
        total_bytes=steps.total_bytes,
        running=steps.running,
        detail=steps.detail or None,
        image_digest=info.get("digest"),
    )


def _out(upload: service.UploadSession) -> UploadOut:
    return UploadOut(
        id=upload.id,
        filename=upload.filename,
        size_bytes=upload.size_bytes,
        offset=upload.offset,
        complete=upload.complete,
        state=upload.state.value,
        expires_at=upload.expires_at,
        steps=_steps(upload),
    )


@router.post("", response_model=UploadOut, status_code=status.HTTP_201_CREATED)
def create_upload(body: UploadCreate, session: SessionDep, caller: Submitter) -> UploadOut:
    """Open an upload session for an image archive of a declared size."""
    assert caller.user is not None
    return _out(
        service.create_upload(
            session, caller.user, filename=body.filename, size_bytes=body.size_bytes
        )
    )


@router.get("", response_model=Page[UploadOut])
def list_uploads(session: SessionDep, caller: Submitter, page: PageDep) -> Page[UploadOut]:
    """The caller's own upload sessions, oldest first (to resume, submit or delete them)."""
    assert caller.user is not None
    rows, total = service.list_uploads(session, caller.user, limit=page.limit, offset=page.offset)
    return Page(items=[_out(u) for u in rows], total=total, limit=page.limit, offset=page.offset)


@router.get("/{upload_id}", response_model=UploadOut)
def get_upload(upload_id: str, session: SessionDep, caller: Submitter) -> UploadOut:
    """An upload session and its offset (where to resume)."""
    assert caller.user is not None
    return _out(service.get_upload(session, caller.user, upload_id))


def _chunk_range(request: Request, offset: int | None, size: int) -> tuple[int, int | None]:
    """Where the body goes and, with a ``Content-Range``, how long it must be."""
    header = request.headers.get("content-range")
    if header is None:
        if offset is None:
            raise BadRequest("offset: give ?offset=N or a Content-Range header")
        return offset, None
    match = _CONTENT_RANGE.match(header.strip())
    if not match:
        raise BadRequest(f"Content-Range: {header!r} is not 'bytes START-END/TOTAL'")
    start, end, total = int(match[1]), int(match[2]), match[3]
    if total != "*" and int(total) != size:
        raise BadRequest(f"Content-Range: total {total} differs from the declared size {size}")
    if end < start:
        raise BadRequest(f"Content-Range: end {end} is before start {start}")
    if end >= size:
        raise BadRequest(
            f"Content-Range: end {end} is past the declared size {size} (the last byte is "
            f"{size - 1})"
        )
    if offset is not None and offset != start:
        raise BadRequest(f"offset: {offset} disagrees with Content-Range start {start}")
    return start, end - start + 1


@router.put(
    "/{upload_id}",
    response_model=UploadOut,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def put_chunk(
    upload_id: str,
    request: Request,
    caller: StreamingSubmitter,
    # The side session the caller was resolved in (the same dependency, so the same
    # session): read the upload's row, then release it.
    session: SideSessionDep,
    offset: Annotated[
        int | None, Query(ge=0, le=2**50, description="Byte offset of this chunk.")
    ] = None,
) -> UploadOut:
    """Append raw bytes at an offset (streamed to disk; resumable)."""
    user = caller.user
    assert user is not None

    def read() -> service.UploadSession:
        try:
            return service.get_upload(session, user, upload_id)
        finally:
            session.commit()  # no connection held while the bytes arrive

    upload = await anyio.to_thread.run_sync(read)
    start, length = _chunk_range(request, offset, upload.size_bytes)
    upload.offset = await service.write_chunk(
        upload, offset=start, chunks=request.stream(), length=length
    )
    return _out(upload)


@router.post("/{upload_id}/check", response_model=UploadOut, status_code=status.HTTP_202_ACCEPTED)
def check_upload(upload_id: str, session: SessionDep, caller: Submitter) -> UploadOut:
    """Check a finished upload's archive (and push it to the registry) in the background;
    poll GET /uploads/{id} for the step and its progress, then submit the version."""
    assert caller.user is not None
    upload = service.get_upload(session, caller.user, upload_id)
    upload.steps = intake.start(upload)
    return _out(upload)


@router.delete("/{upload_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_upload(upload_id: str, session: SessionDep, caller: Submitter) -> Response:
    """Abandon an upload session (expired or refused ones too) and delete its bytes."""
    assert caller.user is not None
    upload = service.get_upload(session, caller.user, upload_id, allow_expired=True)
    service.delete_upload(session, upload)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
