"""The centre's side: the subscription to a hub, the versions it follows, the datasets it
runs them on, and the bundles it publishes.

- :func:`subscribe` records the hub (its address and this centre's name there); the
  centre's private key stays in its key file (:mod:`.signing`).
- :func:`sync` reads the hub's catalogue (versions whose owners allow external
  evaluation), records each version, makes a local copy of each followed one (its image
  pulled from the hub's registry by manifest digest, checked against the recorded image id
  by the worker before every run) and queues it on the newest version of each chosen
  dataset, as any local evaluation, uncharged, with this centre's workers, limits and
  scorer. A version the hub stops offering is queued no more.
- :func:`prepare` turns each finished, official evaluation into a draft bundle: the bytes
  that will leave, signed, with the next sequence number. What it carries is what this
  centre releases of it to anyone outside (:mod:`.released`), and nothing when that is
  nothing (the Ladder) or the dataset has fewer subjects than its minimum.
- :func:`approve` sends a draft's exact bytes (its digest must be the one the approver was
  shown); a dataset with ``auto_publish`` sends them without waiting (:func:`tick`).
- :func:`withdraw` drafts a withdrawal of a sent result.

Nothing is sent anywhere but to the subscribed hub, and only bundles.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.errors import BadRequest, Conflict, NotFound, ServiceUnavailable
from szbench.evaluations import service as evaluations
from szbench.federation import bundles, hub_client, released, signing
from szbench.federation.service import MIN_SUBJECTS
from szbench.models import (
    FAILED_OUTCOMES,
    Algorithm,
    AlgorithmVersion,
    BundleKind,
    Dataset,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    FederatedDataset,
    HubSubscription,
    HubVersion,
    OutgoingBundle,
    OutgoingState,
    Recording,
    RecordingRun,
    Role,
    User,
    VersionStatus,
    Visibility,
    as_utc,
)

log = logging.getLogger(__name__)

#: How often the tick reads the hub's catalogue (new versions are queued at most this late).
SYNC_INTERVAL_S = 900.0
#: The default minimum of subjects for a dataset's published results.
DEFAULT_MIN_SUBJECTS = 5
#: What every standardised recording is (the algorithm contract's input).
MONTAGE = "19 channels of the 10-20 system, common average reference"
_METRICS = bundles.METRICS


# --- the subscription -------------------------------------------------------------------------


def get_subscription(session: Session) -> HubSubscription:
    sub = session.scalars(select(HubSubscription).order_by(HubSubscription.id)).first()
    if sub is None:
        raise NotFound(
            "this centre subscribes to no hub: `szbench centre subscribe HUB_URL --as NAME`"
        )
    return sub


def find_subscription(session: Session) -> HubSubscription | None:
    return session.scalars(select(HubSubscription).order_by(HubSubscription.id)).first()


def subscribe(
    session: Session,
    *,
    hub_url: str,
    centre_name: str,
    follow_new: bool = True,
    by: User | None = None,
) -> HubSubscription:
    """Subscribe to the hub at ``hub_url``, under the name its admins registered this centre
    with. Needs this centre's key (``szbench centre keygen``)."""
    import re

    url = hub_client.check_hub_url(hub_url)
    if not re.match(bundles.NAME_PATTERN, centre_name):
        raise BadRequest("centre_name: the name the hub registered this centre under (a slug)")
    signing.load()
    if find_subscription(session) is not None:
        raise Conflict("this centre subscribes to a hub already (one hub per centre)")
    sub = HubSubscription(
        hub_url=url,
        centre_name=centre_name,
        follow_new=follow_new,
        created_by_id=by.id if by else None,
    )
    session.add(sub)
    session.flush()
    return sub


def update_subscription(session: Session, sub: HubSubscription, *, follow_new: bool | None) -> None:
    if follow_new is not None:
        sub.follow_new = follow_new
    session.flush()


