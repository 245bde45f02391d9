"""Bodies of the upload-session routes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class UploadCreate(BaseModel):
    filename: str = Field(min_length=1, max_length=255, examples=["my-algo.tar.gz"])
    size_bytes: int = Field(gt=0, le=2**50, description="Exact size of the archive in bytes.")


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
