"""Algorithms and their versions: creation, image checks, quotas, smoke-test request."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from szbench import changes
from szbench.algorithms import intake, registry
from szbench.algorithms.image_check import ImageInfo, ImageParts, Progress, check_image_archive
from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidSubmission,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)
from szbench.evaluations import service as evaluation_service
from szbench.links import check_link
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Phase,
    User,
    VersionStatus,
    Visibility,
)
from szbench.phases import service as phases
from szbench.quotas import service as quotas
from szbench.uploads import service as uploads
from szbench.uploads.service import UploadSession

log = logging.getLogger(__name__)

# name[:port]/path[:tag]@sha256:<hex>: a reference pinned to content, so a re-run runs
# the same bytes. Tag-only references are refused (see docs/api.md).
_REFERENCE = re.compile(
    r"^(?P<name>[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*(?::[0-9]+)?"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"@(?P<digest>sha256:[a-f0-9]{64})$"
)


def parse_image_reference(reference: str) -> str:
    """The ``sha256:...`` digest pinned in ``reference``, else :class:`BadRequest`."""
    match = _REFERENCE.match(reference.strip())
    if not match:
        raise BadRequest(
            f"image_reference: {reference!r} must look like 'registry/name[:tag]@sha256:<64 hex>'"
            " (a digest pins the exact image)"
        )
    return match["digest"]


def create_algorithm(
    session: Session,
    *,
    owner: User,
    name: str,
    title: str = "",
    authors: str = "",
    licence: str = "",
    description: str = "",
    visibility: Visibility = Visibility.PUBLIC,
    code_url: str = "",
    paper_url: str = "",
    external_evaluation: bool = False,
) -> Algorithm:
    code_url = check_link("code_url", code_url)
    paper_url = check_link("paper_url", paper_url)
    exists = session.scalar(
        select(Algorithm.id).where(Algorithm.owner_id == owner.id, Algorithm.name == name)
    )
    if exists is not None:
        raise Conflict(f"name: you already have an algorithm called {name!r}")
    algorithm = Algorithm(
        owner_id=owner.id,
        name=name,
        title=title or name,
        authors=authors,
        licence=licence,
        description=description,
        visibility=visibility,
        code_url=code_url,
        paper_url=paper_url,
        external_evaluation=external_evaluation,
    )
    session.add(algorithm)
    session.flush()
    return algorithm


def get_algorithm(session: Session, algorithm_id: int, *, viewer: User | None) -> Algorithm:
    algorithm = session.get(Algorithm, algorithm_id, options=[selectinload(Algorithm.versions)])
    # A private algorithm is "not found" for others, so its existence does not leak.
    if algorithm is None or not policy.can_view_algorithm(viewer, algorithm):
        raise NotFound(f"algorithm {algorithm_id} does not exist")
    return algorithm


def get_managed_algorithm(session: Session, algorithm_id: int, *, user: User) -> Algorithm:
    """An algorithm ``user`` may submit versions of (its owner, its team's members, admins)."""
    algorithm = get_algorithm(session, algorithm_id, viewer=user)
    if not policy.can_manage_algorithm(user, algorithm):
        raise Forbidden(f"algorithm {algorithm_id} belongs to another user")
    return algorithm


def get_editable_algorithm(session: Session, algorithm_id: int, *, user: User) -> Algorithm:
    """An algorithm ``user`` may change (its owner, admins): its team's members may not."""
    algorithm = get_algorithm(session, algorithm_id, viewer=user)
    if not policy.can_edit_algorithm(user, algorithm):
        raise Forbidden(f"algorithm {algorithm_id}: only its owner changes it")
    return algorithm


def list_algorithms(
    session: Session, *, viewer: User | None, mine: bool, limit: int, offset: int
) -> tuple[list[Algorithm], int]:
    where = [policy.visible_algorithms(viewer)]
    if mine:
        if viewer is None:
            return [], 0
        where.append(policy.algorithms_acted_for(viewer))
    total = session.scalar(select(func.count(Algorithm.id)).where(*where)) or 0
    rows = session.scalars(
        select(Algorithm).where(*where).order_by(Algorithm.id).limit(limit).offset(offset)
    ).all()
    return list(rows), total


def update_algorithm(
    session: Session, algorithm: Algorithm, *, withdrawn: bool | None = None, **fields: object
) -> Algorithm:
    """Change the fields given (None: unchanged); ``withdrawn`` takes the algorithm off every
    leaderboard (True) or puts it back (False)."""
    for key in ("code_url", "paper_url"):
        if isinstance(fields.get(key), str):
            fields[key] = check_link(key, str(fields[key]))
    for key, value in fields.items():
        if value is not None:
            setattr(algorithm, key, value)
    if withdrawn is True and algorithm.withdrawn_at is None:
        algorithm.withdrawn_at = datetime.now(UTC)
    elif withdrawn is False:
        algorithm.withdrawn_at = None
    session.flush()
    # Visibility, withdrawal and names show on its results and every board it is on.
    changes.algorithm_changed(session, algorithm.id)
    return algorithm


def check_quota(
    session: Session, *, user: User, phase: Phase | None, team_id: int | None = None
) -> None:
    """Raise :class:`QuotaExceeded` when ``user`` (or team ``team_id``, the algorithm's)
    may not submit another version now.

    Takes the quota locks (see :mod:`szbench.quotas.service`): the version must be
    recorded in the same transaction. Versions whose smoke test failed only through
    infrastructure faults do not count.
    """
    quotas.check_submission(session, user=user, phase=phase, team_id=team_id)


def _phase(session: Session, slug: str | None) -> Phase | None:
    if slug is None:
        return None
    phase = session.scalar(select(Phase).where(Phase.slug == slug))
    if phase is None:
        raise NotFound(f"phase: no phase called {slug!r}")
    refused = phases.refusal(phase)
    if refused is not None:
        raise Conflict(refused)
    return phase


@dataclass(frozen=True)
class CheckedUpload:
    """A finished upload whose archive passed :func:`check_image_archive`."""

    upload: UploadSession
    archive: Path
    info: ImageInfo
    # The manifest digest of the copy in SZBENCH_REGISTRY; None without a registry.
    registry_digest: str | None = None


def check_upload(upload: UploadSession, *, progress: Progress | None = None) -> CheckedUpload:
    """A finished upload (read by :func:`~szbench.uploads.service.get_upload`), its archive
    checked; :class:`InvalidSubmission` or :class:`PayloadTooLarge` when the archive is
    refused (then :func:`~szbench.uploads.service.refuse_upload` it).

    When the upload's server-side steps (:mod:`szbench.algorithms.intake`) are done, their
    result is taken and nothing is read again; while they run, :class:`Conflict`. Otherwise
    the check happens here: it reads the whole archive (minutes for a multi-GB image) and
    no database, so a route runs it before it takes a connection (see the submit route).
    With a registry (``SZBENCH_REGISTRY``) the accepted archive is then pushed there, so
    that workers on any host pull it by digest; a registry that does not answer is
    :class:`~szbench.errors.ServiceUnavailable` (the upload stays, to be submitted again).
    ``progress(step, done, total)``: bytes read or pushed, as they go.
    """
    archive = uploads.completed_file(upload)
    if not archive.exists():
        # A concurrent submit of the same upload has taken its bytes (or its owner deleted it).
        raise Conflict(f"upload_id: upload {upload.id} has already been submitted (or was deleted)")
    done = intake.finished(upload)
    if done is not None:
        return CheckedUpload(upload, archive, done.info, done.registry_digest)
    settings = get_settings()
    info = check_image_archive(archive, allow_root=settings.allow_root_images, progress=progress)
    pushed = (
        _push(
            archive,
            info.digest,
            parts=info.parts,
            progress=None if progress is None else lambda d, t: progress("pushing", d, t),
        )
        if settings.registry
        else None
    )
    return CheckedUpload(upload, archive, info, pushed.digest if pushed else None)


#: What a submitter reads when the registry does not take an accepted upload (its address,
#: and the registry's own words, are for the operator's log only).
REGISTRY_AWAY = (
    "the platform's image registry is unavailable, so the image could not be stored; the "
    "upload is kept: submit it again in a few minutes"
)


def _push(
    archive: Path,
    image_id: str,
    *,
    parts: ImageParts | None = None,
    progress: registry.Progress | None = None,
) -> registry.Pushed:
    """Push to the registry; a registry that fails answers the submitter without its
    address (kept in the API's log for the operator)."""
    try:
        return registry.push_archive(
            archive, image_id, get_settings(), parts=parts, progress=progress
        )
    except ServiceUnavailable as exc:
        log.error("pushing image %s to the registry failed: %s", image_id, exc.detail)
        raise ServiceUnavailable(REGISTRY_AWAY) from exc


ARCHIVE_REFUSALS = (InvalidSubmission, PayloadTooLarge)


def submit_version(
    session: Session,
    *,
    algorithm: Algorithm,
    user: User,
    version: str,
    upload_id: str | None = None,
    image_reference: str | None = None,
    phase: str | None = None,
    wants_gpu: bool = False,
    checked: CheckedUpload | None = None,
) -> AlgorithmVersion:
    """Create a version from a finished upload or a pinned image reference, then request
    its smoke test (enqueued after the commit). ``checked``: the upload already checked
    by :func:`check_upload`, so that it is not read again."""
    if not policy.can_manage_algorithm(user, algorithm):
        raise Forbidden(f"algorithm {algorithm.id} belongs to another user")
    if (upload_id is None) == (image_reference is None):
        raise BadRequest("give exactly one of upload_id and image_reference")
    taken = session.scalar(
        select(AlgorithmVersion.id).where(
            AlgorithmVersion.algorithm_id == algorithm.id, AlgorithmVersion.version == version
        )
    )
    if taken is not None:
        raise Conflict(f"version: {algorithm.name} already has a version {version!r}")
    phase_row = _phase(session, phase)
    check_quota(session, user=user, phase=phase_row, team_id=algorithm.team_id)

    row = AlgorithmVersion(
        algorithm_id=algorithm.id,
        version=version,
        phase_id=phase_row.id if phase_row else None,
        wants_gpu=wants_gpu,
        created_by_id=user.id,
        team_id=quotas.charged_team(user, algorithm),
    )
    if upload_id is not None:
        if checked is None or checked.upload.id != upload_id:
            upload = uploads.get_upload(session, user, upload_id)
            try:
                checked = check_upload(upload)
            except ARCHIVE_REFUSALS as exc:
                uploads.refuse_upload(session, upload.id, exc.detail)
                raise
        # One upload, one version: of concurrent submits, only one claims it.
        uploads.claim_upload(session, checked.upload)
        row.image_digest = checked.info.digest
        row.registry_digest = checked.registry_digest
        row.tarball_bytes = checked.upload.size_bytes
    else:
        assert image_reference is not None
        row.image_digest = parse_image_reference(image_reference)
        row.image_reference = image_reference.strip()
    if not get_settings().image_is_allowed(digest=row.image_digest, reference=row.image_reference):
        raise InvalidSubmission(
            f"image {row.image_reference or row.image_digest}: this server runs only the images "
            "its operators allow (SZBENCH_ALLOWED_IMAGES); ask them to add it"
        )
    session.add(row)
    session.flush()
    if checked is not None and upload_id is not None:
        # Moved once the version row stands, so a refused version leaves the upload whole.
        row.tarball_path = str(
            uploads.store_image(checked.archive, digest=checked.info.digest, gzip=checked.info.gzip)
        )
        session.flush()
    evaluation_service.request_smoke_test(session, row)
    return row


def preflight(
    session: Session,
    *,
    user: User,
    version: str,
    algorithm_id: int | None = None,
    name: str | None = None,
    phase: str | None = None,
    filename: str | None = None,
    size_bytes: int | None = None,
) -> Algorithm | None:
    """What :func:`submit_version` and the upload would refuse, checked before any byte of
    the archive is sent: the version label, the phase (unknown, not open yet, closed), the
    quotas, the archive's name and size. Writes nothing. Returns the algorithm the version
    would go to when it exists (``algorithm_id``, or the caller's own called ``name``)."""
    algorithm: Algorithm | None
    if algorithm_id is not None:
        algorithm = get_managed_algorithm(session, algorithm_id, user=user)
    else:
        if not name:
            raise BadRequest("name: give the new algorithm a short name")
        algorithm = find_algorithm(session, owner=user, name=name)
    if algorithm is not None:
        taken = session.scalar(
            select(AlgorithmVersion.id).where(
                AlgorithmVersion.algorithm_id == algorithm.id, AlgorithmVersion.version == version
            )
        )
        if taken is not None:
            raise Conflict(f"version: {algorithm.name} already has a version {version!r}")
    # The submission's own quota decision: the caller's, and the team's when the version
    # goes to a team's algorithm (a team's spent phase quota refuses here, not after the
    # upload).
    team_id = algorithm.team_id if algorithm is not None else None
    check_quota(session, user=user, phase=_phase(session, phase), team_id=team_id)
    if size_bytes is not None or filename is not None:
        uploads.check_archive_declared(filename or "", size_bytes or 0)
    return algorithm


def find_algorithm(session: Session, *, owner: User, name: str) -> Algorithm | None:
    """``owner``'s algorithm called ``name``, if there is one."""
    return session.scalars(
        select(Algorithm).where(Algorithm.owner_id == owner.id, Algorithm.name == name)
    ).first()


def register_trusted_version(
    session: Session,
    *,
    algorithm: Algorithm,
    digest: str,
    reference: str,
    message: str,
    wants_gpu: bool = False,
) -> AlgorithmVersion:
    """The version of ``algorithm`` that runs the image ``digest``, made active at once.

    For the operator's own machine (``szbench evaluate``): the image runs on the operator's
    data only, so no smoke test, quota or allow-list stands between it and the run. The
    same digest again is the same version, so its finished runs are reused. ``wants_gpu``
    (``--gpus``): a version of its own, on the gpu queue, next to the one without a GPU.
    """
    existing = session.scalars(
        select(AlgorithmVersion).where(
            AlgorithmVersion.algorithm_id == algorithm.id,
            AlgorithmVersion.image_digest == digest,
            AlgorithmVersion.wants_gpu.is_(wants_gpu),
        )
    ).first()
    if existing is not None:
        return existing
    label = digest.rsplit(":", 1)[-1][:16]
    row = AlgorithmVersion(
        algorithm_id=algorithm.id,
        version=f"{label}-gpu" if wants_gpu else label,
        image_digest=digest,
        image_reference=reference,
        status=VersionStatus.ACTIVE,
        status_message=message,
        wants_gpu=wants_gpu,
    )
    session.add(row)
    session.flush()
    return row


def get_managed_version(session: Session, version_id: int, *, user: User) -> AlgorithmVersion:
    """A version of one of ``user``'s algorithms (admins: any), named by a request field.

    A version of another user's private algorithm is missing exactly as one that does not
    exist (same error, same text): the answer must not tell that it exists, or whose it is.
    """
    row = session.get(AlgorithmVersion, version_id)
    if row is None or not policy.can_view_algorithm(user, row.algorithm):
        raise NotFound(f"algorithm_version_id: version {version_id} does not exist")
    if not policy.can_manage_algorithm(user, row.algorithm):
        raise Forbidden(f"algorithm_version_id: version {version_id} belongs to another user")
    return row


def get_version(session: Session, algorithm: Algorithm, version_id: int) -> AlgorithmVersion:
    row = session.get(AlgorithmVersion, version_id)
    if row is None or row.algorithm_id != algorithm.id:
        raise NotFound(f"algorithm {algorithm.id} has no version {version_id}")
    return row
