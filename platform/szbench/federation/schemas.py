"""Bodies of the federation routes (hub and centre side)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from szbench.federation.bundles import NAME_PATTERN
from szbench.models import BundleKind, KeyState, OutgoingState

# --- hub side --------------------------------------------------------------------------------


class CatalogueVersion(BaseModel):
    id: int = Field(description="The hub's algorithm version id (what a bundle names).")
    algorithm_id: int
    algorithm: str
    title: str
    authors: str
    version: str
    image_digest: str = Field(description="The image id the worker checks after the pull.")
    registry_digest: str = Field(description="The manifest digest it is pulled by.")
    reference: str = Field(description="Pull reference: the hub's registry @ the manifest digest.")


class Catalogue(BaseModel):
    """The versions centres may run: their owners allow external evaluation, they are public,
    active and published."""

    hub: str = Field(description="This hub's address, as bundles must name it.")
    registry: str = Field(description="The registry the images are pulled from.")
    scorer_version: str
    versions: list[CatalogueVersion]


class KeyOut(BaseModel):
    fingerprint: str
    public_key: str = Field(description="The raw Ed25519 key, base64url without padding.")
    state: KeyState
    created_at: datetime
    retired_at: datetime | None
    revoked_at: datetime | None


class CentreCreate(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, description="The name the centre signs with.")
    title: str = Field(default="", max_length=200)
    contact: str = Field(default="", max_length=320)
    public_key: str = Field(
        max_length=1000, description="Its Ed25519 public key: base64url of 32 bytes, or PEM."
    )


class KeyCreate(BaseModel):
    public_key: str = Field(max_length=1000, description="The centre's new key (rotation).")


class DatasetOut(BaseModel):
    """A centre's dataset as its newest bundle describes it."""

    name: str
    title: str
    description: str
    version: str
    subjects: int
    recordings: int
    hours: float
    montage: str
    standardisation: str
    manifest_sha256: str


class CentreOut(BaseModel):
    name: str
    title: str
    contact: str | None = Field(description="Admins only (null for others).")
    created_at: datetime
    last_sequence: int
    keys: list[KeyOut]
    results: int = Field(description="Results accepted (withdrawn ones included).")
    withdrawn: int


class ExternalResultOut(BaseModel):
    id: int
    centre: str
    sequence: int
    received_at: datetime
    algorithm_version_id: int | None
    algorithm_id: int | None
    algorithm: str
    algorithm_version: str
    dataset: DatasetOut
    release: dict[str, Any]
    figures: dict[str, float | None]
    failed_recordings: int
    scorer_version: str
    key: str = Field(description="Fingerprint of the key that signed it.")
    key_state: KeyState = Field(description="That key's state now (revoked: be wary).")
    withdrawn_at: datetime | None
    withdrawn_by_sequence: int | None
    withdrawal_reason: str | None


class ExternalResultDetail(ExternalResultOut):
    payload: str = Field(description="The bundle exactly as received (canonical JSON).")
    payload_sha256: str
    signature: str = Field(description="Ed25519 signature of the payload's bytes, base64url.")
    public_key: str = Field(description="The signing key, base64url: verify it yourself.")


class CentreDetail(CentreOut):
    datasets: list[DatasetOut]
    external_results: list[ExternalResultOut]


class RefusalOut(BaseModel):
    centre: str = Field(description="The centre the bundle claimed to come from ('' unread).")
    reason: str
    count: int
    last_detail: str
    last_at: datetime


# --- centre side -------------------------------------------------------------------------------


class KeyInfo(BaseModel):
    public_key: str
    fingerprint: str


class SubscriptionCreate(BaseModel):
    hub_url: str = Field(max_length=500, description="https://hub.example (http only to loopback).")
    centre_name: str = Field(pattern=NAME_PATTERN, description="This centre's name at the hub.")
    follow_new: bool = Field(default=True, description="Queue new versions by themselves.")


class SubscriptionUpdate(BaseModel):
    follow_new: bool | None = None


class FederatedDatasetIn(BaseModel):
    auto_publish: bool = Field(
        default=False, description="Send each result's bundle without an admin's approval."
    )
    min_subjects: int = Field(default=5, ge=3, le=100_000)


class FederatedDatasetOut(BaseModel):
    dataset: str
    title: str
    disclosure: str
    auto_publish: bool
    min_subjects: int


class HubVersionOut(BaseModel):
    hub_version_id: int
    hub_algorithm_id: int
    algorithm: str
    version: str
    image_digest: str
    registry_digest: str
    offered: bool
    followed: bool
    algorithm_version_id: int | None = Field(description="Its local copy.")


class FollowIn(BaseModel):
    followed: bool


class SubscriptionOut(BaseModel):
    hub_url: str
    centre_name: str
    follow_new: bool
    hub_registry: str
    last_sequence: int
    last_synced_at: datetime | None
    last_sync_error: str
    key: KeyInfo | None
    datasets: list[FederatedDatasetOut]
    versions: list[HubVersionOut]


class SubscriptionFollow(BaseModel):
    follow_new: bool


class SyncOut(BaseModel):
    offered: int
    new: list[int]
    no_longer_offered: list[int]
    queued: list[int] = Field(description="Evaluations queued here.")
    refused: list[str]
    prepared: list[int] = Field(description="Draft bundles made.")
    sent: list[int] = Field(description="Bundles sent by auto-publish.")


class OutgoingOut(BaseModel):
    id: int
    sequence: int
    kind: BundleKind
    state: OutgoingState
    evaluation_id: int | None
    withdraws_id: int | None
    auto: bool
    created_at: datetime
    sent_at: datetime | None
    withdrawn_at: datetime | None
    hub_answer: str
    payload_sha256: str


class OutgoingDetail(OutgoingOut):
    """Exactly what leaves: ``method`` to ``url`` with ``headers`` and ``payload`` as body."""

    method: str
    url: str
    headers: dict[str, str]
    payload: str


class PrepareIn(BaseModel):
    evaluation_id: int = Field(ge=1, le=2**31 - 1)


class ApproveIn(BaseModel):
    payload_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="The sha256 of the bytes the approver saw."
    )


class WithdrawIn(BaseModel):
    reason: str = Field(default="", max_length=500)