def set_dataset(
    session: Session,
    sub: HubSubscription,
    slug: str,
    *,
    auto_publish: bool = False,
    min_subjects: int = DEFAULT_MIN_SUBJECTS,
) -> FederatedDataset:
    """Run the hub's followed versions on dataset ``slug`` (held-out) and publish from it."""
    dataset = session.scalar(select(Dataset).where(Dataset.slug == slug))
    if dataset is None:
        raise NotFound(f"dataset: no dataset called {slug!r}")
    if dataset.kind != DatasetKind.HELD_OUT:
        raise BadRequest(f"dataset: {slug!r} is a public sample; choose the centre's held-out data")
    if min_subjects < MIN_SUBJECTS:
        raise BadRequest(f"min_subjects: at least {MIN_SUBJECTS} (the hub's own minimum)")
    row = session.get(FederatedDataset, (sub.id, dataset.id))
    if row is None:
        row = FederatedDataset(subscription_id=sub.id, dataset_id=dataset.id)
        session.add(row)
    row.auto_publish = auto_publish
    row.min_subjects = min_subjects
    session.flush()
    return row


def remove_dataset(session: Session, sub: HubSubscription, slug: str) -> None:
    row = session.scalar(
        select(FederatedDataset)
        .join(Dataset)
        .where(FederatedDataset.subscription_id == sub.id, Dataset.slug == slug)
    )
    if row is None:
        raise NotFound(f"dataset: {slug!r} is not one this centre publishes from")
    session.delete(row)
    session.flush()


def datasets(session: Session, sub: HubSubscription) -> list[FederatedDataset]:
    return list(
        session.scalars(
            select(FederatedDataset)
            .join(Dataset)
            .where(FederatedDataset.subscription_id == sub.id)
            .order_by(Dataset.slug)
        )
    )


def versions(session: Session, sub: HubSubscription) -> list[HubVersion]:
    return list(
        session.scalars(
            select(HubVersion)
            .where(HubVersion.subscription_id == sub.id)
            .order_by(HubVersion.hub_version_id)
        )
    )


# --- syncing with the hub's catalogue ---------------------------------------------------------


@dataclass
class SyncReport:
    """What a sync did (for the CLI, the API and the log)."""

    offered: int = 0
    new: list[int] = field(default_factory=list)
    no_longer_offered: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    prepared: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


def _catalogue_rows(catalogue: dict[str, Any]) -> list[dict[str, Any]]:
    items = catalogue.get("versions")
    if not isinstance(items, list):
        raise ServiceUnavailable("the hub's catalogue has no list of versions")
    rows = []
    for item in items[:10_000]:
        if not isinstance(item, dict):
            continue
        try:
            rows.append(
                {
                    "id": int(item["id"]),
                    "algorithm_id": int(item["algorithm_id"]),
                    "algorithm": str(item["algorithm"])[:100],
                    "title": str(item.get("title") or item["algorithm"])[:200],
                    "authors": str(item.get("authors") or "")[:500],
                    "version": str(item["version"])[:100],
                    "image_digest": str(item["image_digest"]),
                    "registry_digest": str(item["registry_digest"]),
                    "reference": str(item["reference"])[:500],
                }
            )
        except (KeyError, TypeError, ValueError):
            log.warning("hub catalogue: an entry without the fields of a version was skipped")
    return rows


