"""The read side of federation: external results, centres and the centre's own state, as
the API and the pages show them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import citations
from szbench.auth import policy
from szbench.federation import bundles, centre, hub_client, service, signing
from szbench.federation.schemas import (
    CentreDetail,
    CentreOut,
    DatasetOut,
    ExternalResultDetail,
    ExternalResultOut,
    FederatedDatasetOut,
    HubVersionOut,
    KeyInfo,
    KeyOut,
    OutgoingDetail,
    SubscriptionOut,
)
from szbench.models import (
    AlgorithmVersion,
    Centre,
    ExternalResult,
    HubSubscription,
    OutgoingBundle,
    User,
)


def result_out(session: Session, row: ExternalResult, *, detail: bool = False) -> ExternalResultOut:
    bundle = service.parsed(row)
    assert isinstance(bundle, bundles.ResultBundle)
    version = (
        session.get(AlgorithmVersion, row.algorithm_version_id)
        if row.algorithm_version_id
        else None
    )
    reason = None
    if row.withdrawn_by_sequence is not None:
        withdrawal = session.scalar(
            select(ExternalResult).where(
                ExternalResult.centre_id == row.centre_id,
                ExternalResult.sequence == row.withdrawn_by_sequence,
            )
        )
        if withdrawal is not None:
            parsed = service.parsed(withdrawal)
            reason = parsed.reason if isinstance(parsed, bundles.WithdrawalBundle) else None
    fields = {
        "id": row.id,
        "centre": row.centre.name,
        "sequence": row.sequence,
        "received_at": row.received_at,
        "algorithm_version_id": row.algorithm_version_id,
        "algorithm_id": version.algorithm_id if version else None,
        "algorithm": (version.algorithm.title or version.algorithm.name) if version else "",
        "algorithm_version": version.version if version else "",
        "dataset": DatasetOut(**bundle.dataset.model_dump()),
        "release": bundle.release.model_dump(),
        "figures": {k: (None if v is None else float(v)) for k, v in bundle.figures.items()},
        "failed_recordings": bundle.failed_recordings,
        "scorer_version": bundle.scorer.version,
        "key": row.key.fingerprint,
        "key_state": row.key.state,
        "withdrawn_at": row.withdrawn_at,
        "withdrawn_by_sequence": row.withdrawn_by_sequence,
        "withdrawal_reason": reason,
    }
    if not detail:
        return ExternalResultOut(**fields)
    return ExternalResultDetail(
        **fields,
        payload=row.payload,
        payload_sha256=row.payload_sha256,
        signature=row.signature,
        public_key=row.key.public_key,
    )


def visible_results(
    session: Session,
    viewer: User | None,
    *,
    centre_id: int | None = None,
    algorithm_id: int | None = None,
) -> list[ExternalResultOut]:
    """Accepted results whose algorithm the viewer may see (all are of public algorithms
    when accepted; an algorithm made private later hides them)."""
    version_ids = None
    if algorithm_id is not None:
        version_ids = list(
            session.scalars(
                select(AlgorithmVersion.id).where(AlgorithmVersion.algorithm_id == algorithm_id)
            )
        )
    rows = service.results(session, centre_id=centre_id, version_ids=version_ids)
    shown = []
    for row in rows:
        version = (
            session.get(AlgorithmVersion, row.algorithm_version_id)
            if row.algorithm_version_id
            else None
        )
        if version is not None and not policy.can_view_algorithm(viewer, version.algorithm):
            continue
        shown.append(result_out(session, row))
    return shown


def datasets_of(session: Session, centre_id: int) -> list[DatasetOut]:
    """Each of a centre's datasets as its newest bundle describes it."""
    seen: dict[str, DatasetOut] = {}
    for row in service.results(session, centre_id=centre_id):
        if row.dataset not in seen:
            bundle = service.parsed(row)
            assert isinstance(bundle, bundles.ResultBundle)
            seen[row.dataset] = DatasetOut(**bundle.dataset.model_dump())
    return [seen[k] for k in sorted(seen)]


def centre_out(session: Session, row: Centre, viewer: User | None) -> CentreOut:
    results = service.results(session, centre_id=row.id)
    return CentreOut(
        name=row.name,
        title=row.title,
        contact=row.contact if policy.is_admin(viewer) else None,
        created_at=row.created_at,
        last_sequence=row.last_sequence,
        keys=[KeyOut.model_validate(k, from_attributes=True) for k in row.keys],
        results=len(results),
        withdrawn=sum(1 for r in results if r.withdrawn_at is not None),
    )


def centre_detail(session: Session, row: Centre, viewer: User | None) -> CentreDetail:
    return CentreDetail(
        **centre_out(session, row, viewer).model_dump(),
        datasets=datasets_of(session, row.id),
        external_results=visible_results(session, viewer, centre_id=row.id),
    )


