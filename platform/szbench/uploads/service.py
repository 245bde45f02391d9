"""Resumable upload sessions, streamed to disk.

A client declares the size, then PUTs the bytes (all at once or in chunks at increasing
offsets); after a dropped connection it asks for the session's offset and goes on from
there. Bytes go straight from the request stream to ``<uploads_dir>/sessions/<id>.part``
and are never held in memory; the offset is that file's size. The session itself is a row
of ``uploads`` (:class:`~szbench.models.Upload`), so that:

- each user has a bounded number of open sessions and declared bytes
  (``upload_max_open_sessions``, ``upload_max_open_bytes``), counted under a lock on the
  user's row, so concurrent opens cannot overshoot;
- submitting claims the row atomically (it is deleted in the transaction that records the
  version): one upload gives at most one version, however many submits race;
- :func:`sweep` removes expired and refused sessions with their bytes, and stray files;
- a refused session (its archive failed the check, which cost the API the reading of it)
  loses its bytes at once but counts as an open session of its owner for
  :data:`REFUSAL_MEMORY_S`: refused checks cannot be repeated for free.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, QuotaExceeded
from szbench.models import Upload, UploadState, User, as_utc
from szbench.quotas.service import lock_user
from szbench.uploads import steps as recorded
from szbench.uploads.steps import Steps

log = logging.getLogger(__name__)

_ID = re.compile(r"^[0-9a-f]{32}$")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# A refused upload counts as one of its owner's open sessions for an hour: its check cost the
# API the reading of the archive, so a user gets at most SZBENCH_UPLOAD_MAX_OPEN_SESSIONS
# refused checks an hour (docs/security.md, "Archive work and refusals"), while someone who
# fixes their image is not kept waiting long. A constant, as that bound is.
REFUSAL_MEMORY_S = 3600


@dataclass
class UploadSession:
    """A snapshot of an upload's row and of its bytes on disk (no database needed)."""

    id: str
    owner_id: int
    filename: str
    size_bytes: int
    created_at: datetime
    offset: int = 0
    state: UploadState = UploadState.OPEN
    refused_because: str = ""
    # The server-side steps after the last byte (checking, pushing), when asked for.
    steps: Steps | None = None

    @property
    def complete(self) -> bool:
        return self.offset == self.size_bytes

    @property
    def expires_at(self) -> datetime:
        return self.created_at + timedelta(seconds=get_settings().upload_session_ttl_s)


def sessions_dir() -> Path:
    path = get_settings().effective_uploads_dir / "sessions"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _paths(upload_id: str) -> tuple[Path, Path, Path]:
    # ``<id>.json``: where sessions kept their metadata before the table; swept as strays.
    base = sessions_dir()
    part = base / f"{upload_id}.part"
    return base / f"{upload_id}.json", part, recorded.record_path(part)


def _remove_files(upload_id: str) -> int:
    """Delete a session's files; the bytes they held."""
    freed = 0
    for path in _paths(upload_id):
        try:
            freed += path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            pass
    return freed


def _expiry_cutoff() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=get_settings().upload_session_ttl_s)


def _refusal_cutoff() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=REFUSAL_MEMORY_S)


def _refusal_ends(refused_at: datetime | None) -> str:
    """When a refusal at ``refused_at`` stops counting, for messages."""
    if refused_at is None:
        return "now"
    ends = as_utc(refused_at) + timedelta(seconds=REFUSAL_MEMORY_S)
    return f"{ends:%Y-%m-%d %H:%M} UTC"


def _snapshot(row: Upload) -> UploadSession:
    part = _paths(row.id)[1]
    steps = recorded.read(part) if row.state == UploadState.OPEN else None
    refused = steps is not None and steps.step == "refused"
    return UploadSession(
        id=row.id,
        owner_id=row.owner_id,
        filename=row.filename,
        size_bytes=row.size_bytes,
        created_at=as_utc(row.created_at),
        # A refusal by the steps deleted the bytes: the declared size was received.
        offset=row.size_bytes if refused else part.stat().st_size if part.exists() else 0,
        state=UploadState.REFUSED if refused else row.state,
        refused_because=steps.detail if steps is not None and refused else row.refused_because,
        steps=steps,
    )


def check_archive_declared(filename: str, size_bytes: int) -> str:
    """The archive's declared size and name as an upload would take them (its base name),
    or the refusal: also the submit page's preflight, before any byte is sent."""
    limit = get_settings().max_upload_bytes
    if size_bytes <= 0:
        raise BadRequest("size_bytes: must be positive")
    if size_bytes > limit:
        raise PayloadTooLarge(f"size_bytes: {size_bytes} bytes is over the limit of {limit} bytes")
    name = os.path.basename(filename.replace("\\", "/"))
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        raise BadRequest(f"filename: {name!r} is not a .tar or .tar.gz image archive")
    return name