def sync(session: Session, sub: HubSubscription, catalogue: dict[str, Any]) -> SyncReport:
    """Record ``catalogue`` (the hub's answer, :func:`.hub_client.catalogue`), make local
    copies of the followed versions and queue them on the chosen datasets."""
    import re

    report = SyncReport()
    rows = _catalogue_rows(catalogue)
    report.offered = len(rows)
    known = {v.hub_version_id: v for v in versions(session, sub)}
    seen: set[int] = set()
    digest = re.compile(bundles.DIGEST_PATTERN)
    for item in rows:
        if not (digest.match(item["image_digest"]) and digest.match(item["registry_digest"])):
            continue
        seen.add(item["id"])
        row = known.get(item["id"])
        if row is None:
            row = HubVersion(
                subscription_id=sub.id,
                hub_version_id=item["id"],
                hub_algorithm_id=item["algorithm_id"],
                algorithm=item["algorithm"],
                version=item["version"],
                image_digest=item["image_digest"],
                registry_digest=item["registry_digest"],
                followed=sub.follow_new,
            )
            session.add(row)
            report.new.append(item["id"])
        elif (row.image_digest, row.registry_digest) != (
            item["image_digest"],
            item["registry_digest"],
        ):
            # A version's image never changes on the hub; a catalogue that says otherwise
            # is not believed, and the version is run no more.
            row.offered = False
            report.refused.append(f"hub version {row.hub_version_id}: its digests changed")
            continue
        row.offered = True
        session.flush()
        if row.followed:
            _local_copy(session, sub, row, item)
    for hub_id, row in known.items():
        if hub_id not in seen and row.offered:
            row.offered = False
            report.no_longer_offered.append(hub_id)
    registry = catalogue.get("registry")
    if isinstance(registry, str):
        sub.hub_registry = registry[:300]
    sub.last_synced_at = datetime.now(UTC)
    sub.last_sync_error = ""
    session.flush()
    report.queued, refused = queue_followed(session, sub)
    report.refused += refused
    return report


def _owner(session: Session, sub: HubSubscription) -> User:
    if sub.created_by_id is not None:
        user = session.get(User, sub.created_by_id)
        if user is not None:
            return user
    admin = session.scalars(
        select(User).where(User.role == Role.ADMIN, User.is_active.is_(True)).order_by(User.id)
    ).first()
    if admin is None:
        raise Conflict("this centre has no active admin to own the hub's algorithms")
    return admin


def _local_copy(
    session: Session, sub: HubSubscription, row: HubVersion, item: dict[str, Any]
) -> AlgorithmVersion:
    """The local algorithm version running ``row``'s image, made once."""
    if row.algorithm_version is not None:
        return row.algorithm_version
    owner = _owner(session, sub)
    name = f"hub-{row.hub_algorithm_id}-{row.algorithm}"[:100]
    algorithm = session.scalar(
        select(Algorithm).where(Algorithm.owner_id == owner.id, Algorithm.name == name)
    )
    if algorithm is None:
        algorithm = Algorithm(
            owner_id=owner.id,
            name=name,
            title=item["title"],
            authors=item["authors"],
            description=f"Algorithm {row.hub_algorithm_id} of the hub {sub.hub_url}, run here "
            "on this centre's data (federated evaluation).",
            visibility=Visibility.PUBLIC,
        )
        session.add(algorithm)
        session.flush()
    version = AlgorithmVersion(
        algorithm_id=algorithm.id,
        version=row.version,
        image_digest=row.image_digest,
        # Pulled by the hub's manifest digest; the worker checks the image id it gets.
        image_reference=item["reference"],
        status=VersionStatus.ACTIVE,
        status_message=f"hub version {row.hub_version_id} of {sub.hub_url}",
    )
    session.add(version)
    session.flush()
    row.algorithm_version_id = version.id
    row.algorithm_version = version
    session.flush()
    return version


def follow(
    session: Session, sub: HubSubscription, hub_version_id: int, followed: bool
) -> HubVersion:
    """Follow (queue on the chosen datasets) or stop following one of the hub's versions."""
    row = session.scalar(
        select(HubVersion).where(
            HubVersion.subscription_id == sub.id, HubVersion.hub_version_id == hub_version_id
        )
    )
    if row is None or (followed and not row.offered):
        raise NotFound(
            f"hub version {hub_version_id} is not offered for external evaluation by the hub "
            "(at the last sync): its author did not publish it or does not allow it"
        )
    row.followed = followed
    session.flush()
    return row


