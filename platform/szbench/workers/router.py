"""``/api/v1/worker``: what a worker on another host fetches, with a worker token."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.auth.cookies import client_address
from szbench.auth.dependencies import WorkerOnly
from szbench.workers import service

router = APIRouter(prefix="/worker", tags=["workers"], responses=ERROR_RESPONSES)


@router.get(
    "/recordings/{checksum}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 206: {"description": "A range"}},
)
def fetch_recording(
    checksum: str, request: Request, session: SessionDep, caller: WorkerOnly
) -> FileResponse:
    """The standardised EDF whose sha256 is ``checksum`` (``sha256:<hex>`` or ``<hex>``),
    for a worker that cannot see the dataset's files. Resumable: send ``Range: bytes=N-``.
    Worker tokens only; rate-limited and logged per token."""
    assert caller.token is not None
    served = service.recording_for_worker(
        session,
        checksum=checksum,
        token=caller.token,
        client=client_address(request),
        range_=request.headers.get("range"),
    )
    # The session commits (the rate count) before the bytes go: no connection is held
    # while a large file streams.
    return FileResponse(
        served.path,
        media_type="application/octet-stream",
        headers={"X-Szbench-Checksum": served.checksum, "Cache-Control": "no-store"},
    )
