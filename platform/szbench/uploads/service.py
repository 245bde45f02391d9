"""Resumable upload sessions, streamed to disk.

A client declares the size, then PUTs the bytes (all at once or in chunks at increasing
offsets); after a dropped connection it asks for the session's offset and goes on from
there. Bytes go straight from the request stream to ``<uploads_dir>/sessions/<id>.part``
and are never held in memory. A session's metadata sits next to it as ``<id>.json``, so
sessions need no table and survive restarts.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio

from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import BadRequest, Conflict, NotFound, PayloadTooLarge
from szbench.models import User

_ID = re.compile(r"^[0-9a-f]{32}$")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


@dataclass
class UploadSession:
    id: str
    owner_id: int
    filename: str
    size_bytes: int
    created_at: float
    offset: int = 0

    @property
    def complete(self) -> bool:
        return self.offset == self.size_bytes


def sessions_dir() -> Path:
    path = get_settings().effective_uploads_dir / "sessions"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _paths(upload_id: str) -> tuple[Path, Path]:
    base = sessions_dir()
    return base / f"{upload_id}.json", base / f"{upload_id}.part"


def create_upload(user: User, *, filename: str, size_bytes: int) -> UploadSession:
    """Open an upload session for ``size_bytes`` bytes of an image archive."""
    limit = get_settings().max_upload_bytes
    if size_bytes <= 0:
        raise BadRequest("size_bytes: must be positive")
    if size_bytes > limit:
        raise PayloadTooLarge(f"size_bytes: {size_bytes} bytes is over the limit of {limit} bytes")
    name = os.path.basename(filename.replace("\\", "/"))
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        raise BadRequest(f"filename: {name!r} is not a .tar or .tar.gz image archive")
    upload = UploadSession(
        id=uuid.uuid4().hex,
        owner_id=user.id,
        filename=name,
        size_bytes=size_bytes,
        created_at=time.time(),
    )
    meta, part = _paths(upload.id)
    part.touch()
    meta.write_text(json.dumps(asdict(upload)))
    return upload


def get_upload(user: User, upload_id: str) -> UploadSession:
    """The caller's session (admins: anyone's); others' and expired ones are not found."""
    if not _ID.match(upload_id):
        raise NotFound(f"upload {upload_id} does not exist")
    meta, part = _paths(upload_id)
    try:
        data = json.loads(meta.read_text())
    except FileNotFoundError:
        raise NotFound(f"upload {upload_id} does not exist") from None
    data.pop("offset", None)
    upload = UploadSession(**data)
    if upload.owner_id != user.id and not policy.is_admin(user):
        raise NotFound(f"upload {upload_id} does not exist")
    if time.time() - upload.created_at > get_settings().upload_session_ttl_s:
        raise NotFound(f"upload {upload_id} has expired; start a new one")
    upload.offset = part.stat().st_size if part.exists() else 0
    return upload


async def write_chunk(upload: UploadSession, *, offset: int, chunks: AsyncIterator[bytes]) -> int:
    """Append the request body at ``offset`` (which must be the session's current offset).

    Returns the new offset. A body that would run past the declared size is cut back to
    ``offset`` and refused, so the session stays resumable.
    """
    _, part = _paths(upload.id)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Conflict(f"upload {upload.id}: another request is writing to it") from None
        current = os.fstat(fd).st_size
        if offset != current:
            raise Conflict(
                f"offset: upload {upload.id} is at byte {current}, not {offset}; "
                f"resume from {current}"
            )
        os.lseek(fd, offset, os.SEEK_SET)
        written = offset
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                if written + len(chunk) > upload.size_bytes:
                    raise PayloadTooLarge(
                        f"upload {upload.id}: more than the declared {upload.size_bytes} bytes"
                    )
                await anyio.to_thread.run_sync(os.write, fd, chunk)
                written += len(chunk)
        except PayloadTooLarge:
            os.ftruncate(fd, offset)
            raise
        # A dropped connection leaves what arrived: the client resumes from the new offset.
        return written
    finally:
        os.close(fd)


def completed_file(upload: UploadSession) -> Path:
    """The archive of a finished session, else :class:`Conflict` naming what is missing."""
    if not upload.complete:
        raise Conflict(
            f"upload {upload.id} is incomplete: {upload.offset} of {upload.size_bytes} bytes"
        )
    return _paths(upload.id)[1]


def delete_upload(upload: UploadSession) -> None:
    for path in _paths(upload.id):
        path.unlink(missing_ok=True)


def store_image(source: Path, *, digest: str, gzip: bool) -> Path:
    """Move a checked archive to ``images/<hex>.tar[.gz]``; returns the path relative to
    the uploads folder. The name is content-addressed, so a second upload of the same
    image keeps the first file."""
    root = get_settings().effective_uploads_dir
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    hex_digest = digest.split(":", 1)[-1]
    target = images / f"{hex_digest}{'.tar.gz' if gzip else '.tar'}"
    if target.exists():
        source.unlink(missing_ok=True)
    else:
        shutil.move(source, target)
    return target.relative_to(root)


def import_file(user: User, path: Path) -> UploadSession:
    """An upload session filled from a local file (the CLI's local mode), copied in chunks."""
    size = path.stat().st_size
    upload = create_upload(user, filename=path.name, size_bytes=size)
    _, part = _paths(upload.id)
    with path.open("rb") as src, part.open("wb") as dst:
        shutil.copyfileobj(src, dst, 8 * 1024**2)
    upload.offset = size
    return upload
