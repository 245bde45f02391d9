"""``/api/v1/federation``: the hub's centres, catalogue and external results; the centre's
subscription, datasets, followed versions and outgoing bundles (docs/federation.md)."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Header, Path, Query, Request, Response, status

from szbench.algorithms.registry import repository
from szbench.api.deps import SessionDep
from szbench.api.downloads import citation_response
from szbench.api.errors import ERROR_RESPONSES, envelope
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.config import get_settings
from szbench.datasets.router import CITATION_RESPONSES, CitationFormat
from szbench.errors import NotFound, PayloadTooLarge
from szbench.federation import bundles, centre, queries, service, signing
from szbench.federation.schemas import (
    ApproveIn,
    Catalogue,
    CatalogueVersion,
    CentreCreate,
    CentreDetail,
    CentreOut,
    ExternalResultDetail,
    ExternalResultOut,
    FederatedDatasetIn,
    FederatedDatasetOut,
    FollowIn,
    HubVersionOut,
    KeyCreate,
    KeyInfo,
    OutgoingDetail,
    OutgoingOut,
    PrepareIn,
    RefusalOut,
    SubscriptionCreate,
    SubscriptionOut,
    SubscriptionUpdate,
    SyncOut,
    WithdrawIn,
)
from szbench.models import Evaluation

router = APIRouter(prefix="/federation", tags=["federation"], responses=ERROR_RESPONSES)

CentreName = Annotated[str, Path(max_length=100)]
BundleId = Annotated[int, Path(ge=1, le=2**31 - 1)]

# --- hub side ----------------------------------------------------------------------------------


@router.get("/catalogue", response_model=Catalogue)
def catalogue(session: SessionDep, _caller: Anyone) -> Catalogue:
    """Versions centres may run: public, active, and allowed external evaluation by their owners."""
    from szbench_scoring import SCORER_VERSION

    settings = get_settings()
    repo = repository(settings) if settings.registry else ""
    return Catalogue(
        hub=settings.public_url,
        registry=repo,
        scorer_version=SCORER_VERSION,
        versions=[
            CatalogueVersion(
                id=v.id,
                algorithm_id=a.id,
                algorithm=a.name,
                title=a.title,
                authors=a.authors,
                version=v.version,
                image_digest=v.image_digest or "",
                registry_digest=v.registry_digest or "",
                reference=f"{repo}@{v.registry_digest}",
            )
            for v, a in service.offered_versions(session)
        ],
    )


async def _bounded_body(request: Request) -> bytes:
    # A bundle is small: never read more than one can be, whatever a sender claims.
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > bundles.MAX_BYTES:
            raise PayloadTooLarge(
                f"bundle: more than the {bundles.MAX_BYTES} bytes a bundle may be"
            )
    return body


@router.post(
    "/bundles",
    response_model=ExternalResultOut,
    status_code=status.HTTP_201_CREATED,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "The bundle's canonical bytes (docs/federation.md), signed in "
            "the X-Szbench-Signature header.",
        }
    },
)
async def receive_bundle(
    request: Request,
    session: SessionDep,
    x_szbench_signature: Annotated[
        str | None, Header(description="ed25519=<base64url signature of the body>")
    ] = None,
) -> Response:
    """A centre publishes a signed result or withdrawal; refusals are counted."""
    body = await _bounded_body(request)

    def receive() -> ExternalResultOut:
        received = service.receive(session, body, x_szbench_signature)
        return queries.result_out(session, received.withdrew or received.row)

    try:
        # The database work in a worker thread, as for every sync route.
        out = await anyio.to_thread.run_sync(receive)
    except service.BundleRefused as refused:
        # Answered, not raised: the session commits the refusal's count.
        answer: Response = envelope(refused.status_code, refused.name, refused.detail)
        return answer
    return Response(out.model_dump_json(), status_code=201, media_type="application/json")


@router.get("/centres", response_model=list[CentreOut])
def list_centres(session: SessionDep, caller: Anyone) -> list[CentreOut]:
    """Centres registered here, with their keys' fingerprints and states."""
    return [queries.centre_out(session, c, caller.user) for c in service.list_centres(session)]


@router.post("/centres", response_model=CentreOut, status_code=status.HTTP_201_CREATED)
def register_centre(body: CentreCreate, session: SessionDep, admin: AdminOnly) -> CentreOut:
    """Register a centre and its Ed25519 public key (admins)."""
    row = service.register_centre(session, **body.model_dump())
    return queries.centre_out(session, row, admin.user)


@router.get("/centres/{name}", response_model=CentreDetail)
def get_centre(name: CentreName, session: SessionDep, caller: Anyone) -> CentreDetail:
    """A centre: its keys, its datasets as its bundles describe them, its results."""
    return queries.centre_detail(session, service.get_centre(session, name), caller.user)