def external_board(
    session: Session, viewer: User | None
) -> tuple[list[str], list[dict[str, object]]]:
    """The external-validation view: one row per algorithm version with results from
    centres, one column per centre (its newest result there, withdrawn ones apart)."""
    centres = [c.name for c in service.list_centres(session)]
    rows: dict[int, dict[str, object]] = {}
    for result in visible_results(session, viewer):
        if result.algorithm_version_id is None:
            continue
        entry = rows.setdefault(
            result.algorithm_version_id,
            {
                "algorithm_id": result.algorithm_id,
                "algorithm": result.algorithm,
                "algorithm_version": result.algorithm_version,
                "algorithm_version_id": result.algorithm_version_id,
                "cells": {},
            },
        )
        cells = entry["cells"]
        assert isinstance(cells, dict)
        if result.withdrawn_at is None:
            cells.setdefault(result.centre, []).append(result)
    ordered = [rows[k] for k in sorted(rows, key=lambda k: (str(rows[k]["algorithm"]), k))]
    return centres, ordered


# --- the centre's side -------------------------------------------------------------------------


def subscription_out(session: Session, sub: HubSubscription) -> SubscriptionOut:
    try:
        public_key, fp = signing.own_public_key()
        key = KeyInfo(public_key=public_key, fingerprint=fp)
    except Exception:
        key = None
    return SubscriptionOut(
        hub_url=sub.hub_url,
        centre_name=sub.centre_name,
        follow_new=sub.follow_new,
        hub_registry=sub.hub_registry,
        last_sequence=sub.last_sequence,
        last_synced_at=sub.last_synced_at,
        last_sync_error=sub.last_sync_error,
        key=key,
        datasets=[
            FederatedDatasetOut(
                dataset=f.dataset.slug,
                title=f.dataset.title,
                disclosure=f.dataset.disclosure.value,
                auto_publish=f.auto_publish,
                min_subjects=f.min_subjects,
            )
            for f in centre.datasets(session, sub)
        ],
        versions=[
            HubVersionOut.model_validate(v, from_attributes=True)
            for v in centre.versions(session, sub)
        ],
    )


def outgoing_detail(session: Session, bundle: OutgoingBundle) -> OutgoingDetail:
    sub = session.get_one(HubSubscription, bundle.subscription_id)
    return OutgoingDetail.model_validate(
        {
            **{
                c: getattr(bundle, c)
                for c in (
                    "id",
                    "sequence",
                    "kind",
                    "state",
                    "evaluation_id",
                    "withdraws_id",
                    "auto",
                    "created_at",
                    "sent_at",
                    "withdrawn_at",
                    "hub_answer",
                    "payload_sha256",
                )
            },
            "method": "POST",
            "url": sub.hub_url + hub_client.BUNDLES_PATH,
            "headers": {
                "Content-Type": "application/json",
                service.SIGNATURE_HEADER: service.SIGNATURE_SCHEME + bundle.signature,
            },
            "payload": bundle.payload,
        }
    )


def citation_of(session: Session, row: ExternalResult) -> citations.Citation:
    """One centre's published result: the algorithm version it ran, the centre's dataset,
    the released figures and the bundle's sha256 (which pins exactly what was published)."""
    out = result_out(session, row)
    version = (
        session.get(AlgorithmVersion, row.algorithm_version_id)
        if row.algorithm_version_id
        else None
    )
    f1 = out.figures.get("event_f1")
    notes = [
        f"Evaluated at centre {out.centre} on its dataset {out.dataset.name} version "
        f"{out.dataset.version} ({out.dataset.subjects} subjects, {out.dataset.hours:g} h)",
        f"Event F1 {'n/a' if f1 is None else f'{f1:g}'} ({out.release.get('rule')} release)",
        f"Image {version.image_digest if version else ''}",
        f"Scorer {out.scorer_version}",
        f"Signed bundle {out.sequence} of {out.centre}, sha256 {row.payload_sha256}",
    ]
    if out.withdrawn_at is not None:
        notes.append(f"Withdrawn by the centre on {out.withdrawn_at:%Y-%m-%d}")
    return citations.Citation(
        key=f"szbench-external-{out.centre}-{out.sequence}",
        kind="software",
        title=out.algorithm or "algorithm",
        authors=citations.split_authors(version.algorithm.authors) if version else [],
        url=citations.site_url("centres", out.centre) + f"?result={row.id}",
        released=row.received_at,
        version=out.algorithm_version,
        notes=notes,
        keywords=["seizure detection", "EEG", "SzCORE", "external validation"],
    )