def queue_followed(session: Session, sub: HubSubscription) -> tuple[list[int], list[str]]:
    """Queue each followed, offered version on the newest active version of each chosen
    dataset where it has no evaluation yet. Returns the new evaluation ids and refusals."""
    settings = get_settings()
    queued: list[int] = []
    refused: list[str] = []
    chosen = datasets(session, sub)
    for row in versions(session, sub):
        version = row.algorithm_version
        if not (row.followed and row.offered and version is not None):
            continue
        if not settings.image_is_allowed(
            digest=version.image_digest, reference=version.image_reference
        ):
            refused.append(
                f"hub version {row.hub_version_id}: {version.image_reference} is not in "
                "SZBENCH_ALLOWED_IMAGES (add the hub's registry prefix to run its versions)"
            )
            continue
        for fed in chosen:
            dv = _newest_version(session, fed.dataset_id)
            if dv is None:
                continue
            exists = session.scalar(
                select(Evaluation.id).where(
                    Evaluation.algorithm_version_id == version.id,
                    Evaluation.dataset_version_id == dv.id,
                    Evaluation.kind == EvaluationKind.FULL,
                    Evaluation.status.not_in((EvaluationStatus.FAILED, EvaluationStatus.CANCELLED)),
                )
            )
            if exists is None:
                evaluation = evaluations.create_evaluation(
                    session, algorithm_version=version, dataset_version=dv
                )
                queued.append(evaluation.id)
    return queued, refused


def _newest_version(session: Session, dataset_id: int) -> DatasetVersion | None:
    return session.scalars(
        select(DatasetVersion)
        .where(DatasetVersion.dataset_id == dataset_id, DatasetVersion.is_active.is_(True))
        .order_by(DatasetVersion.id.desc())
    ).first()


# --- bundles ---------------------------------------------------------------------------------


