"""Recordings for workers on other hosts, found by the checksum their manifest records.

A worker that cannot see a dataset version's files (another host) asks for each recording
by its checksum, the key its cache is addressed by; the platform serves the standardised
EDF from where the dataset version is registered. Each fetch is counted against the
token's rate (``SZBENCH_WORKER_FETCHES_PER_MINUTE``) and logged with the token, recording
and dataset version, so an operator can tell which host took which held-out file.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import throttle
from szbench.config import get_settings
from szbench.errors import BadRequest, NotFound
from szbench.models import ApiToken, DatasetVersion, Recording

log = logging.getLogger(__name__)

_CHECKSUM = re.compile(r"^(sha256:)?([0-9a-f]{64})$")


@dataclass(frozen=True)
class Served:
    path: Path
    checksum: str


def normalise_checksum(value: str) -> str:
    """``sha256:<hex>`` from ``<hex>`` or ``sha256:<hex>``; BadRequest naming the field."""
    match = _CHECKSUM.match(value.strip().lower())
    if match is None:
        raise BadRequest(f"checksum: {value[:80]!r} is not a sha256 digest (64 hex digits)")
    return f"sha256:{match.group(2)}"


def recording_for_worker(
    session: Session, *, checksum: str, token: ApiToken, client: str | None, range_: str | None
) -> Served:
    """The file of the recording whose checksum is ``checksum``, counted and logged."""
    checksum = normalise_checksum(checksum)
    settings = get_settings()
    throttle.within_rate(
        session,
        kind="worker-fetch",
        value=str(token.id),
        limit=settings.worker_fetches_per_minute,
        window_s=60.0,
        what="recording fetches for this worker token",
    )
    # Every recording with this content is the same bytes: the first registered file that
    # is still on disk serves them.
    rows = session.execute(
        select(Recording.key, Recording.eeg_path, DatasetVersion.path, DatasetVersion.id)
        .join(DatasetVersion, Recording.dataset_version_id == DatasetVersion.id)
        .where(Recording.checksum.in_([checksum, checksum.removeprefix("sha256:")]))
        .order_by(Recording.id)
    ).all()
    for key, eeg_path, version_path, version_id in rows:
        path = Path(version_path) / eeg_path
        if path.is_file():
            log.info(
                "worker fetch: recording %s (%s) of dataset version %s to token %s (%s) "
                "from %s, range %s",
                key,
                checksum,
                version_id,
                token.id,
                token.prefix,
                client or "?",
                range_ or "all",
                extra={"event": "worker_fetch", "checksum": checksum, "token_id": token.id},
            )
            return Served(path=path, checksum=checksum)
    raise NotFound(f"checksum: no recording with checksum {checksum} is on this platform")
