"""The hub's side: centres and their keys, the catalogue, verifying and storing bundles.

A bundle is accepted only when every check passes, in this order (each refusal is counted
per claimed centre and reason, :class:`~szbench.models.BundleRefusal`, and answered with the
error envelope naming what failed):

1. the bytes: at most :data:`~.bundles.MAX_BYTES`, canonical JSON, every field in bounds;
2. the hub: the bundle names this hub (``SZBENCH_PUBLIC_URL``);
3. the centre and its key: a registered centre, a key of *that* centre (a centre posts only
   for itself) in the ``active`` state, and a valid Ed25519 signature of exactly these bytes;
4. the sequence: higher than every sequence accepted from that centre (the same one again
   is a replay, a lower one a rollback);
5. for a result: the hub's version exists, is still offered for external evaluation (public,
   not withdrawn, active, its owner allows it: an author cannot have a centre publish on a
   version they did not offer), its image and registry digests are the recorded ones, the
   scorer is one this hub knows with SzCORE's default parameters, the dataset has at least
   :data:`MIN_SUBJECTS` subjects and the centre's own minimum, and every figure is one the
   declared rule releases (:func:`.released.grid_refusal`);
6. for a withdrawal: it names an earlier, not yet withdrawn result of the same centre.

The bundle is then stored as received (bytes and signature); a withdrawal marks its result
withdrawn, which stays in the record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.errors import BadRequest, Conflict, NotFound, SzbenchError
from szbench.federation import bundles, released, signing
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    BundleKind,
    BundleRefusal,
    Centre,
    CentreKey,
    Evaluation,
    ExternalResult,
    KeyState,
    Phase,
    VersionStatus,
    Visibility,
)

#: The fewest subjects a published result may span, whatever a centre chose.
MIN_SUBJECTS = 3
#: The header carrying the signature: ``ed25519=<base64url>``.
SIGNATURE_HEADER = "X-Szbench-Signature"
SIGNATURE_SCHEME = "ed25519="


class BundleRefused(SzbenchError):
    """A bundle the hub does not accept; ``reason`` is the counted code."""

    def __init__(self, reason: str, detail: str, status_code: int = 422) -> None:
        super().__init__(detail)
        self.reason = reason
        self.status_code = status_code

    @property
    def name(self) -> str:
        return "BundleRefused"


# --- centres and keys ------------------------------------------------------------------------


def hub_identity() -> str:
    """How bundles name this hub: its public address (``SZBENCH_PUBLIC_URL``)."""
    url = get_settings().public_url
    if not url:
        raise Conflict(
            "SZBENCH_PUBLIC_URL is not set: bundles name the hub by its address, so a hub "
            "needs it before it registers centres"
        )
    return url


def get_centre(session: Session, name: str) -> Centre:
    centre = session.scalar(select(Centre).where(Centre.name == name))
    if centre is None:
        raise NotFound(f"no centre called {name!r}")
    return centre


def list_centres(session: Session) -> list[Centre]:
    return list(session.scalars(select(Centre).order_by(Centre.name)))


def _add_key(session: Session, centre: Centre, public_key: str) -> CentreKey:
    raw = signing.parse_public_key(public_key)
    fp = signing.fingerprint(raw)
    if session.scalar(select(CentreKey.id).where(CentreKey.fingerprint == fp)) is not None:
        raise Conflict(f"public_key: the key {fp} is registered already")
    key = CentreKey(centre=centre, public_key=signing.b64url(raw), fingerprint=fp)
    session.add(key)
    session.flush()
    return key


def register_centre(
    session: Session, *, name: str, public_key: str, title: str = "", contact: str = ""
) -> Centre:
    """Register a centre and its first public key (hub admins)."""
    hub_identity()
    if not re.match(bundles.NAME_PATTERN, name):
        raise BadRequest(
            "name: lower-case letters, digits, '.', '_' and '-', starting with a letter or "
            "digit, at most 100 characters"
        )
    if session.scalar(select(Centre.id).where(Centre.name == name)) is not None:
        raise Conflict(f"name: a centre called {name!r} exists already")
    centre = Centre(name=name, title=title or name, contact=contact)
    session.add(centre)
    session.flush()
    _add_key(session, centre, public_key)
    return centre


def rotate_key(session: Session, centre: Centre, public_key: str) -> CentreKey:
    """Add ``public_key`` as the centre's active key; its other active keys are retired
    (what they signed stays; they sign nothing new)."""
    now = datetime.now(UTC)
    for key in centre.keys:
        if key.state == KeyState.ACTIVE:
            key.state = KeyState.RETIRED
            key.retired_at = now
    return _add_key(session, centre, public_key)


def revoke_key(session: Session, centre: Centre, fingerprint: str) -> CentreKey:
    """Revoke one of the centre's keys (compromised): nothing new is accepted with it, and
    the results it signed are shown as signed by a revoked key."""
    key = next((k for k in centre.keys if k.fingerprint == fingerprint), None)
    if key is None:
        raise NotFound(f"centre {centre.name!r} has no key {fingerprint}")
    if key.state != KeyState.REVOKED:
        key.state = KeyState.REVOKED
        key.revoked_at = datetime.now(UTC)
    session.flush()
    return key


# --- the catalogue ---------------------------------------------------------------------------


def offered_versions_filter() -> Any:
    """SQL filter on :class:`AlgorithmVersion` joined to :class:`Algorithm` (and outer-joined
    to its :class:`Phase`): the versions centres may run. The owner allowed external
    evaluation; the algorithm is public and not withdrawn; the version is active, in the
    registry, and not in a hidden phase (unpublished)."""
    return (
        (Algorithm.external_evaluation.is_(True))
        & (Algorithm.visibility == Visibility.PUBLIC)
        & Algorithm.withdrawn_at.is_(None)
        & (AlgorithmVersion.status == VersionStatus.ACTIVE)
        & AlgorithmVersion.registry_digest.is_not(None)
        & AlgorithmVersion.image_digest.is_not(None)
        & ((Phase.id.is_(None)) | Phase.hidden.is_(False))
    )


def _offered_query() -> Any:
    return (
        select(AlgorithmVersion, Algorithm)
        .join(Algorithm, Algorithm.id == AlgorithmVersion.algorithm_id)
        .outerjoin(Phase, Phase.id == AlgorithmVersion.phase_id)
        .where(offered_versions_filter())
    )


def offered_versions(session: Session) -> list[tuple[AlgorithmVersion, Algorithm]]:
    rows = session.execute(_offered_query().order_by(AlgorithmVersion.id)).all()
    return [(v, a) for v, a in rows]


def is_offered(session: Session, version_id: int) -> bool:
    return (
        session.execute(_offered_query().where(AlgorithmVersion.id == version_id)).first()
        is not None
    )


def known_scorers(session: Session) -> set[str]:
    from szbench_scoring import SCORER_VERSION

    seen = session.scalars(select(Evaluation.scorer_version).distinct()).all()
    return {SCORER_VERSION, *(s for s in seen if s)}


# --- receiving -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """A verified bundle and what it did."""

    row: ExternalResult
    withdrew: ExternalResult | None = None


def _count(session: Session, centre: str, reason: str, detail: str) -> None:
    row = session.get(BundleRefusal, (centre, reason))
    if row is None:
        row = BundleRefusal(centre=centre, reason=reason, count=0)
        session.add(row)
    row.count += 1
    row.last_detail = detail[:500]
    row.last_at = datetime.now(UTC)
    session.flush()


def receive(session: Session, payload: bytes, signature_header: str | None) -> Received:
    """Verify and store one bundle; :class:`BundleRefused` (already counted in ``session``,
    which the caller commits) when any check fails."""
    try:
        return _receive(session, payload, signature_header)
    except BundleRefused as refused:
        claimed, _ = bundles.header_claims(payload)
        _count(session, claimed, refused.reason, refused.detail)
        raise


def _signature(header: str | None) -> str:
    if not header or not header.startswith(SIGNATURE_SCHEME):
        raise BundleRefused(
            "unsigned",
            f"the {SIGNATURE_HEADER} header must be '{SIGNATURE_SCHEME}<base64url signature>'",
            401,
        )
    return header.removeprefix(SIGNATURE_SCHEME).strip()


def _receive(session: Session, payload: bytes, signature_header: str | None) -> Received:
    signature = _signature(signature_header)
    try:
        bundle = bundles.decode(payload)
    except bundles.Malformed as exc:
        raise BundleRefused("malformed", exc.detail, 400) from None
    hub = hub_identity()
    if bundle.hub.rstrip("/") != hub:
        raise BundleRefused("wrong_hub", f"hub: the bundle is for {bundle.hub!r}, this is {hub!r}")
    centre = session.scalar(select(Centre).where(Centre.name == bundle.centre).with_for_update())
    if centre is None:
        raise BundleRefused(
            "unknown_centre", f"centre: {bundle.centre!r} is not registered here", 401
        )
    key = session.scalar(select(CentreKey).where(CentreKey.fingerprint == bundle.key))
    if key is None:
        raise BundleRefused("unknown_key", f"key: {bundle.key} is not registered here", 401)
    if key.centre_id != centre.id:
        raise BundleRefused(
            "wrong_centre",
            f"key: {bundle.key} is not a key of centre {centre.name!r} (a centre posts only "
            "for itself)",
            403,
        )
    if not signing.verify(signing.unb64url(key.public_key, what="key"), payload, signature):
        raise BundleRefused(
            "bad_signature",
            f"signature: not a signature of these bytes by key {key.fingerprint} (forged or "
            "altered in transit)",
            401,
        )
    if key.state != KeyState.ACTIVE:
        when = key.revoked_at if key.state == KeyState.REVOKED else key.retired_at
        raise BundleRefused(
            f"key_{key.state.value}",
            f"key: {key.fingerprint} was {key.state.value}"
            + (f" on {when:%Y-%m-%d %H:%M} UTC" if when else "")
            + "; sign with the centre's active key",
            403,
        )
    digest = hashlib.sha256(payload).hexdigest()
    if bundle.sequence <= centre.last_sequence:
        seen = session.scalar(
            select(ExternalResult.id).where(ExternalResult.payload_sha256 == digest)
        )
        same = session.scalar(
            select(ExternalResult.id).where(
                ExternalResult.centre_id == centre.id, ExternalResult.sequence == bundle.sequence
            )
        )
        if seen is not None or same is not None:
            raise BundleRefused(
                "replay",
                f"sequence: {bundle.sequence} was accepted from {centre.name!r} already "
                "(a bundle is accepted once)",
                409,
            )
        raise BundleRefused(
            "rollback",
            f"sequence: {bundle.sequence} is not above {centre.last_sequence}, the last "
            f"accepted from {centre.name!r} (an older bundle cannot follow a newer one)",
            409,
        )
    row = ExternalResult(
        centre_id=centre.id,
        key_id=key.id,
        sequence=bundle.sequence,
        kind=BundleKind(bundle.kind),
        payload=payload.decode("utf-8"),
        payload_sha256=digest,
        signature=signature,
    )
    withdrew = None
    if isinstance(bundle, bundles.ResultBundle):
        _check_result(session, bundle)
        row.algorithm_version_id = bundle.algorithm_version.hub_version_id
        row.dataset = bundle.dataset.name
    else:
        withdrew = session.scalar(
            select(ExternalResult).where(
                ExternalResult.centre_id == centre.id,
                ExternalResult.sequence == bundle.withdraws,
                ExternalResult.kind == BundleKind.RESULT,
            )
        )
        if withdrew is None:
            raise BundleRefused(
                "unknown_result",
                f"withdraws: {centre.name!r} has no result with sequence {bundle.withdraws}",
                404,
            )
        if withdrew.withdrawn_at is not None:
            raise BundleRefused(
                "withdrawn_already",
                f"withdraws: the result with sequence {bundle.withdraws} is withdrawn already",
                409,
            )
        row.withdraws_sequence = bundle.withdraws
        withdrew.withdrawn_at = datetime.now(UTC)
        withdrew.withdrawn_by_sequence = bundle.sequence
    centre.last_sequence = bundle.sequence
    session.add(row)
    session.flush()
    return Received(row, withdrew)


def _check_result(session: Session, bundle: bundles.ResultBundle) -> None:
    from szbench_scoring import ScoringParams

    ref = bundle.algorithm_version
    version = session.get(AlgorithmVersion, ref.hub_version_id)
    if version is None or not is_offered(session, version.id):
        raise BundleRefused(
            "version_not_offered",
            f"algorithm_version: version {ref.hub_version_id} is not offered for external "
            "evaluation here (its author did not publish it or does not allow it)",
        )
    if ref.image_digest != version.image_digest or ref.registry_digest != version.registry_digest:
        raise BundleRefused(
            "digest_mismatch",
            f"algorithm_version: the digests {ref.image_digest} / {ref.registry_digest} are not "
            f"those of version {version.id} ({version.image_digest} / {version.registry_digest})",
        )
    if bundle.scorer.version not in known_scorers(session):
        raise BundleRefused(
            "unknown_scorer",
            f"scorer.version: {bundle.scorer.version!r} is not a scorer this hub knows",
        )
    # Canonical JSON writes 90.0 as 90; the two compare equal.
    if dict(bundle.scorer.params) != dataclasses.asdict(ScoringParams()):
        raise BundleRefused(
            "unofficial_scoring",
            "scorer.params: only results scored with SzCORE's default parameters are published",
        )
    release = bundle.release
    least = max(MIN_SUBJECTS, release.min_subjects)
    if bundle.dataset.subjects < least:
        raise BundleRefused(
            "figure_not_released",
            f"dataset.subjects: {bundle.dataset.subjects} subjects, fewer than the {least} a "
            "published result spans",
        )
    for metric, value in bundle.figures.items():
        why = released.grid_refusal(release.rule, release.decimals, metric, value)
        if why is not None:
            raise BundleRefused(
                "figure_not_released",
                f"figures.{why} (release rule {release.rule}, {release.decimals} decimals)",
            )


# --- reading ---------------------------------------------------------------------------------


def results(
    session: Session,
    *,
    centre_id: int | None = None,
    version_ids: list[int] | None = None,
    include_withdrawn: bool = True,
) -> list[ExternalResult]:
    """Stored result bundles, newest first (withdrawals are read through their result)."""
    query = select(ExternalResult).where(ExternalResult.kind == BundleKind.RESULT)
    if centre_id is not None:
        query = query.where(ExternalResult.centre_id == centre_id)
    if version_ids is not None:
        query = query.where(ExternalResult.algorithm_version_id.in_(version_ids))
    if not include_withdrawn:
        query = query.where(ExternalResult.withdrawn_at.is_(None))
    return list(session.scalars(query.order_by(ExternalResult.id.desc())))


def get_result(session: Session, result_id: int) -> ExternalResult:
    row = session.get(ExternalResult, result_id)
    if row is None:
        raise NotFound(f"no external result {result_id}")
    return row


def parsed(row: ExternalResult) -> bundles.Bundle:
    """The stored bundle, read again from the bytes as received."""
    return bundles.decode(row.payload.encode("utf-8"))


def refusals(session: Session) -> list[BundleRefusal]:
    return list(
        session.scalars(select(BundleRefusal).order_by(BundleRefusal.centre, BundleRefusal.reason))
    )


def snapshot_entries(session: Session, version_ids: set[int]) -> list[dict[str, Any]]:
    """The results centres published for these versions, as a leaderboard snapshot freezes
    them (withdrawn ones included and marked): what each bundle said, and its sha256."""
    out = []
    for row in results(session, version_ids=sorted(version_ids)):
        bundle = parsed(row)
        assert isinstance(bundle, bundles.ResultBundle)
        out.append(
            {
                "id": row.id,
                "centre": row.centre.name,
                "sequence": row.sequence,
                "algorithm_version_id": row.algorithm_version_id,
                "dataset": bundle.dataset.name,
                "dataset_version": bundle.dataset.version,
                "subjects": bundle.dataset.subjects,
                "release": bundle.release.rule,
                "figures": dict(bundle.figures),
                "payload_sha256": row.payload_sha256,
                "key": row.key.fingerprint,
                "withdrawn": row.withdrawn_at is not None,
            }
        )
    return out
