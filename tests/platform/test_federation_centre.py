"""The centre's side of federated evaluation (issue 31): its key, what it runs, what it
drafts, what its admin approves and what reaches the hub. One PostgreSQL database plays
both roles here (the tables are apart); the hub is reached through the real app's route
(tests/worker/test_federation_two_instances.py runs two instances for real)."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import queue
from szbench.errors import Conflict, NotFound
from szbench.federation import bundles, centre, hub_client, service, signing
from szbench.models import (
    DatasetKind,
    Disclosure,
    Evaluation,
    EvaluationStatus,
    ExternalResult,
    OutgoingState,
    Role,
)

from . import factories as f
from .federation_world import admin_headers, hub_settings, key_text, offered_version

METRICS = {
    "event_f1": 0.31415,
    "event_sensitivity": 0.4242,
    "event_precision": 0.2514,
    "event_fp_rate": 3.14159,
    "sample_sensitivity": 0.5,
    "sample_precision": 0.6,
    "sample_f1": 0.2222,
    "sample_fp_rate": 12.5,
}


@pytest.fixture
def both(
    settings_env: pytest.MonkeyPatch, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """Hub settings, this centre's key, the hub reached through the app's own route, and the
    queued evaluations' tasks kept here (no broker: another test's may be gone)."""
    hub_settings(settings_env)
    signing.generate()

    def publish(hub_url: str, payload: bytes, signature: str) -> hub_client.Answer:
        answer = client.post(
            hub_client.BUNDLES_PATH,
            content=payload,
            headers={
                "Content-Type": "application/json",
                service.SIGNATURE_HEADER: service.SIGNATURE_SCHEME + signature,
            },
        )
        return hub_client.Answer(answer.status_code, answer.json())

    monkeypatch.setattr(hub_client, "publish", publish)
    monkeypatch.setattr(
        hub_client, "centre", lambda url, name: client.get(hub_client.CENTRES_PATH + name).json()
    )
    queue.set_sender(lambda name, q, kwargs: None)
    try:
        yield client
    finally:
        queue.set_sender(None)


def register_this_centre(session: Session, name: str = "south") -> None:
    service.register_centre(session, name=name, public_key=signing.own_public_key()[0])


def held_out(session: Session, subjects: int = 6, level: Disclosure = Disclosure.AGGREGATE) -> Any:
    ds = f.dataset(
        session, DatasetKind.HELD_OUT, title="South ICU", description="Adults", disclosure=level
    )
    dv = f.dataset_version(session, ds, manifest_checksum="cd" * 32)
    for i in range(subjects):
        f.recording(session, dv, subject=f"{i:02d}", duration_s=1800.0)
    return ds, dv


def subscribed(session: Session, client: TestClient, **dataset: Any) -> tuple[Any, Any, Any]:
    register_this_centre(session)
    admin = f.user(session, role=Role.ADMIN)
    sub = centre.subscribe(session, hub_url=service.hub_identity(), centre_name="south", by=admin)
    ds, dv = held_out(session, **dataset)
    centre.set_dataset(session, sub, ds.slug, min_subjects=5)
    return sub, ds, dv


def finish(session: Session, evaluation: Evaluation, subjects: int = 6) -> None:
    from szbench.models import DatasetResult

    evaluation.status = EvaluationStatus.DONE
    session.add(
        DatasetResult(
            evaluation_id=evaluation.id, subjects=subjects, recordings=subjects, **METRICS
        )
    )
    session.flush()
    session.refresh(evaluation)


def test_the_key_file_is_private_and_never_overwritten(settings_env: pytest.MonkeyPatch) -> None:
    signing.generate()
    path = signing.key_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = signing.own_public_key()
    with pytest.raises(Conflict, match="has a key"):
        signing.generate()
    signing.generate(rotate=True)
    assert signing.own_public_key() != first
    assert path.with_name(signing.OLD_KEY_FILE.name).exists()


def test_a_result_goes_from_the_centre_to_the_hub_exactly_as_approved(
    db_session: Session, both: TestClient
) -> None:
    hub_version = offered_version(db_session)
    sub, _ds, dv = subscribed(db_session, both)
    catalogue = both.get("/api/v1/federation/catalogue").json()
    report = centre.sync(db_session, sub, catalogue)
    assert hub_version.id in report.new
    row = next(v for v in centre.versions(db_session, sub) if v.hub_version_id == hub_version.id)
    local = row.algorithm_version
    assert local is not None
    # The local copy runs the hub's image, pulled by its manifest digest.
    assert local.image_digest == hub_version.image_digest
    assert local.image_reference.endswith("@" + hub_version.registry_digest)
    queued = db_session.scalars(
        select(Evaluation).where(Evaluation.algorithm_version_id == local.id)
    ).all()
    assert [e.dataset_version_id for e in queued] == [dv.id]
    assert [e.created_by_id for e in queued] == [None]  # uncharged, as a centre's own run
    # Nothing to publish until it is done.
    assert centre.prepare(db_session, sub) == []
    finish(db_session, queued[0])
    (draft,) = centre.prepare(db_session, sub)
    data = json.loads(draft.payload)
    # This centre releases at the aggregate level: the rounded figures, five metrics.
    assert data["figures"] == {
        "event_f1": 0.31,
        "event_sensitivity": 0.42,
        "event_precision": 0.25,
        "event_fp_rate": 3.1,
        "sample_f1": 0.22,
    }
    assert data["release"] == {
        "level": "aggregate",
        "rule": "rounded",
        "decimals": 2,
        "min_subjects": 5,
    }
    assert data["dataset"]["subjects"] == 6
    assert data["dataset"]["hours"] == 3.0
    assert data["dataset"]["manifest_sha256"] == "cd" * 32
    assert draft.payload.encode() == bundles.encode(data)
    # Never anything per recording or per subject, no run bytes.
    assert not {"recordings_detail", "subjects_detail", "runs", "log"} & set(data)
    # The approver must have seen these very bytes.
    with pytest.raises(Conflict, match="not the one approved"):
        centre.approve(db_session, draft.id, payload_sha256="0" * 64, by=None)
    assert draft.state == OutgoingState.DRAFT
    sent = centre.approve(
        db_session,
        draft.id,
        payload_sha256=hashlib.sha256(draft.payload.encode()).hexdigest(),
        by=None,
    )
    assert sent.state == OutgoingState.SENT, sent.hub_answer
    stored = db_session.scalars(select(ExternalResult)).one()
    assert stored.payload == draft.payload
    assert stored.signature == draft.signature
    # Withdrawn: kept at the hub, marked.
    withdrawal = centre.withdraw(db_session, draft.id, reason="labels were wrong")
    assert withdrawal.state == OutgoingState.DRAFT
    centre.approve(db_session, withdrawal.id, payload_sha256=withdrawal.payload_sha256, by=None)
    db_session.refresh(stored)
    assert stored.withdrawn_at is not None
    assert draft.withdrawn_at is not None


def test_a_refused_bundle_is_kept_with_the_hubs_answer_and_drafted_again(
    db_session: Session, both: TestClient
) -> None:
    offered_version(db_session)
    sub, _ds, dv = subscribed(db_session, both)
    centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    evaluation = db_session.scalars(
        select(Evaluation).where(Evaluation.dataset_version_id == dv.id)
    ).one()
    finish(db_session, evaluation)
    (first,) = centre.prepare(db_session, sub)
    # Another bundle with a higher sequence leaves first: the older one is a rollback.
    hub_centre = service.get_centre(db_session, "south")
    hub_centre.last_sequence = 40
    db_session.flush()
    refused = centre.approve(db_session, first.id, payload_sha256=first.payload_sha256, by=None)
    assert refused.state == OutgoingState.REFUSED
    assert refused.hub_answer.startswith("409 sequence")
    again = centre.redraft(db_session, first.id)
    assert again.sequence > first.sequence
    assert (
        centre.approve(db_session, again.id, payload_sha256=again.payload_sha256, by=None).state
        == OutgoingState.SENT
    )


def test_the_centres_own_rules_decide_what_leaves(db_session: Session, both: TestClient) -> None:
    offered_version(db_session)
    sub, _ds, dv = subscribed(db_session, both, level=Disclosure.SUBJECT)
    centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    evaluation = db_session.scalars(
        select(Evaluation).where(Evaluation.dataset_version_id == dv.id)
    ).one()
    finish(db_session, evaluation)
    (draft,) = centre.prepare(db_session, sub)
    data = json.loads(draft.payload)
    # At the subject level the dataset-level figures are released exact, all eight...
    assert data["release"]["rule"] == "exact"
    assert data["figures"]["event_f1"] == METRICS["event_f1"]
    assert set(data["figures"]) == set(METRICS)
    # ...but the bundle still carries nothing per subject.
    assert "subjects" not in data["figures"]


def test_a_centre_cannot_publish_what_its_rules_would_not_release(
    db_session: Session, both: TestClient
) -> None:
    offered_version(db_session)
    sub, ds, dv = subscribed(db_session, both, subjects=4)
    centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    evaluation = db_session.scalars(
        select(Evaluation).where(Evaluation.dataset_version_id == dv.id)
    ).one()
    with pytest.raises(Conflict, match="not done"):
        centre.prepare_one(db_session, sub, evaluation)
    finish(db_session, evaluation, subjects=4)
    with pytest.raises(Conflict, match="fewer than the 5"):
        centre.prepare_one(db_session, sub, evaluation)
    assert centre.prepare(db_session, sub) == []
    with pytest.raises(Exception, match="at least 3"):
        centre.set_dataset(db_session, sub, ds.slug, min_subjects=2)


def test_only_offered_versions_are_run_and_followed(db_session: Session, both: TestClient) -> None:
    hub_version = offered_version(db_session)
    sub, _ds, dv = subscribed(db_session, both)
    sub.follow_new = False
    catalogue = both.get("/api/v1/federation/catalogue").json()
    centre.sync(db_session, sub, catalogue)
    assert (
        db_session.scalars(select(Evaluation).where(Evaluation.dataset_version_id == dv.id)).all()
        == []
    )
    # A version the hub never offered cannot be followed.
    with pytest.raises(NotFound, match="not offered"):
        centre.follow(db_session, sub, 10**6, True)
    centre.follow(db_session, sub, hub_version.id, True)
    # Its owner withdraws the permission: the next catalogue lacks it, nothing is queued.
    hub_version.algorithm.external_evaluation = False
    db_session.flush()
    report = centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    assert hub_version.id in report.no_longer_offered
    assert report.queued == []
    # A catalogue that changes a version's digests is not believed.
    hub_version.algorithm.external_evaluation = True
    db_session.flush()
    forged = both.get("/api/v1/federation/catalogue").json()
    for v in forged["versions"]:
        v["image_digest"] = "sha256:" + "e" * 64
    report = centre.sync(db_session, sub, forged)
    assert any("digests changed" in r for r in report.refused)
    assert report.queued == []


def test_the_allow_list_holds_for_the_hubs_images(
    db_session: Session, both: TestClient, settings_env: pytest.MonkeyPatch
) -> None:
    from szbench.config import get_settings

    settings_env.setenv("SZBENCH_ALLOWED_IMAGES", "localhost:5000/approved/")
    get_settings.cache_clear()
    offered_version(db_session)
    sub, _ds, _dv = subscribed(db_session, both)
    report = centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    assert report.queued == []
    assert "SZBENCH_ALLOWED_IMAGES" in report.refused[0]


def test_auto_publish_sends_without_approval(
    db_session: Session, both: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered_version(db_session)
    sub, ds, dv = subscribed(db_session, both)
    centre.set_dataset(db_session, sub, ds.slug, auto_publish=True, min_subjects=5)
    centre.sync(db_session, sub, both.get("/api/v1/federation/catalogue").json())
    evaluation = db_session.scalars(
        select(Evaluation).where(Evaluation.dataset_version_id == dv.id)
    ).one()
    finish(db_session, evaluation)
    monkeypatch.setattr(
        hub_client, "catalogue", lambda url: both.get("/api/v1/federation/catalogue").json()
    )
    report = centre.run_once(db_session, sub)
    assert len(report.sent) == 1
    assert (
        db_session.scalars(select(ExternalResult)).one().payload
        == centre.get_bundle(db_session, report.sent[0]).payload
    )


def test_the_centre_api_drives_everything(
    db_session: Session, both: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered_version(db_session)
    register_this_centre(db_session, "east")
    admin = admin_headers(db_session)
    ds, _dv = held_out(db_session)
    key = both.get("/api/v1/federation/key", headers=admin).json()
    assert key["fingerprint"] == signing.own_public_key()[1]
    made = both.post(
        "/api/v1/federation/subscription",
        json={"hub_url": service.hub_identity(), "centre_name": "east"},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    assert (
        both.put(
            f"/api/v1/federation/subscription/datasets/{ds.slug}",
            json={"min_subjects": 5},
            headers=admin,
        ).status_code
        == 200
    )
    monkeypatch.setattr(
        hub_client, "catalogue", lambda url: both.get("/api/v1/federation/catalogue").json()
    )
    synced = both.post("/api/v1/federation/subscription/sync", headers=admin).json()
    assert len(synced["queued"]) == 1
    evaluation = db_session.get(Evaluation, synced["queued"][0])
    assert evaluation is not None
    finish(db_session, evaluation)
    draft = both.post(
        "/api/v1/federation/outgoing", json={"evaluation_id": evaluation.id}, headers=admin
    ).json()
    shown = both.get(f"/api/v1/federation/outgoing/{draft['id']}", headers=admin).json()
    assert shown["method"] == "POST"
    assert shown["url"] == service.hub_identity() + hub_client.BUNDLES_PATH
    assert shown["headers"][service.SIGNATURE_HEADER].startswith("ed25519=")
    assert hashlib.sha256(shown["payload"].encode()).hexdigest() == shown["payload_sha256"]
    sent = both.post(
        f"/api/v1/federation/outgoing/{draft['id']}/approve",
        json={"payload_sha256": shown["payload_sha256"]},
        headers=admin,
    )
    assert sent.json()["state"] == "sent", sent.text
    # Researchers see none of it.
    researcher = f.headers(db_session, f.user(db_session))
    assert both.get("/api/v1/federation/outgoing", headers=researcher).status_code == 403
    assert both.get("/api/v1/federation/subscription", headers=researcher).status_code == 403
    assert key_text  # the helper stays imported for the other tests


def test_the_adapter_releases_nothing_under_the_ladder() -> None:
    from szbench.disclosure.decision import Release, View
    from szbench.federation import released

    def view(release: Release) -> View:
        return View(False, False, True, Disclosure.AGGREGATE, release, False, 2)

    assert released.rule_of(view(Release.LADDER)) is None
    assert released.rule_of(view(Release.ROUNDED)) == "rounded"
    assert released.rule_of(view(Release.EXACT)) == "exact"
    rounded = released.figures(view(Release.ROUNDED), METRICS)
    assert rounded == {
        "event_f1": 0.31,
        "event_sensitivity": 0.42,
        "event_precision": 0.25,
        "event_fp_rate": 3.1,
        "sample_f1": 0.22,
    }
    # What the centre rounds, the hub's grid check accepts; one step off, it refuses.
    for metric, value in rounded.items():
        assert released.grid_refusal("rounded", 2, metric, value) is None
    assert released.grid_refusal("rounded", 2, "event_f1", 0.315) is not None