@router.post("/centres/{name}/keys", response_model=CentreOut, status_code=status.HTTP_201_CREATED)
def rotate_key(
    name: CentreName, body: KeyCreate, session: SessionDep, admin: AdminOnly
) -> CentreOut:
    """Rotate: the new key becomes the centre's active key, the old active one retires."""
    row = service.get_centre(session, name)
    service.rotate_key(session, row, body.public_key)
    return queries.centre_out(session, row, admin.user)


@router.post("/centres/{name}/keys/{fingerprint}/revoke", response_model=CentreOut)
def revoke_key(
    name: CentreName,
    fingerprint: Annotated[str, Path(pattern=bundles.DIGEST_PATTERN)],
    session: SessionDep,
    admin: AdminOnly,
) -> CentreOut:
    """Revoke a key (compromised): nothing more signed with it is accepted."""
    row = service.get_centre(session, name)
    service.revoke_key(session, row, fingerprint)
    return queries.centre_out(session, row, admin.user)


@router.get("/results", response_model=list[ExternalResultOut])
def list_results(
    session: SessionDep,
    caller: Anyone,
    algorithm_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
    centre: Annotated[str | None, Query(max_length=100)] = None,
) -> list[ExternalResultOut]:
    """Results published by centres, withdrawn ones included and marked, newest first."""
    centre_id = service.get_centre(session, centre).id if centre else None
    return queries.visible_results(
        session, caller.user, centre_id=centre_id, algorithm_id=algorithm_id
    )


@router.get("/results/{result_id}", response_model=ExternalResultDetail)
def get_result(result_id: BundleId, session: SessionDep, caller: Anyone) -> ExternalResultDetail:
    """One result with the bundle as received, its signature and key: verifiable by anyone."""
    row = service.get_result(session, result_id)
    shown = queries.visible_results(session, caller.user, centre_id=row.centre_id)
    if row.kind.value != "result" or all(r.id != row.id for r in shown):
        raise NotFound(f"no external result {result_id}")
    out = queries.result_out(session, row, detail=True)
    assert isinstance(out, ExternalResultDetail)
    return out


@router.get("/results/{result_id}/citation", response_class=Response, responses=CITATION_RESPONSES)
def cite_result(
    result_id: BundleId, session: SessionDep, caller: Anyone, format: CitationFormat = "bibtex"
) -> Response:
    """Cite a centre's result: BibTeX or CITATION.cff with the bundle's sha256."""
    row = service.get_result(session, result_id)
    shown = queries.visible_results(session, caller.user, centre_id=row.centre_id)
    if all(r.id != row.id for r in shown):
        raise NotFound(f"no external result {result_id}")
    return citation_response(queries.citation_of(session, row), format)


@router.get("/refusals", response_model=list[RefusalOut])
def list_refusals(session: SessionDep, _admin: AdminOnly) -> list[RefusalOut]:
    """Refused bundles, counted per claimed centre and reason (admins)."""
    return [RefusalOut.model_validate(r, from_attributes=True) for r in service.refusals(session)]


# --- centre side -------------------------------------------------------------------------------


@router.get("/key", response_model=KeyInfo)
def own_key(_admin: AdminOnly) -> KeyInfo:
    """This centre's public key and fingerprint (give them to the hub's admins)."""
    public_key, fp = signing.own_public_key()
    return KeyInfo(public_key=public_key, fingerprint=fp)


@router.post("/key", response_model=KeyInfo, status_code=status.HTTP_201_CREATED)
def make_key(
    _admin: AdminOnly,
    rotate: Annotated[
        bool, Query(description="Replace the key (the old one is kept aside).")
    ] = False,
) -> KeyInfo:
    """Make this centre's signing key (kept in a file here; only its public half is shown)."""
    signing.generate(rotate=rotate)
    public_key, fp = signing.own_public_key()
    return KeyInfo(public_key=public_key, fingerprint=fp)


@router.get("/subscription", response_model=SubscriptionOut)
def get_subscription(session: SessionDep, _admin: AdminOnly) -> SubscriptionOut:
    """This centre's hub, chosen datasets and the hub's versions (admins)."""
    return queries.subscription_out(session, centre.get_subscription(session))


@router.post("/subscription", response_model=SubscriptionOut, status_code=status.HTTP_201_CREATED)
def subscribe(body: SubscriptionCreate, session: SessionDep, admin: AdminOnly) -> SubscriptionOut:
    """Subscribe to a hub under the name its admins registered this centre with."""
    sub = centre.subscribe(session, by=admin.user, **body.model_dump())
    return queries.subscription_out(session, sub)


@router.patch("/subscription", response_model=SubscriptionOut)
def update_subscription(
    body: SubscriptionUpdate, session: SessionDep, _admin: AdminOnly
) -> SubscriptionOut:
    """Follow the hub's new versions by themselves, or not."""
    sub = centre.get_subscription(session)
    centre.update_subscription(session, sub, follow_new=body.follow_new)
    return queries.subscription_out(session, sub)