def create_upload(session: Session, user: User, *, filename: str, size_bytes: int) -> UploadSession:
    """Open an upload session for ``size_bytes`` bytes of an image archive.

    Raises :class:`QuotaExceeded` when the user already has ``upload_max_open_sessions``
    open sessions, or when their open sessions would declare more than
    ``upload_max_open_bytes`` together.
    """
    settings = get_settings()
    name = check_archive_declared(filename, size_bytes)
    # The user's row is the lock that serialises their opens (and quota decisions): the
    # count below cannot be overtaken by a concurrent open.
    lock_user(session, user)
    _sweep_rows(session, Upload.owner_id == user.id)
    count, declared = session.execute(
        select(func.count(Upload.id), func.coalesce(func.sum(Upload.size_bytes), 0)).where(
            Upload.owner_id == user.id, Upload.state == UploadState.OPEN
        )
    ).one()
    # Refused ones left after the sweep are within their memory: each holds a place.
    refused = session.execute(
        select(func.count(Upload.id), func.min(Upload.refused_at)).where(
            Upload.owner_id == user.id, Upload.state == UploadState.REFUSED
        )
    ).one()
    if count + refused[0] >= settings.upload_max_open_sessions:
        frees = (
            f"; a refused one counts for {REFUSAL_MEMORY_S} s after its refusal, the next "
            f"until {_refusal_ends(refused[1])}"
            if refused[0]
            else ""
        )
        raise QuotaExceeded(
            f"you have {count} open and {refused[0]} recently refused uploads, the most "
            f"allowed (SZBENCH_UPLOAD_MAX_OPEN_SESSIONS={settings.upload_max_open_sessions})"
            f"{frees}; finish, submit or delete an open one first (GET /api/v1/uploads "
            "lists them)"
        )
    if declared + size_bytes > settings.upload_max_open_bytes:
        raise QuotaExceeded(
            f"size_bytes: your open uploads would declare {declared + size_bytes} bytes "
            f"together, over the limit of {settings.upload_max_open_bytes} "
            "(SZBENCH_UPLOAD_MAX_OPEN_BYTES); finish, submit or delete one first "
            "(GET /api/v1/uploads lists them)"
        )
    row = Upload(id=uuid.uuid4().hex, owner_id=user.id, filename=name, size_bytes=size_bytes)
    session.add(row)
    session.flush()
    _paths(row.id)[1].touch()
    return _snapshot(row)


def list_uploads(
    session: Session, user: User, *, limit: int, offset: int
) -> tuple[list[UploadSession], int]:
    """The caller's own sessions, oldest first (expired and refused ones until swept), so
    that a user at the cap can see which to finish or delete."""
    mine = Upload.owner_id == user.id
    total = session.scalar(select(func.count(Upload.id)).where(mine)) or 0
    rows = session.scalars(
        select(Upload)
        .where(mine)
        .order_by(Upload.created_at, Upload.id)
        .limit(limit)
        .offset(offset)
    )
    return [_snapshot(row) for row in rows], total


def get_upload(
    session: Session, user: User, upload_id: str, *, allow_expired: bool = False
) -> UploadSession:
    """The caller's session (admins: anyone's); others' are not found, expired ones neither
    unless ``allow_expired`` (their owner may still delete them)."""
    row = session.get(Upload, upload_id) if _ID.match(upload_id) else None
    if row is None or (row.owner_id != user.id and not policy.is_admin(user)):
        raise NotFound(f"upload {upload_id} does not exist")
    upload = _snapshot(row)
    if row.state == UploadState.OPEN and upload.state == UploadState.REFUSED:
        # Refused by the server-side steps, which keep off the database: recorded now, so
        # that it counts against its owner like any refusal.
        refuse_upload(session, row.id, upload.refused_because)
    if not allow_expired and upload.expires_at < datetime.now(UTC):
        raise NotFound(f"upload {upload_id} has expired; start a new one")
    return upload


def require_open(upload: UploadSession) -> None:
    """:class:`Conflict` for a refused upload, saying why it was refused."""
    if upload.state is UploadState.REFUSED:
        raise Conflict(
            f"upload {upload.id} was refused ({upload.refused_because}); "
            "its bytes are deleted: start a new upload"
        )


async def write_chunk(
    upload: UploadSession,
    *,
    offset: int,
    chunks: AsyncIterator[bytes],
    length: int | None = None,
) -> int:
    """Append the request body at ``offset`` (which must be the session's current offset).

    ``length``: the body's length as its ``Content-Range`` states it; a body of another
    length is refused. Returns the new offset. A body that would run past the declared size
    (or ``length``) is cut back to ``offset`` and refused, so the session stays resumable.
    """
    require_open(upload)
    part = _paths(upload.id)[1]
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
                if length is not None and written + len(chunk) - offset > length:
                    raise BadRequest(
                        f"Content-Range: the body is longer than the {length} bytes it states"
                    )
                if written + len(chunk) > upload.size_bytes:
                    raise PayloadTooLarge(
                        f"upload {upload.id}: more than the declared {upload.size_bytes} bytes"
                    )
                await anyio.to_thread.run_sync(os.write, fd, chunk)
                written += len(chunk)
            if length is not None and written - offset != length:
                raise BadRequest(
                    f"Content-Range: the body has {written - offset} bytes, "
                    f"the header states {length}"
                )
        except (PayloadTooLarge, BadRequest):
            os.ftruncate(fd, offset)
            raise
        # A dropped connection leaves what arrived: the client resumes from the new offset.
        return written
    finally:
        os.close(fd)


