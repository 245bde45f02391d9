"""The hub's side of federated evaluation (issue 31): what it accepts, what it refuses
and counts, what it stores and shows. Real PostgreSQL; bundles made and signed as a centre
makes them (tests/platform/federation_world.py), then forged, tampered with, replayed..."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.federation import bundles, service
from szbench.models import BundleRefusal, ExternalResult, KeyState, Phase, Visibility

from . import factories as f
from .federation_world import HUB, admin_headers, digest, hub_settings, key_text, sign, world


@pytest.fixture
def hub(settings_env: pytest.MonkeyPatch) -> None:
    hub_settings(settings_env)


def refused_count(session: Session, centre: str, reason: str) -> int:
    row = session.get(BundleRefusal, (centre, reason))
    return row.count if row is not None else 0


def refuse(
    session: Session, payload: bytes, signature: str | None, reason: str, centre: str
) -> str:
    before = refused_count(session, centre, reason)
    with pytest.raises(service.BundleRefused) as caught:
        service.receive(session, payload, signature)
    assert caught.value.reason == reason, caught.value.detail
    assert refused_count(session, centre, reason) == before + 1
    return caught.value.detail


def test_a_signed_bundle_is_verified_and_stored_as_received(db_session: Session, hub: None) -> None:
    w = world(db_session)
    payload, signature = sign(w.result(), w.key)
    received = service.receive(db_session, payload, signature)
    row = received.row
    assert row.payload.encode() == payload
    assert row.payload_sha256 == digest(payload)
    assert row.algorithm_version_id == w.version.id
    assert row.dataset == "centre-eeg"
    assert w.centre.last_sequence == 1
    # Anyone can check it again from what is stored.
    from szbench.federation import signing

    raw = signing.unb64url(row.key.public_key, what="key")
    assert signing.verify(raw, row.payload.encode(), row.signature)
    assert not signing.verify(raw, row.payload.encode().replace(b"0.31", b"0.91"), row.signature)


def test_forged_bundles_are_refused_and_counted(db_session: Session, hub: None) -> None:
    w = world(db_session)
    stranger = Ed25519PrivateKey.generate()
    # Signed by a key the hub does not know, naming it.
    data = w.result(key=signing_fp(stranger))
    payload, signature = sign(data, stranger)
    refuse(db_session, payload, signature, "unknown_key", w.centre.name)
    # Naming the centre's registered key, signed by another.
    payload, signature = sign(w.result(), stranger)
    assert "forged or altered" in refuse(
        db_session, payload, signature, "bad_signature", w.centre.name
    )
    # No signature at all.
    payload, _ = sign(w.result(), w.key)
    refuse(db_session, payload, None, "unsigned", w.centre.name)
    # A centre that is not registered.
    payload, signature = sign(w.result(centre="nowhere"), w.key)
    refuse(db_session, payload, signature, "unknown_centre", "nowhere")
    assert db_session.scalars(select(ExternalResult)).all() == []


def signing_fp(key: Ed25519PrivateKey) -> str:
    from .federation_world import fp

    return fp(key)


def test_tampered_bytes_are_refused(db_session: Session, hub: None) -> None:
    w = world(db_session)
    payload, signature = sign(w.result(), w.key)
    tampered = payload.replace(b'"event_f1":0.31', b'"event_f1":0.91')
    assert tampered != payload
    refuse(db_session, tampered, signature, "bad_signature", w.centre.name)
    # Blanks added keep the meaning but not the bytes: refused before the signature.
    loose = json.dumps(json.loads(payload), indent=1).encode()
    refuse(db_session, loose, signature, "malformed", w.centre.name)
    # A duplicate key (which JSON readers resolve differently) is not canonical either.
    duplicated = payload[:-1] + b',"kind":"result"}'
    assert "canonical" in refuse(db_session, duplicated, signature, "malformed", w.centre.name)
    # The untouched bundle still goes through.
    service.receive(db_session, payload, signature)


def test_replay_and_rollback_are_refused(db_session: Session, hub: None) -> None:
    w = world(db_session)
    first = sign(w.result(), w.key)
    w.sequence = 5
    later = sign(w.result(), w.key)  # sequence 6
    service.receive(db_session, *first)
    service.receive(db_session, *later)
    assert "accepted once" in refuse(db_session, *first[:1], first[1], "replay", w.centre.name)
    refuse(db_session, *later, "replay", w.centre.name)
    w.sequence = 2
    older = sign(w.result(), w.key)  # sequence 3: never sent, but below 6
    assert "older bundle" in refuse(db_session, *older, "rollback", w.centre.name)


def test_retired_and_revoked_keys_sign_nothing_new(db_session: Session, hub: None) -> None:
    w = world(db_session)
    service.receive(db_session, *sign(w.result(), w.key))
    new_key = Ed25519PrivateKey.generate()
    service.rotate_key(db_session, w.centre, key_text(new_key))
    assert [k.state for k in w.centre.keys] == [KeyState.RETIRED, KeyState.ACTIVE]
    refuse(db_session, *sign(w.result(), w.key), "key_retired", w.centre.name)
    old_key, w.key = w.key, new_key
    service.receive(db_session, *sign(w.result(), w.key))
    service.revoke_key(db_session, w.centre, signing_fp(new_key))
    assert "revoked" in refuse(db_session, *sign(w.result(), w.key), "key_revoked", w.centre.name)
    # What the revoked key signed stays, marked by its key's state.
    rows = service.results(db_session, centre_id=w.centre.id)
    assert [r.key.state for r in rows] == [KeyState.REVOKED, KeyState.RETIRED]
    assert old_key is not None


def test_a_centre_posts_only_for_itself(db_session: Session, hub: None) -> None:
    a = world(db_session)
    b = world(db_session)
    # Centre B signs with its own key a bundle that claims to come from centre A.
    payload, signature = sign(b.result(centre=a.centre.name), b.key)
    assert "posts only for itself" in refuse(
        db_session, payload, signature, "wrong_centre", a.centre.name
    )


def test_a_bundle_for_another_hub_is_refused(db_session: Session, hub: None) -> None:
    w = world(db_session)
    refuse(
        db_session, *sign(w.result(hub="https://other.example"), w.key), "wrong_hub", w.centre.name
    )


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"figures__event_f1": 0.314}, "not on the released grid"),
        ({"figures__event_fp_rate": 3.14}, "not on the released grid"),
        ({"figures__sample_sensitivity": 0.5}, "withheld at the aggregate level"),
        ({"figures__event_f1": 1.5, "release__rule": "exact"}, "outside 0 to 1"),
        ({"dataset__subjects": 2, "release__min_subjects": 3}, "fewer than the 3"),
        ({"dataset__subjects": 4}, "fewer than the 5"),
    ],
)
def test_a_figure_the_declared_rule_would_not_release_is_refused(
    db_session: Session, hub: None, changes: dict[str, Any], why: str
) -> None:
    w = world(db_session)
    detail = refuse(
        db_session, *sign(w.result(**changes), w.key), "figure_not_released", w.centre.name
    )
    assert why in detail


def test_exact_figures_pass_at_the_subject_level(db_session: Session, hub: None) -> None:
    w = world(db_session)
    data = w.result(release__rule="exact", release__level="subject", figures__event_f1=0.3141592)
    service.receive(db_session, *sign(data, w.key))


def test_versions_the_author_did_not_publish_or_allow_are_refused(
    db_session: Session, hub: None
) -> None:
    w = world(db_session)
    algo = w.version.algorithm
    algo.external_evaluation = False
    db_session.flush()
    assert "did not publish it or does not allow it" in refuse(
        db_session, *sign(w.result(), w.key), "version_not_offered", w.centre.name
    )
    algo.external_evaluation = True
    algo.visibility = Visibility.PRIVATE
    db_session.flush()
    refuse(db_session, *sign(w.result(), w.key), "version_not_offered", w.centre.name)
    algo.visibility = Visibility.PUBLIC
    hidden = Phase(slug=f"hidden-{f.n()}", hidden=True)
    db_session.add(hidden)
    db_session.flush()
    w.version.phase_id = hidden.id
    db_session.flush()
    refuse(db_session, *sign(w.result(), w.key), "version_not_offered", w.centre.name)
    w.version.phase_id = None
    db_session.flush()
    service.receive(db_session, *sign(w.result(), w.key))


def test_digests_and_scorer_are_checked(db_session: Session, hub: None) -> None:
    w = world(db_session)
    other = "sha256:" + "e" * 64
    refuse(
        db_session,
        *sign(w.result(algorithm_version__image_digest=other), w.key),
        "digest_mismatch",
        w.centre.name,
    )
    refuse(
        db_session,
        *sign(w.result(scorer__version="my own scorer"), w.key),
        "unknown_scorer",
        w.centre.name,
    )
    params = {**w.result()["scorer"]["params"]}
    w.sequence -= 1
    params["tolerance_start_s"] = 5.0
    refuse(
        db_session,
        *sign(w.result(scorer__params=params), w.key),
        "unofficial_scoring",
        w.centre.name,
    )


def test_a_withdrawal_is_kept_in_the_record(db_session: Session, hub: None) -> None:
    w = world(db_session)
    first = service.receive(db_session, *sign(w.result(), w.key)).row
    refuse(db_session, *sign(w.withdrawal(99), w.key), "unknown_result", w.centre.name)
    done = service.receive(db_session, *sign(w.withdrawal(first.sequence, "wrong labels"), w.key))
    assert done.withdrew is first
    assert first.withdrawn_at is not None
    assert first.withdrawn_by_sequence == done.row.sequence
    assert service.results(db_session, centre_id=w.centre.id) == [first]
    assert service.results(db_session, centre_id=w.centre.id, include_withdrawn=False) == []
    refuse(
        db_session, *sign(w.withdrawal(first.sequence), w.key), "withdrawn_already", w.centre.name
    )


def test_oversized_and_garbage_bodies_are_refused_cheaply(db_session: Session, hub: None) -> None:
    w = world(db_session)
    big = b'{"a":"' + b"x" * bundles.MAX_BYTES + b'"}'
    refuse(db_session, big, "ed25519=AAAA", "malformed", "")
    refuse(db_session, b"\xff\xfe", "ed25519=AAAA", "malformed", "")
    refuse(
        db_session,
        b'{"kind":"result","centre":"' + w.centre.name.encode() + b'"}',
        "ed25519=AA",
        "malformed",
        w.centre.name,
    )


# --- over HTTP ---------------------------------------------------------------------------------


def test_the_api_registers_rotates_revokes_and_receives(
    client: TestClient, db_session: Session, hub: None
) -> None:
    admin = admin_headers(db_session)
    key = Ed25519PrivateKey.generate()
    answer = client.post(
        "/api/v1/federation/centres",
        json={
            "name": "north",
            "title": "North Hospital",
            "contact": "eeg@north.example",
            "public_key": key_text(key),
        },
        headers=admin,
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["keys"][0]["fingerprint"] == signing_fp(key)
    # Researchers may not register centres.
    researcher = f.headers(db_session, f.user(db_session))
    assert (
        client.post(
            "/api/v1/federation/centres",
            json={"name": "x", "public_key": key_text(key)},
            headers=researcher,
        ).status_code
        == 403
    )
    from .federation_world import World, offered_version

    w = World(db_session, service.get_centre(db_session, "north"), key, offered_version(db_session))
    payload, signature = sign(w.result(), key)
    sent = client.post(
        "/api/v1/federation/bundles",
        content=payload,
        headers={"Content-Type": "application/json", service.SIGNATURE_HEADER: signature},
    )
    assert sent.status_code == 201, sent.text
    assert sent.json()["figures"]["event_f1"] == 0.31
    again = client.post(
        "/api/v1/federation/bundles",
        content=payload,
        headers={"Content-Type": "application/json", service.SIGNATURE_HEADER: signature},
    )
    assert again.status_code == 409
    assert again.json()["error"] == "BundleRefused"
    # The refusal was counted although the request was refused.
    counts = client.get("/api/v1/federation/refusals", headers=admin).json()
    assert {"centre": "north", "reason": "replay", "count": 1} in [
        {k: c[k] for k in ("centre", "reason", "count")} for c in counts
    ]
    # Anyone reads the centre, its keys' fingerprints and its datasets.
    page = client.get("/api/v1/federation/centres/north").json()
    assert page["contact"] is None
    assert page["datasets"][0]["hours"] == 38.5
    assert page["external_results"][0]["dataset"]["name"] == "centre-eeg"
    detail = client.get(f"/api/v1/federation/results/{page['external_results'][0]['id']}").json()
    assert detail["payload"].encode() == payload
    # Rotation and revocation.
    new_key = Ed25519PrivateKey.generate()
    rotated = client.post(
        "/api/v1/federation/centres/north/keys",
        json={"public_key": key_text(new_key)},
        headers=admin,
    )
    assert [k["state"] for k in rotated.json()["keys"]] == ["retired", "active"]
    revoked = client.post(
        f"/api/v1/federation/centres/north/keys/{signing_fp(new_key)}/revoke", headers=admin
    )
    assert [k["state"] for k in revoked.json()["keys"]] == ["retired", "revoked"]


def test_the_catalogue_lists_only_what_owners_offer(
    client: TestClient, db_session: Session, hub: None
) -> None:
    from .federation_world import offered_version

    offered = offered_version(db_session)
    not_allowed = offered_version(db_session, external_evaluation=False)
    private = offered_version(db_session, visibility=Visibility.PRIVATE)
    body = client.get("/api/v1/federation/catalogue").json()
    ids = {v["id"] for v in body["versions"]}
    assert offered.id in ids
    assert not ({not_allowed.id, private.id} & ids)
    entry = next(v for v in body["versions"] if v["id"] == offered.id)
    assert entry["reference"] == f"127.0.0.1:5999/szbench/algorithms@{offered.registry_digest}"
    assert body["hub"] == HUB


def test_snapshots_and_citations_carry_the_centres_results(
    client: TestClient, db_session: Session, hub: None
) -> None:
    from szbench import citations
    from szbench.leaderboards import snapshots
    from szbench.models import DatasetKind

    w = world(db_session)
    ds = f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE)
    dv = f.dataset_version(db_session, ds)
    f.recording(db_session, dv)
    evaluation = f.evaluation(db_session, w.version, dv)
    f.result(db_session, evaluation, {"01": {"event_f1": 0.5}})
    received = service.receive(db_session, *sign(w.result(), w.key)).row
    snapshot, _ = snapshots.take(db_session, ds.slug, dv.version)
    (frozen,) = snapshot.board["external"]
    assert frozen["payload_sha256"] == received.payload_sha256
    assert frozen["figures"]["event_f1"] == 0.31
    assert frozen["withdrawn"] is False
    note = citations.bibtex(snapshots.citation(snapshot))
    assert received.payload_sha256 in note
    entry = citations.bibtex(snapshots.entry_citation(snapshot, evaluation.id))
    assert f"{w.centre.name} centre-eeg: event F1 0.31" in entry
    page = client.get(f"/leaderboards/{ds.slug}/snapshots/{snapshot.id}").text
    assert received.payload_sha256 in page
    cited = client.get(f"/api/v1/federation/results/{received.id}/citation?format=bibtex")
    assert cited.status_code == 200
    assert received.payload_sha256 in cited.text
    assert "Signed bundle 1" in cited.text
    cff = client.get(f"/api/v1/federation/results/{received.id}/citation?format=cff")
    assert "external validation" in cff.text


def test_the_stated_federation_bounds_are_the_arithmetic() -> None:
    """docs/security.md, "Federated evaluation", states what the code computes."""
    import math
    import re
    from pathlib import Path

    from szbench.config import get_settings
    from szbench.federation import released

    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    stated = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"<!-- federation:(\w+) -->([0-9.]+)", text)
    }
    per_day = get_settings().held_out_runs_per_day or 0
    assert stated == {
        "bits_100": round(released.bits_per_result(recordings=100), 1),
        "bits_1000": round(released.bits_per_result(recordings=1000), 1),
        "bits_per_day_1000": round(per_day * released.bits_per_result(recordings=1000), 1),
    }
    assert round(math.log2(100 * 900 / 60 + 1), 1) == 10.6