@router.post("/subscription/sync", response_model=SyncOut)
def sync(session: SessionDep, _admin: AdminOnly) -> SyncOut:
    """Read the hub's catalogue now, queue, draft bundles, send the auto-published ones."""
    report = centre.run_once(session, centre.get_subscription(session))
    return SyncOut.model_validate(report, from_attributes=True)


@router.put("/subscription/datasets/{slug}", response_model=FederatedDatasetOut)
def set_dataset(
    slug: CentreName, body: FederatedDatasetIn, session: SessionDep, _admin: AdminOnly
) -> FederatedDatasetOut:
    """Run the hub's followed versions on this held-out dataset and publish from it."""
    row = centre.set_dataset(session, centre.get_subscription(session), slug, **body.model_dump())
    return FederatedDatasetOut(
        dataset=row.dataset.slug,
        title=row.dataset.title,
        disclosure=row.dataset.disclosure.value,
        auto_publish=row.auto_publish,
        min_subjects=row.min_subjects,
    )


@router.delete("/subscription/datasets/{slug}", status_code=status.HTTP_204_NO_CONTENT)
def remove_dataset(slug: CentreName, session: SessionDep, _admin: AdminOnly) -> Response:
    """Stop running the hub's versions on this dataset (what was sent stays sent)."""
    centre.remove_dataset(session, centre.get_subscription(session), slug)
    return Response(status_code=204)


@router.put("/subscription/versions/{hub_version_id}", response_model=HubVersionOut)
def follow_version(
    hub_version_id: BundleId, body: FollowIn, session: SessionDep, _admin: AdminOnly
) -> HubVersionOut:
    """Follow one of the hub's offered versions (queued on the chosen datasets), or stop."""
    row = centre.follow(session, centre.get_subscription(session), hub_version_id, body.followed)
    return HubVersionOut.model_validate(row, from_attributes=True)


@router.get("/outgoing", response_model=list[OutgoingOut])
def list_outgoing(session: SessionDep, _admin: AdminOnly) -> list[OutgoingOut]:
    """Bundles of this centre: drafts, sent, refused, discarded (admins)."""
    sub = centre.get_subscription(session)
    return [
        OutgoingOut.model_validate(b, from_attributes=True)
        for b in centre.list_bundles(session, sub)
    ]


@router.post("/outgoing", response_model=OutgoingDetail, status_code=status.HTTP_201_CREATED)
def prepare(body: PrepareIn, session: SessionDep, _admin: AdminOnly) -> OutgoingDetail:
    """Draft the bundle of one finished evaluation (409 says why it cannot leave)."""
    evaluation = session.get(Evaluation, body.evaluation_id)
    if evaluation is None:
        raise NotFound(f"evaluation_id: no evaluation {body.evaluation_id}")
    bundle = centre.prepare_one(session, centre.get_subscription(session), evaluation)
    return queries.outgoing_detail(session, bundle)


@router.get("/outgoing/{bundle_id}", response_model=OutgoingDetail)
def get_outgoing(bundle_id: BundleId, session: SessionDep, _admin: AdminOnly) -> OutgoingDetail:
    """Exactly what leaves: method, address, headers and the body's bytes."""
    return queries.outgoing_detail(session, centre.get_bundle(session, bundle_id))


@router.post("/outgoing/{bundle_id}/approve", response_model=OutgoingDetail)
def approve(
    bundle_id: BundleId, body: ApproveIn, session: SessionDep, admin: AdminOnly
) -> OutgoingDetail:
    """Send a draft whose bytes the approver saw (their sha256); the hub's answer is kept."""
    bundle = centre.approve(session, bundle_id, payload_sha256=body.payload_sha256, by=admin.user)
    return queries.outgoing_detail(session, bundle)


@router.post("/outgoing/{bundle_id}/discard", response_model=OutgoingDetail)
def discard(bundle_id: BundleId, session: SessionDep, _admin: AdminOnly) -> OutgoingDetail:
    """Do not send this draft."""
    return queries.outgoing_detail(session, centre.discard(session, bundle_id))


@router.post("/outgoing/{bundle_id}/redraft", response_model=OutgoingDetail, status_code=201)
def redraft(bundle_id: BundleId, session: SessionDep, _admin: AdminOnly) -> OutgoingDetail:
    """A new draft (new sequence) of a refused or discarded result."""
    return queries.outgoing_detail(session, centre.redraft(session, bundle_id))


@router.post("/outgoing/{bundle_id}/withdraw", response_model=OutgoingDetail, status_code=201)
def withdraw(
    bundle_id: BundleId, body: WithdrawIn, session: SessionDep, _admin: AdminOnly
) -> OutgoingDetail:
    """Draft the withdrawal of a sent result (approved like any bundle)."""
    return queries.outgoing_detail(session, centre.withdraw(session, bundle_id, reason=body.reason))
