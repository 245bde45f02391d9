"""Bodies of the upload-session routes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class UploadCreate(BaseModel):
    filename: str = Field(min_length=1, max_length=255, examples=["my-algo.tar.gz"])
    size_bytes: int = Field(gt=0, le=2**50, description="Exact size of the archive in bytes.")


class UploadSteps(BaseModel):
    """What the server does with the archive after its last byte, once asked
    (``POST /uploads/{id}/check``)."""

    step: Literal[
        "checking", "checking-user", "pushing", "done", "refused", "failed", "interrupted"
    ] = Field(
        description="checking: reading and checking the archive; checking-user: a second "
        "pass reading the image's /etc/passwd (a named User); pushing: sending it to the "
        "registry; done: submit the version; refused: the archive failed the check (detail "
        "says why; its bytes are deleted); failed: a platform fault (detail), ask again; "
        "interrupted: the server restarted meanwhile, ask again."
    )
    done_bytes: int = Field(description="Bytes of this step done (read, or pushed).")
    total_bytes: int = Field(description="Bytes this step has to do.")
    running: bool
    detail: str | None = Field(None, description="Why it was refused or failed.")
    image_digest: str | None = Field(None, description="The image id, once checked.")


class UploadOut(BaseModel):
    id: str
    filename: str
    size_bytes: int
    offset: int = Field(description="Bytes received so far: PUT the next chunk at this offset.")
    complete: bool
    state: Literal["open", "refused"] = Field(
        "open", description="refused: the archive failed the check; its bytes are deleted."
    )
    expires_at: datetime = Field(description="After this, the session is refused and swept.")
    steps: UploadSteps | None = Field(
        None, description="The server-side steps, once asked for (null before)."
    )
