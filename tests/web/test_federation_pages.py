"""Federation pages (issue 31): the hub's centres, a centre's page, the external-validation
view and the algorithm page's section; the centre's admin page and a bundle's approval page,
which shows exactly the bytes that leave. Forms through the app, then Chromium at 1280 and
390 px (no sideways scrolling, axe-core)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.db import session_scope
from szbench.federation import centre, hub_client, service, signing
from szbench.models import DatasetKind, DatasetResult, Evaluation, EvaluationStatus, Role
from tests.platform import factories as f
from tests.platform.federation_world import HUB, catalogue_of, hub_settings, key_text, sign, world

from .browsing import fits_and_passes_axe, sign_in
from .conftest import PASSWORD, post_form
from .conftest import sign_in as client_sign_in

ADMIN = "admin@hub.example"


def build(session: Session) -> dict[str, Any]:
    """A hub with a centre and a published (and a withdrawn) result, and, in the same
    database, this site as a centre with a draft bundle."""
    admin = f.user(session, role=Role.ADMIN, email=ADMIN, password=PASSWORD)
    w = world(session, "north")
    w.centre.title = "North University Hospital"
    kept = service.receive(session, *sign(w.result(), w.key)).row
    gone = service.receive(session, *sign(w.result(figures__event_f1=0.12), w.key)).row
    service.receive(session, *sign(w.withdrawal(gone.sequence, "labels were wrong"), w.key))
    # This site as a centre: its key, subscription, dataset and a finished evaluation.
    signing.generate()
    service.register_centre(session, name="south", public_key=signing.own_public_key()[0])
    sub = centre.subscribe(session, hub_url=HUB, centre_name="south", by=admin)
    ds = f.dataset(session, DatasetKind.HELD_OUT, slug="south-icu", title="South ICU")
    dv = f.dataset_version(session, ds)
    for i in range(5):
        f.recording(session, dv, subject=f"{i:02d}")
    centre.set_dataset(session, sub, ds.slug, min_subjects=5)
    centre.sync(session, sub, catalogue_of(session))
    evaluation = session.scalars(
        select(Evaluation).where(Evaluation.dataset_version_id == dv.id)
    ).one()
    evaluation.status = EvaluationStatus.DONE
    session.add(
        DatasetResult(evaluation_id=evaluation.id, subjects=5, recordings=5, event_f1=0.4444,
                      event_sensitivity=0.5, event_precision=0.4, event_fp_rate=2.22, sample_f1=0.3)
    )  # fmt: skip
    session.flush()
    session.refresh(evaluation)
    draft = centre.prepare_one(session, sub, evaluation)
    return {
        "algorithm_id": w.version.algorithm_id,
        "kept": kept.id,
        "draft": draft.id,
        "fingerprint": w.centre.keys[0].fingerprint,
    }


@pytest.fixture
def hub(settings_env: pytest.MonkeyPatch) -> None:
    hub_settings(settings_env)


def test_the_hubs_pages_show_centres_keys_datasets_and_results(
    client: TestClient, db_session: Session, hub: None
) -> None:
    ids = build(db_session)
    centres = client.get("/centres").text
    assert "North University Hospital" in centres
    assert ids["fingerprint"] in centres
    page = client.get("/centres/north").text
    assert "Centre EEG 2026" in page  # the dataset's description from its bundle
    assert "38.5" in page
    assert "withdrawn" in page
    assert "labels were wrong" in page
    assert "ops@c.example" not in page  # the contact is for admins
    board = client.get("/external-validation").text
    assert "north" in board
    assert "0.31" in board
    algorithm = client.get(f"/algorithms/{ids['algorithm_id']}").text
    assert "External validation" in algorithm
    assert "allowed: clinical centres" in algorithm


def test_admins_register_rotate_and_revoke_on_the_pages(
    client: TestClient, db_session: Session, hub: None
) -> None:
    build(db_session)
    client_sign_in(client, ADMIN)
    key = Ed25519PrivateKey.generate()
    answer = post_form(
        client, "/centres", "/centres", {"name": "east", "public_key": key_text(key)}
    )
    assert "Centre east registered" in answer.text
    rotated = Ed25519PrivateKey.generate()
    answer = post_form(
        client, "/centres/east", "/centres/east/keys", {"public_key": key_text(rotated)}
    )
    assert "the previous one is retired" in answer.text
    fp = signing.fingerprint(signing.public_bytes(rotated.public_key()))
    answer = post_form(client, "/centres/east", "/centres/east/keys/revoke", {"fingerprint": fp})
    assert f"key {fp} revoked" in answer.text
    assert "Refused bundles" not in client.get("/centres").text  # none refused yet


def test_the_approval_page_shows_exactly_the_bytes_that_leave(
    client: TestClient, db_session: Session, hub: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = build(db_session)
    client_sign_in(client, ADMIN)
    page = client.get(f"/admin/federation/bundles/{ids['draft']}").text
    draft = centre.get_bundle(db_session, ids["draft"])
    import html

    shown = html.unescape(page.split('id="payload" tabindex="0">')[1].split("</pre>")[0])
    assert shown == draft.payload
    assert hashlib.sha256(shown.encode()).hexdigest() in page
    assert f"POST {HUB}/api/v1/federation/bundles" in page
    sent: list[bytes] = []

    def publish(url: str, payload: bytes, signature: str) -> hub_client.Answer:
        sent.append(payload)
        received = service.receive(db_session, payload, service.SIGNATURE_SCHEME + signature)
        return hub_client.Answer(201, {"id": received.row.id})

    monkeypatch.setattr(hub_client, "publish", publish)
    # An approval of other bytes than those shown sends nothing.
    here = f"/admin/federation/bundles/{ids['draft']}"
    wrong = post_form(client, here, f"{here}/approve", {"payload_sha256": "0" * 64})
    assert "not the one approved" in wrong.text
    assert sent == []
    done = post_form(client, here, f"{here}/approve", {"payload_sha256": draft.payload_sha256})
    assert "sent (201" in done.text
    assert sent == [draft.payload.encode()]
    admin_page = client.get("/admin/federation").text
    assert "south-icu" in admin_page
    assert json.loads(sent[0])["figures"]["event_f1"] == 0.44


# --- Chromium, both widths ------------------------------------------------------------------


def seed() -> dict[str, Any]:
    with session_scope() as session:
        return build(session)


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Any) -> Any:
    from .browsing import browser_site

    hub_settings(settings_env)
    settings_env.setenv("SZBENCH_DATA_DIR", str(tmp_path / "data"))
    with browser_site(
        settings_env, pg_url, seed, SZBENCH_PUBLIC_URL=HUB, SZBENCH_REGISTRY="127.0.0.1:5999"
    ) as running:
        yield running


@pytest.mark.parametrize("width", [1280, 390])
def test_federation_pages_in_a_browser(
    site: Any, watched: Any, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def publish(url: str, payload: bytes, signature: str) -> hub_client.Answer:
        with session_scope() as session:
            service.receive(session, payload, service.SIGNATURE_SCHEME + signature)
        return hub_client.Answer(201, {})

    # The server runs in this process (a thread): its calls to the hub land here.
    monkeypatch.setattr(hub_client, "publish", publish)
    page = watched.page()
    for path in (
        "/centres",
        "/centres/north",
        "/external-validation",
        f"/algorithms/{site.ids['algorithm_id']}",
    ):
        page.goto(site.url + path)
        fits_and_passes_axe(page, f"{path} at {width}")
    sign_in(page, site.url, ADMIN)
    page.goto(f"{site.url}/admin/federation")
    fits_and_passes_axe(page, f"/admin/federation at {width}")
    page.goto(f"{site.url}/admin/federation/bundles/{site.ids['draft']}")
    fits_and_passes_axe(page, f"the approval page at {width}")
    body = page.locator("#payload").inner_text()
    bundle = json.loads(body)
    assert bundle["centre"] == "south"
    if width == 1280:
        page.get_by_role("button", name="Approve and send these bytes").click()
        page.wait_for_load_state()
        assert "sent (201" in page.locator(".flash").inner_text()
        page.goto(f"{site.url}/centres/south")
        assert "South ICU" in page.content()
        fits_and_passes_axe(page, "/centres/south")