def completed_file(upload: UploadSession) -> Path:
    """The archive of a finished session, else :class:`Conflict` naming what is missing."""
    require_open(upload)
    if not upload.complete:
        raise Conflict(
            f"upload {upload.id} is incomplete: {upload.offset} of {upload.size_bytes} bytes"
        )
    return _paths(upload.id)[1]


def claim_upload(session: Session, upload: UploadSession) -> None:
    """Take ``upload`` for one version: its row is deleted in the caller's transaction.

    The delete is the claim: of concurrent submits of one upload, the database lets exactly
    one delete the row (the others wait for its lock, then find nothing); they get
    :class:`Conflict`. If the transaction rolls back, the upload is open again.
    """
    result = session.execute(
        delete(Upload).where(Upload.id == upload.id, Upload.state == UploadState.OPEN)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise Conflict(f"upload_id: upload {upload.id} has already been submitted (or was deleted)")


def refuse_upload(session: Session, upload_id: str, reason: str) -> None:
    """Mark an upload whose archive failed the check as refused and delete its bytes now.
    The row stays for :data:`REFUSAL_MEMORY_S`: a retry hears why, and it counts
    against its owner's open sessions meanwhile (:func:`create_upload`)."""
    session.execute(
        update(Upload)
        .where(Upload.id == upload_id, Upload.state == UploadState.OPEN)
        .values(
            state=UploadState.REFUSED, refused_because=reason[:2000], refused_at=datetime.now(UTC)
        )
    )
    _remove_files(upload_id)


def delete_upload(session: Session, upload: UploadSession) -> None:
    """Abandon ``upload``; a refused one keeps its place until its refusal is forgotten
    (its bytes are already gone), or deleting it would make refusals free to repeat."""
    if upload.state is UploadState.REFUSED:
        row = session.get(Upload, upload.id)
        raise Conflict(
            f"upload {upload.id} was refused ({upload.refused_because}); its bytes are "
            "deleted already, and it counts against your open uploads until "
            f"{_refusal_ends(row.refused_at if row else None)} "
            "(SZBENCH_UPLOAD_REFUSAL_MEMORY_S), then it goes by itself"
        )
    session.execute(delete(Upload).where(Upload.id == upload.id))
    _remove_files(upload.id)


@dataclass(frozen=True)
class SweepReport:
    expired: int
    refused: int
    stray_files: int
    bytes_freed: int


def _sweep_rows(session: Session, *where: object) -> tuple[int, int, int]:
    """Delete expired open sessions, and refused ones whose refusal is forgotten
    (:data:`REFUSAL_MEMORY_S`), matching ``where``, with their files."""
    expired = (Upload.state == UploadState.OPEN) & (Upload.created_at < _expiry_cutoff())
    forgotten = (Upload.state == UploadState.REFUSED) & (
        Upload.refused_at.is_(None) | (Upload.refused_at < _refusal_cutoff())
    )
    gone = list(
        session.execute(
            select(Upload.id, Upload.state).where(
                expired | forgotten,
                *where,  # type: ignore[arg-type]
            )
        )
    )
    if not gone:
        return 0, 0, 0
    session.execute(delete(Upload).where(Upload.id.in_([upload_id for upload_id, _ in gone])))
    freed = sum(_remove_files(upload_id) for upload_id, _ in gone)
    refused = sum(1 for _, state in gone if state == UploadState.REFUSED)
    return len(gone) - refused, refused, freed


def sweep(session: Session) -> SweepReport:
    """Remove expired and refused uploads with their bytes, and files in the sessions
    folder that belong to no session (left by a crash, or from before the table) once
    they are older than the session lifetime. Safe to run anywhere at any time."""
    expired, refused, freed = _sweep_rows(session)
    session.flush()
    known = set(session.scalars(select(Upload.id)))
    stray = 0
    oldest = time.time() - get_settings().upload_session_ttl_s
    for path in sessions_dir().iterdir():
        upload_id = path.name.split(".", 1)[0]
        if upload_id in known:
            continue
        try:
            stat = path.stat()
            # A file younger than a session's lifetime may be one being created right now.
            if stat.st_mtime >= oldest or not path.is_file():
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        stray += 1
        freed += stat.st_size
    report = SweepReport(expired=expired, refused=refused, stray_files=stray, bytes_freed=freed)
    if expired or refused or stray:
        log.info("upload sweep: %s", report)
    return report


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
    recorded.discard(source)
    return target.relative_to(root)


def import_file(session: Session, user: User, path: Path) -> UploadSession:
    """An upload session filled from a local file (the CLI's local mode), copied in chunks."""
    size = path.stat().st_size
    upload = create_upload(session, user, filename=path.name, size_bytes=size)
    part = _paths(upload.id)[1]
    with path.open("rb") as src, part.open("wb") as dst:
        shutil.copyfileobj(src, dst, 8 * 1024**2)
    upload.offset = size
    return upload
