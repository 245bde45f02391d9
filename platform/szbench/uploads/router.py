"""``/api/v1/uploads``: resumable, streamed uploads of image archives.

1. ``POST /uploads`` with the filename and exact size: a session id.
2. ``PUT /uploads/{id}?offset=N`` (or ``Content-Range: bytes N-M/SIZE``) with raw bytes;
   repeat with the returned offset until ``complete``; after a dropped connection,
   ``GET /uploads/{id}`` tells where to resume.
3. ``POST /algorithms/{id}/versions`` with ``upload_id``: the archive is checked and kept.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from szbench.api.errors import ERROR_RESPONSES
from szbench.auth.dependencies import StreamingSubmitter, Submitter
from szbench.errors import BadRequest
from szbench.uploads import service
from szbench.uploads.schemas import UploadCreate, UploadOut

router = APIRouter(prefix="/uploads", tags=["uploads"], responses=ERROR_RESPONSES)

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def _out(upload: service.UploadSession) -> UploadOut:
    return UploadOut(
        id=upload.id,
        filename=upload.filename,
        size_bytes=upload.size_bytes,
        offset=upload.offset,
        complete=upload.complete,
    )


@router.post("", response_model=UploadOut, status_code=status.HTTP_201_CREATED)
def create_upload(body: UploadCreate, caller: Submitter) -> UploadOut:
    """Open an upload session for an image archive of a declared size."""
    assert caller.user is not None
    return _out(
        service.create_upload(caller.user, filename=body.filename, size_bytes=body.size_bytes)
    )


@router.get("/{upload_id}", response_model=UploadOut)
def get_upload(upload_id: str, caller: Submitter) -> UploadOut:
    """An upload session and its offset (where to resume)."""
    assert caller.user is not None
    return _out(service.get_upload(caller.user, upload_id))


def _start_offset(request: Request, offset: int | None, size: int) -> int:
    header = request.headers.get("content-range")
    if header is None:
        if offset is None:
            raise BadRequest("offset: give ?offset=N or a Content-Range header")
        return offset
    match = _CONTENT_RANGE.match(header.strip())
    if not match:
        raise BadRequest(f"Content-Range: {header!r} is not 'bytes START-END/TOTAL'")
    start, end, total = match.groups()
    if total != "*" and int(total) != size:
        raise BadRequest(f"Content-Range: total {total} differs from the declared size {size}")
    if int(end) < int(start):
        raise BadRequest(f"Content-Range: end {end} is before start {start}")
    if offset is not None and offset != int(start):
        raise BadRequest(f"offset: {offset} disagrees with Content-Range start {start}")
    return int(start)


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
    offset: Annotated[
        int | None, Query(ge=0, le=2**50, description="Byte offset of this chunk.")
    ] = None,
) -> UploadOut:
    """Append raw bytes at an offset (streamed to disk; resumable)."""
    assert caller.user is not None
    upload = service.get_upload(caller.user, upload_id)
    start = _start_offset(request, offset, upload.size_bytes)
    upload.offset = await service.write_chunk(upload, offset=start, chunks=request.stream())
    return _out(upload)


@router.delete("/{upload_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_upload(upload_id: str, caller: Submitter) -> Response:
    """Abandon an upload session and delete its bytes."""
    assert caller.user is not None
    service.delete_upload(service.get_upload(caller.user, upload_id))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