def _next_sequence(session: Session, sub: HubSubscription) -> int:
    locked = session.execute(
        select(HubSubscription)
        .where(HubSubscription.id == sub.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).scalar_one()
    locked.last_sequence += 1
    session.flush()
    return locked.last_sequence


def _draft(
    session: Session, sub: HubSubscription, kind: BundleKind, body: dict[str, Any], **columns: Any
) -> OutgoingBundle:
    key = signing.load()
    raw = signing.public_bytes(key.public_key())
    sequence = _next_sequence(session, sub)
    header = {
        "format": bundles.FORMAT,
        "kind": kind.value,
        "hub": sub.hub_url,
        "centre": sub.centre_name,
        "key": signing.fingerprint(raw),
        "sequence": sequence,
        "created_at": bundles.timestamp(),
    }
    payload = bundles.encode({**header, **body})
    bundles.decode(payload)  # what the hub will check first: never draft what it refuses
    row = OutgoingBundle(
        subscription_id=sub.id,
        sequence=sequence,
        kind=kind,
        payload=payload.decode("utf-8"),
        payload_sha256=hashlib.sha256(payload).hexdigest(),
        signature=signing.sign(key, payload),
        **columns,
    )
    session.add(row)
    session.flush()
    return row


def _hub_version(session: Session, sub: HubSubscription, evaluation: Evaluation) -> HubVersion:
    row = session.scalar(
        select(HubVersion).where(
            HubVersion.subscription_id == sub.id,
            HubVersion.algorithm_version_id == evaluation.algorithm_version_id,
        )
    )
    if row is None:
        raise Conflict(f"evaluation {evaluation.id} is not of a version from the hub")
    return row


def _describe(
    session: Session, dataset: Dataset, dv: DatasetVersion, subjects: int, recordings: int
) -> dict[str, Any]:
    seconds = session.scalar(
        select(func.coalesce(func.sum(Recording.duration_s), 0.0)).where(
            Recording.dataset_version_id == dv.id
        )
    )
    rate = session.scalar(
        select(func.max(Recording.sfreq_hz)).where(Recording.dataset_version_id == dv.id)
    )
    standardisation = "szbench dataset prepare"
    manifest = Path(dv.path) / "manifest.json"
    try:
        doc = json.loads(manifest.read_text())
        standardisation += f", manifest format {int(doc.get('format', 0))}"
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return {
        "name": dataset.slug,
        "title": dataset.title[:200],
        "description": dataset.description[:2000],
        "version": dv.version,
        "subjects": subjects,
        "recordings": recordings,
        "hours": round(float(seconds or 0.0) / 3600, 1),
        "montage": f"{MONTAGE}, {float(rate or 256):g} Hz",
        "standardisation": standardisation,
        "manifest_sha256": dv.manifest_checksum[:100],
    }


def publishable_refusal(
    session: Session, sub: HubSubscription, evaluation: Evaluation
) -> str | None:
    """Why ``evaluation`` cannot be published (None when it can)."""
    if evaluation.status != EvaluationStatus.DONE or evaluation.result is None:
        return f"evaluation {evaluation.id} is {evaluation.status.value}, not done"
    if not evaluation.official or evaluation.kind != EvaluationKind.FULL:
        return f"evaluation {evaluation.id} is not an official full evaluation (SzCORE's defaults)"
    fed = session.get(FederatedDataset, (sub.id, evaluation.dataset_version.dataset_id))
    if fed is None:
        slug = evaluation.dataset_version.dataset.slug
        return f"dataset {slug!r} is not one this centre publishes from"
    view = released.view_of(evaluation)
    if released.rule_of(view) is None:
        return (
            f"evaluation {evaluation.id}: this centre's own rules release no figure of it to "
            "anyone outside (the Ladder)"
        )
    if evaluation.result.subjects < fed.min_subjects:
        return (
            f"evaluation {evaluation.id}: {evaluation.result.subjects} subjects, fewer than the "
            f"{fed.min_subjects} this centre publishes from its dataset"
        )
    return None


def prepare_one(session: Session, sub: HubSubscription, evaluation: Evaluation) -> OutgoingBundle:
    """The draft bundle of ``evaluation`` (:class:`Conflict` saying why there is none)."""
    why = publishable_refusal(session, sub, evaluation)
    if why is not None:
        raise Conflict(why)
    existing = session.scalar(
        select(OutgoingBundle).where(
            OutgoingBundle.evaluation_id == evaluation.id,
            OutgoingBundle.kind == BundleKind.RESULT,
            OutgoingBundle.state.in_((OutgoingState.DRAFT, OutgoingState.SENT)),
        )
    )
    if existing is not None:
        return existing
    hub_version = _hub_version(session, sub, evaluation)
    result = evaluation.result
    assert result is not None
    view = released.view_of(evaluation)
    rule = released.rule_of(view)
    fed = session.get_one(FederatedDataset, (sub.id, evaluation.dataset_version.dataset_id))
    metrics = {m: getattr(result, m) for m in _METRICS}
    failed = (
        session.scalar(
            select(func.count(RecordingRun.id)).where(
                RecordingRun.evaluation_id == evaluation.id,
                RecordingRun.outcome.in_(FAILED_OUTCOMES),
            )
        )
        or 0
    )
    dv = evaluation.dataset_version
    body = {
        "algorithm_version": {
            "hub_version_id": hub_version.hub_version_id,
            "image_digest": hub_version.image_digest,
            "registry_digest": hub_version.registry_digest,
        },
        "scorer": {"version": evaluation.scorer_version, "params": evaluation.scoring_params},
        "dataset": _describe(session, dv.dataset, dv, result.subjects, result.recordings),
        "release": {
            "level": view.level.value,
            "rule": rule,
            "decimals": released.decimals_of(view),
            "min_subjects": fed.min_subjects,
        },
        "figures": released.figures(view, metrics),
        "failed_recordings": int(failed),
    }
    return _draft(
        session, sub, BundleKind.RESULT, body, evaluation_id=evaluation.id, auto=fed.auto_publish
    )


def prepare(session: Session, sub: HubSubscription) -> list[OutgoingBundle]:
    """Drafts for every finished evaluation of a followed hub version on a chosen dataset
    that has none yet (those this centre may not publish are left, and logged)."""
    local_ids = select(HubVersion.algorithm_version_id).where(
        HubVersion.subscription_id == sub.id, HubVersion.algorithm_version_id.is_not(None)
    )
    dataset_ids = select(FederatedDataset.dataset_id).where(
        FederatedDataset.subscription_id == sub.id
    )
    drafted = select(OutgoingBundle.evaluation_id).where(
        OutgoingBundle.evaluation_id.is_not(None),
        OutgoingBundle.state.in_((OutgoingState.DRAFT, OutgoingState.SENT)),
    )
    candidates = session.scalars(
        select(Evaluation)
        .join(DatasetVersion)
        .where(
            Evaluation.algorithm_version_id.in_(local_ids),
            DatasetVersion.dataset_id.in_(dataset_ids),
            Evaluation.status == EvaluationStatus.DONE,
            Evaluation.kind == EvaluationKind.FULL,
            Evaluation.official.is_(True),
            Evaluation.id.not_in(drafted),
        )
        .order_by(Evaluation.id)
    ).all()
    made = []
    for evaluation in candidates:
        why = publishable_refusal(session, sub, evaluation)
        if why is not None:
            log.info("not published: %s", why)
            continue
        made.append(prepare_one(session, sub, evaluation))
    return made


def get_bundle(session: Session, bundle_id: int) -> OutgoingBundle:
    row = session.get(OutgoingBundle, bundle_id)
    if row is None:
        raise NotFound(f"no bundle {bundle_id} at this centre")
    return row


def list_bundles(session: Session, sub: HubSubscription) -> list[OutgoingBundle]:
    return list(
        session.scalars(
            select(OutgoingBundle)
            .where(OutgoingBundle.subscription_id == sub.id)
            .order_by(OutgoingBundle.sequence.desc())
        )
    )


def send(session: Session, bundle: OutgoingBundle, *, by: User | None = None) -> OutgoingBundle:
    """Send a draft's exact bytes to the hub; record the answer (sent or refused)."""
    sub = session.get_one(HubSubscription, bundle.subscription_id)
    answer = hub_client.publish(sub.hub_url, bundle.payload.encode("utf-8"), bundle.signature)
    bundle.approved_by_id = by.id if by else None
    bundle.hub_answer = f"{answer.status} {answer.detail}".strip()[:1000]
    if answer.status in (200, 201):
        bundle.state = OutgoingState.SENT
        bundle.sent_at = datetime.now(UTC)
        if bundle.kind == BundleKind.WITHDRAWAL and bundle.withdraws_id is not None:
            session.get_one(OutgoingBundle, bundle.withdraws_id).withdrawn_at = bundle.sent_at
    else:
        bundle.state = OutgoingState.REFUSED
    session.flush()
    return bundle


def approve(
    session: Session, bundle_id: int, *, payload_sha256: str, by: User | None
) -> OutgoingBundle:
    """Send draft ``bundle_id``, whose bytes the approver saw as ``payload_sha256``."""
    bundle = get_bundle(session, bundle_id)
    if bundle.state != OutgoingState.DRAFT:
        raise Conflict(f"bundle {bundle_id} is {bundle.state.value}, not a draft")
    if payload_sha256.strip().lower() != bundle.payload_sha256:
        raise Conflict(
            f"payload_sha256: bundle {bundle_id}'s bytes have the sha256 {bundle.payload_sha256}, "
            "not the one approved; look at them again"
        )
    return send(session, bundle, by=by)


def discard(session: Session, bundle_id: int) -> OutgoingBundle:
    bundle = get_bundle(session, bundle_id)
    if bundle.state != OutgoingState.DRAFT:
        raise Conflict(f"bundle {bundle_id} is {bundle.state.value}, not a draft")
    bundle.state = OutgoingState.DISCARDED
    session.flush()
    return bundle


def catch_up(session: Session, sub: HubSubscription) -> int:
    """Number the next bundles above the last sequence the hub accepted from this centre
    (after a restore from a backup, or a bundle refused as a rollback); returns it."""
    state = hub_client.centre(sub.hub_url, sub.centre_name)
    last = state.get("last_sequence")
    if isinstance(last, int) and not isinstance(last, bool) and last > sub.last_sequence:
        sub.last_sequence = last
        session.flush()
    return sub.last_sequence


def redraft(session: Session, bundle_id: int) -> OutgoingBundle:
    """A new draft (a new sequence, above the hub's last) of a refused or discarded result."""
    bundle = get_bundle(session, bundle_id)
    if (
        bundle.state not in (OutgoingState.REFUSED, OutgoingState.DISCARDED)
        or bundle.evaluation_id is None
    ):
        raise Conflict(
            f"bundle {bundle_id} is {bundle.state.value}: only a refused or discarded result "
            "is drafted again"
        )
    sub = session.get_one(HubSubscription, bundle.subscription_id)
    catch_up(session, sub)
    return prepare_one(session, sub, session.get_one(Evaluation, bundle.evaluation_id))


def withdraw(session: Session, bundle_id: int, *, reason: str) -> OutgoingBundle:
    """A draft withdrawal of sent result ``bundle_id`` (approved like any bundle)."""
    bundle = get_bundle(session, bundle_id)
    if bundle.kind != BundleKind.RESULT or bundle.state != OutgoingState.SENT:
        raise Conflict(f"bundle {bundle_id} is not a sent result")
    if bundle.withdrawn_at is not None:
        raise Conflict(f"bundle {bundle_id} is withdrawn already")
    pending = session.scalar(
        select(OutgoingBundle.id).where(
            OutgoingBundle.withdraws_id == bundle.id, OutgoingBundle.state == OutgoingState.DRAFT
        )
    )
    if pending is not None:
        return get_bundle(session, pending)
    sub = session.get_one(HubSubscription, bundle.subscription_id)
    catch_up(session, sub)
    body = {"withdraws": bundle.sequence, "reason": reason.strip()[:500]}
    return _draft(session, sub, BundleKind.WITHDRAWAL, body, withdraws_id=bundle.id)


# --- the tick ----------------------------------------------------------------------------------


def sync_due(sub: HubSubscription) -> bool:
    return sub.last_synced_at is None or (
        as_utc(sub.last_synced_at) + timedelta(seconds=SYNC_INTERVAL_S) <= datetime.now(UTC)
    )


def run_once(session: Session, sub: HubSubscription, *, fetch: bool = True) -> SyncReport:
    """One round: read the catalogue (``fetch``) and queue, draft bundles of finished
    evaluations, send the drafts of datasets that auto-publish."""
    report = SyncReport()
    if fetch:
        try:
            catalogue = hub_client.catalogue(sub.hub_url)
        except ServiceUnavailable as exc:
            sub.last_sync_error = exc.detail[:500]
            session.flush()
            raise
        report = sync(session, sub, catalogue)
        catch_up(session, sub)
    report.prepared = [b.id for b in prepare(session, sub)]
    auto = session.scalars(
        select(OutgoingBundle)
        .where(
            OutgoingBundle.subscription_id == sub.id,
            OutgoingBundle.state == OutgoingState.DRAFT,
            OutgoingBundle.auto.is_(True),
        )
        .order_by(OutgoingBundle.sequence)
    ).all()
    for bundle in auto:
        if send(session, bundle).state == OutgoingState.SENT:
            report.sent.append(bundle.id)
    return report


def tick() -> SyncReport | None:
    """What runs by itself (celery beat; the embedded worker's notifier): :func:`run_once`,
    reading the catalogue when it is due (every :data:`SYNC_INTERVAL_S`). None without a
    subscription; a hub that does not answer is logged and tried at the next tick."""
    with session_scope() as session:
        sub = find_subscription(session)
        if sub is None:
            return None
        try:
            return run_once(session, sub, fetch=sync_due(sub))
        except ServiceUnavailable as exc:
            log.warning("federation: %s", exc.detail)
    return None
