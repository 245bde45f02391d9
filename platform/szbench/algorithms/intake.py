"""The server-side steps of a finished upload, in the background: check the archive, then
push it to the registry (``SZBENCH_REGISTRY``), recording the step and its progress.

For a multi-GB image these take minutes (105 s for 1.17 GB on the 2-core development
machine). A client asks for them (``POST /api/v1/uploads/{id}/check``), is answered at
once, and polls the upload (``GET /api/v1/uploads/{id}``) for the step and its bytes done,
then submits the version, which takes the recorded result instead of reading the archive
again. No request lasts longer than a poll, so neither a client's nor a proxy's time-out
can cut off a big image, and the uploader sees what the server is doing.

The steps run in a thread of the process that was asked, holding the upload's lock
(:mod:`szbench.uploads.steps`); a process that dies leaves them *interrupted*, and asking
again starts them over (from the push, when the check had passed). Nothing here touches the
database: a refusal deletes the archive's bytes at once and is recorded in the steps, and
the upload's row follows on its next read (:func:`szbench.uploads.service.get_upload`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from szbench.algorithms import registry
from szbench.algorithms.image_check import ImageInfo, check_image_archive, image_parts
from szbench.config import Settings, get_settings
from szbench.errors import Conflict, InvalidSubmission, PayloadTooLarge, ServiceUnavailable
from szbench.uploads import service as uploads
from szbench.uploads import steps as recorded
from szbench.uploads.service import UploadSession
from szbench.uploads.steps import Steps

log = logging.getLogger(__name__)

# The record is rewritten at most this often while a step runs (a poll every second or so
# sees it move; the file is a few hundred bytes).
_WRITE_EVERY_S = 0.5
REFUSALS = (InvalidSubmission, PayloadTooLarge)
_PLATFORM_FAULT = (
    "the image registry did not take the image (a platform fault, not the archive's; "
    "the check passed and is kept): ask for the check again later"
)


@dataclass(frozen=True)
class Finished:
    """An upload whose steps are done: what its check found, where the registry has it."""

    info: ImageInfo
    registry_digest: str | None


def start(upload: UploadSession, settings: Settings | None = None) -> Steps:
    """Start ``upload``'s steps in the background unless they run (in any process) or are
    done for these very bytes; the record as it stands then.

    Raises
    ------
    Conflict
        The upload is refused or not complete (:func:`~szbench.uploads.service.completed_file`).
    """
    part = uploads.completed_file(upload)
    fd = recorded.claim(part)
    if fd is None:
        current = recorded.read(part)
        if current is None:
            raise Conflict(
                f"upload {upload.id}: another request is writing or checking it; try again"
            )
        return current
    try:
        state = recorded.file_state(fd)
        before = recorded.read(part)
        if before is not None and before.file == state and before.step == "done":
            os.close(fd)
            return before
        kept = before.result if before is not None and before.file == state else None
        first = "pushing" if kept is not None else "checking"
        steps = Steps(step=first, total_bytes=upload.size_bytes, file=state, result=kept)
        recorded.write(part, steps)
        thread = threading.Thread(
            target=_run,
            args=(fd, part, steps, settings or get_settings()),
            name=f"upload-steps-{upload.id}",
            daemon=True,
        )
        thread.start()
    except BaseException:
        os.close(fd)
        raise
    return dataclasses.replace(steps, running=True)


def finished(upload: UploadSession) -> Finished | None:
    """The result of ``upload``'s steps when they are done for its bytes as they are now;
    ``None`` when they never ran, ended otherwise or were interrupted.

    Raises
    ------
    Conflict
        While they run: the version is submitted once they are done.
    """
    part = uploads.completed_file(upload)
    steps = recorded.read(part)
    if steps is None:
        return None
    if steps.running:
        raise Conflict(
            f"upload_id: upload {upload.id} is being checked ({steps.step}, "
            f"{_percent(steps)}); poll GET /api/v1/uploads/{upload.id} and submit once its "
            "steps are done"
        )
    if steps.step != "done" or steps.result is None:
        return None
    fd = recorded.claim(part)
    if fd is None:
        return None
    try:
        if recorded.file_state(fd) != steps.file:
            return None
    finally:
        os.close(fd)
    return _finished(steps)


def _percent(steps: Steps) -> str:
    if not steps.total_bytes:
        return "starting"
    return f"{100 * steps.done_bytes // steps.total_bytes}% of {steps.total_bytes} bytes"


def _finished(steps: Steps) -> Finished:
    assert steps.result is not None
    return Finished(
        info=ImageInfo(**steps.result["info"]), registry_digest=steps.result.get("registry")
    )


class _Recorder:
    """Writes the record as the steps go, no more often than :data:`_WRITE_EVERY_S`."""

    def __init__(self, part: Path, steps: Steps) -> None:
        self.part = part
        self.steps = steps
        self.written = 0.0

    def update(self, **changes: object) -> None:
        self.steps = dataclasses.replace(self.steps, **changes)  # type: ignore[arg-type]
        recorded.write(self.part, self.steps)
        self.written = time.monotonic()

    def progress(self, step: str, done: int, total: int) -> None:
        if step == self.steps.step and time.monotonic() - self.written < _WRITE_EVERY_S:
            return
        self.update(step=step, done_bytes=done, total_bytes=total)


def _run(fd: int, part: Path, steps: Steps, settings: Settings) -> None:
    """The steps, holding the lock ``fd`` (released at the end, however they end)."""
    record = _Recorder(part, steps)
    try:
        if steps.result is None:
            info = check_image_archive(
                part, allow_root=settings.allow_root_images, progress=record.progress
            )
            parts = info.parts
            fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
            fields.pop("parts")
            record.update(result={"info": fields})
        else:
            info = _finished(steps).info
            parts = image_parts(part)
        digest = None
        if settings.registry:
            record.update(step="pushing", done_bytes=0)
            pushed = registry.push_archive(
                part,
                info.digest,
                settings,
                parts=parts,
                progress=lambda done, total: record.progress("pushing", done, total),
            )
            digest = pushed.digest
        assert record.steps.result is not None
        record.update(step="done", result={**record.steps.result, "registry": digest})
    except REFUSALS as exc:
        # Refused for good: the bytes go now; the row follows on its next read.
        with contextlib.suppress(FileNotFoundError):
            part.unlink()
        record.update(step="refused", detail=exc.detail, error=type(exc).__name__)
    except ServiceUnavailable as exc:
        # The registry's own words name its address: for the operator's log, not the page.
        log.warning("the steps of upload %s failed: %s", part.name, exc.detail)
        record.update(step="failed", detail=_PLATFORM_FAULT)
    except Exception:
        log.exception("the steps of upload %s failed", part.name)
        record.update(
            step="failed",
            detail="the server could not check the archive (an internal error, logged); "
            "ask for its check again",
        )
    finally:
        os.close(fd)
