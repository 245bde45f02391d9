"""Every endpoint against every role: who is let through, who gets 401 or 403.

The table must name every operation in the OpenAPI schema (a test checks it), so a new
route cannot ship without its authorization being stated and tested here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.leaderboards import snapshots
from szbench.models import DatasetKind, Role, Upload
from szbench.teams import service as teams
from szbench.uploads import service as uploads
from tests.platform import factories as f

# Levels: who may call. "owner" means a researcher who owns the object (or an admin).
PROBE, ANYONE, SIGNED_IN, SUBMITTER, OWNER, ADMIN, WORKER = (
    "probe", "anyone", "signed_in", "submitter", "owner", "admin", "worker",
)  # fmt: skip
# A centre's signed bundle: its Ed25519 signature is the credential, so every role's token is
# none (401 unsigned); the signature's checks are tests/platform/test_federation_hub.py's.
SIGNATURE = "signature"

ROLES = ("anonymous", "centre", "other", "owner", "admin")

ALLOWED = {
    PROBE: set(ROLES),
    ANYONE: set(ROLES),
    SIGNED_IN: {"centre", "other", "owner", "admin"},
    SUBMITTER: {"other", "owner", "admin"},
    OWNER: {"owner", "admin"},
    ADMIN: {"admin"},
    # Worker tokens only (the `worker` scope alone): no role's ordinary token gets through;
    # a worker token's own access is tests/platform/test_worker_fetch.py's.
    WORKER: set(),
    SIGNATURE: set(),
}

DIGEST = "sha256:" + "c" * 64

TABLE: dict[tuple[str, str], tuple[str, Any]] = {
    ("POST", "/api/v1/auth/login"): (ANYONE, {"email": "{owner_email}", "password": "s3cret-pass"}),
    ("POST", "/api/v1/auth/logout"): (SIGNED_IN, None),
    ("POST", "/api/v1/auth/signup"): (
        ANYONE,
        {"email": "{new}@example.org", "password": "longenough"},
    ),
    ("POST", "/api/v1/auth/password"): (
        SIGNED_IN,
        {"current_password": "s3cret-pass", "new_password": "a-new-long-passphrase"},
    ),
    ("GET", "/api/v1/auth/me"): (SIGNED_IN, None),
    # The reset or verification token is the credential (tests/platform/test_accounts.py).
    ("POST", "/api/v1/auth/password-reset"): (
        ANYONE,
        {"token": "not-a-token", "new_password": "a-new-long-passphrase"},
    ),
    ("POST", "/api/v1/auth/password-reset/request"): (ANYONE, {"email": "{new}@example.org"}),
    ("POST", "/api/v1/auth/verify"): (ANYONE, {"token": "not-a-token"}),
    ("POST", "/api/v1/users/{user_id}/password-reset"): (ADMIN, {}),
    # Who sees which evaluation's per-subject values: tests/platform/test_compare.py.
    ("GET", "/api/v1/comparisons"): (ANYONE, None),
    ("GET", "/api/v1/tokens"): (SIGNED_IN, None),
    ("POST", "/api/v1/tokens"): (SIGNED_IN, {"name": "t"}),
    ("DELETE", "/api/v1/tokens/{token_id}"): (OWNER, None),
    ("GET", "/api/v1/users"): (ADMIN, None),
    ("POST", "/api/v1/users"): (ADMIN, {"email": "{new}@example.org", "role": "centre"}),
    ("GET", "/api/v1/users/{user_id}"): (ADMIN, None),
    ("PATCH", "/api/v1/users/{user_id}"): (ADMIN, {"name": "renamed"}),
    ("GET", "/api/v1/users/me/quota"): (SIGNED_IN, None),
    ("GET", "/api/v1/users/me/notifications"): (SIGNED_IN, None),
    ("PATCH", "/api/v1/users/me/notifications"): (SIGNED_IN, {"all_phases": True}),
    ("POST", "/api/v1/users/me/notifications/webhook-secret"): (SIGNED_IN, {}),
    ("POST", "/api/v1/users/me/notifications/test"): (SIGNED_IN, None),
    ("GET", "/api/v1/users/me/notifications/deliveries"): (SIGNED_IN, None),
    # "owner": an owner of the team (members: tests/platform/test_teams.py).
    ("GET", "/api/v1/teams"): (SIGNED_IN, None),
    ("POST", "/api/v1/teams"): (SUBMITTER, {"name": "{new}"}),
    ("GET", "/api/v1/teams/{team_id}"): (OWNER, None),
    ("DELETE", "/api/v1/teams/{team_id}"): (OWNER, None),
    ("POST", "/api/v1/teams/{team_id}/members"): (OWNER, {"email": "{other_email}"}),
    ("PATCH", "/api/v1/teams/{team_id}/members/{user_id}"): (OWNER, {"role": "owner"}),
    ("DELETE", "/api/v1/teams/{team_id}/members/{user_id}"): (OWNER, None),
    ("PUT", "/api/v1/teams/{team_id}/algorithms/{algorithm_id}"): (OWNER, None),
    ("DELETE", "/api/v1/teams/{team_id}/algorithms/{algorithm_id}"): (OWNER, None),
    ("POST", "/api/v1/uploads"): (SUBMITTER, {"filename": "a.tar", "size_bytes": 10}),
    ("GET", "/api/v1/uploads"): (SUBMITTER, None),
    ("GET", "/api/v1/uploads/{upload_id}"): (OWNER, None),
    ("PUT", "/api/v1/uploads/{upload_id}"): (OWNER, b"12345"),
    ("DELETE", "/api/v1/uploads/{upload_id}"): (OWNER, None),
    ("POST", "/api/v1/uploads/{upload_id}/check"): (OWNER, None),
    ("GET", "/api/v1/algorithms"): (ANYONE, None),
    ("POST", "/api/v1/algorithms/preflight"): (SUBMITTER, {"name": "{new}", "version": "v1"}),
    ("POST", "/api/v1/algorithms"): (SUBMITTER, {"name": "{new}"}),
    ("GET", "/api/v1/algorithms/{algorithm_id}"): (ANYONE, None),
    ("PATCH", "/api/v1/algorithms/{algorithm_id}"): (OWNER, {"title": "New title"}),
    ("GET", "/api/v1/algorithms/{algorithm_id}/versions"): (ANYONE, None),
    ("POST", "/api/v1/algorithms/{algorithm_id}/versions"): (
        OWNER,
        {"version": "{new}", "image_reference": f"algo@{DIGEST}"},
    ),
    ("GET", "/api/v1/algorithms/{algorithm_id}/versions/{version_id}"): (ANYONE, None),
    ("GET", "/api/v1/algorithms/{algorithm_id}/results"): (ANYONE, None),
    ("GET", "/api/v1/phases"): (ANYONE, None),
    ("POST", "/api/v1/phases"): (ADMIN, {"slug": "{new}"}),
    ("GET", "/api/v1/phases/{phase}"): (ANYONE, None),
    ("PATCH", "/api/v1/phases/{phase}"): (ADMIN, {"title": "Final"}),
    ("POST", "/api/v1/phases/{phase}/publish"): (ADMIN, None),
    ("GET", "/api/v1/datasets"): (ANYONE, None),
    ("POST", "/api/v1/datasets"): (ADMIN, {"slug": "{new}"}),
    ("GET", "/api/v1/datasets/{slug}"): (ANYONE, None),
    ("PATCH", "/api/v1/datasets/{slug}"): (ADMIN, {"disclosure": "subject"}),
    ("POST", "/api/v1/datasets/{slug}/versions"): (
        ADMIN,
        {"version": "9", "prepared_path": "/nonexistent"},
    ),
    ("GET", "/api/v1/datasets/{slug}/versions/{version}/benchmark-plan"): (ADMIN, None),
    ("POST", "/api/v1/datasets/{slug}/versions/{version}/benchmark"): (ADMIN, None),
    # Held-out data: admins only (public samples: anyone signed in, tested elsewhere).
    ("GET", "/api/v1/datasets/{slug}/versions/{version}/recordings"): (ADMIN, None),
    ("GET", "/api/v1/datasets/{slug}/versions/{version}/recordings/{key}/annotations"): (
        ADMIN,
        None,
    ),
    ("GET", "/api/v1/datasets/{slug}/versions/{version}/recordings/{key}/eeg"): (ADMIN, None),
    ("GET", "/api/v1/evaluations"): (ANYONE, None),
    ("POST", "/api/v1/evaluations"): (
        OWNER,
        {"algorithm_version_id": "{version_id}", "dataset": "{slug}"},
    ),
    ("GET", "/api/v1/evaluations/{evaluation_id}"): (ANYONE, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/progress"): (ANYONE, None),
    ("POST", "/api/v1/evaluations/{evaluation_id}/cancel"): (OWNER, None),
    ("POST", "/api/v1/evaluations/{evaluation_id}/rerun"): (OWNER, None),
    ("POST", "/api/v1/evaluations/{evaluation_id}/rescore"): (OWNER, {"scoring_params": {}}),
    ("POST", "/api/v1/evaluations/{evaluation_id}/publish"): (ADMIN, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/result"): (ANYONE, None),
    # Held-out data at the default disclosure (aggregate): per-subject and per-recording
    # results are for admins (the other levels: tests/platform/test_disclosure.py).
    ("GET", "/api/v1/evaluations/{evaluation_id}/subjects"): (ADMIN, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/subjects/download"): (ADMIN, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/recordings"): (ADMIN, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/recordings/download"): (ADMIN, None),
    # Detections on held-out data: admins only, not even the owner.
    ("GET", "/api/v1/evaluations/{evaluation_id}/recordings/{run_id}/detections"): (ADMIN, None),
    ("GET", "/api/v1/leaderboards"): (ANYONE, None),
    ("GET", "/api/v1/leaderboards/{slug}"): (ANYONE, None),
    ("GET", "/api/v1/leaderboards/{slug}/download"): (ANYONE, None),
    ("GET", "/api/v1/leaderboards/{slug}/snapshots"): (ANYONE, None),
    ("POST", "/api/v1/leaderboards/{slug}/snapshots"): (ADMIN, None),
    ("GET", "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}"): (ANYONE, None),
    ("GET", "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}/citation"): (ANYONE, None),
    (
        "GET",
        "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}/entries/{evaluation_id}/citation",
    ): (
        ANYONE,
        None,
    ),
    ("GET", "/api/v1/datasets/{slug}/versions/{version}/citation"): (ANYONE, None),
    ("GET", "/api/v1/evaluations/{evaluation_id}/citation"): (ANYONE, None),
    ("GET", "/api/v1/worker/recordings/{checksum}"): (WORKER, None),
    # Federation (docs/federation.md): the hub's public reads, its admins' centres and keys;
    # the centre's own side is admins' only.
    ("GET", "/api/v1/federation/catalogue"): (ANYONE, None),
    ("POST", "/api/v1/federation/bundles"): (SIGNATURE, {}),
    ("GET", "/api/v1/federation/centres"): (ANYONE, None),
    ("POST", "/api/v1/federation/centres"): (
        ADMIN,
        {"name": "north", "public_key": "A" * 43},
    ),
    ("GET", "/api/v1/federation/centres/{name}"): (ANYONE, None),
    ("POST", "/api/v1/federation/centres/{name}/keys"): (ADMIN, {"public_key": "A" * 43}),
    ("POST", "/api/v1/federation/centres/{name}/keys/{fingerprint}/revoke"): (ADMIN, None),
    ("GET", "/api/v1/federation/results"): (ANYONE, None),
    ("GET", "/api/v1/federation/results/{result_id}"): (ANYONE, None),
    ("GET", "/api/v1/federation/results/{result_id}/citation"): (ANYONE, None),
    ("GET", "/api/v1/federation/refusals"): (ADMIN, None),
    ("GET", "/api/v1/federation/key"): (ADMIN, None),
    ("POST", "/api/v1/federation/key"): (ADMIN, None),
    ("GET", "/api/v1/federation/subscription"): (ADMIN, None),
    ("POST", "/api/v1/federation/subscription"): (
        ADMIN,
        {"hub_url": "http://127.0.0.1:9", "centre_name": "south"},
    ),
    ("PATCH", "/api/v1/federation/subscription"): (ADMIN, {"follow_new": False}),
    ("POST", "/api/v1/federation/subscription/sync"): (ADMIN, None),
    ("PUT", "/api/v1/federation/subscription/datasets/{slug}"): (ADMIN, {}),
    ("DELETE", "/api/v1/federation/subscription/datasets/{slug}"): (ADMIN, None),
    ("PUT", "/api/v1/federation/subscription/versions/{hub_version_id}"): (
        ADMIN,
        {"followed": True},
    ),
    ("GET", "/api/v1/federation/outgoing"): (ADMIN, None),
    ("POST", "/api/v1/federation/outgoing"): (ADMIN, {"evaluation_id": "{evaluation_id}"}),
    ("GET", "/api/v1/federation/outgoing/{bundle_id}"): (ADMIN, None),
    ("POST", "/api/v1/federation/outgoing/{bundle_id}/approve"): (
        ADMIN,
        {"payload_sha256": "0" * 64},
    ),
    ("POST", "/api/v1/federation/outgoing/{bundle_id}/discard"): (ADMIN, None),
    ("POST", "/api/v1/federation/outgoing/{bundle_id}/redraft"): (ADMIN, None),
    ("POST", "/api/v1/federation/outgoing/{bundle_id}/withdraw"): (ADMIN, {}),
    ("GET", "/healthz"): (PROBE, None),
    ("GET", "/readyz"): (PROBE, None),
}


def _normalise(path: str) -> str:
    return path.replace("/phases/{slug}", "/phases/{phase}")


def test_table_names_every_operation(app: FastAPI) -> None:
    operations = {
        (method.upper(), _normalise(path))
        for path, ops in app.openapi()["paths"].items()
        for method in ops
    }
    assert operations == set(TABLE)


@dataclass
class Objects:
    params: dict[str, Any]
    users: dict[str, Any]


@pytest.fixture
def objects(db_session: Session) -> Objects:
    s = db_session
    users = {
        "centre": f.user(s, Role.CENTRE),
        "other": f.user(s),
        "owner": f.user(s, password="s3cret-pass"),
        "admin": f.user(s, Role.ADMIN),
    }
    owner = users["owner"]
    algo = f.algorithm(s, owner)
    version = f.version(s, algo)
    ds = f.dataset(s, DatasetKind.HELD_OUT)
    dv = f.dataset_version(s, ds, version="1.0")
    rec = f.recording(s, dv)
    ev = f.evaluation(s, version, dv)
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    run = f.run(s, ev, rec, detections_tsv="onset\n")
    phase = f.phase(s)
    token, _ = f.token(s, owner)
    snapshot, _ = snapshots.take(s, ds.slug, dv.version, by=users["admin"])
    team = teams.create_team(s, owner=owner, name=f"team-{f.n()}")
    return Objects(
        params={
            "token_id": token.id,
            "user_id": users["other"].id,
            "algorithm_id": algo.id,
            "version_id": version.id,
            "phase": phase.slug,
            "slug": ds.slug,
            "version": dv.version,
            "key": rec.key,
            "evaluation_id": ev.id,
            "run_id": run.id,
            "owner_email": owner.email,
            "snapshot_id": snapshot.id,
            "checksum": rec.checksum,
            "other_email": users["other"].email,
            "team_id": team.id,
            "name": "no-such-centre",
            "fingerprint": DIGEST,
            "result_id": 1,
            "bundle_id": 1,
            "hub_version_id": 1,
        },
        users=users,
    )


def _fill(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, str):
        if value == "{version_id}":
            return params["version_id"]
        return value.format(new=f"n{f.n()}", **params)
    if isinstance(value, dict):
        return {k: _fill(v, params) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("method", "path"), sorted(TABLE))
def test_authorization(
    method: str, path: str, client: TestClient, db_session: Session, objects: Objects
) -> None:
    level, body = TABLE[(method, path)]
    for role in ROLES:
        params = dict(objects.params)
        headers: dict[str, str] = {}
        if role != "anonymous":
            headers = f.headers(db_session, objects.users[role])
        if "{upload_id}" in path:
            # One fresh session per role; the owner's earlier ones go, so that the per-user
            # cap on open sessions is not what answers.
            owner = objects.users["owner"]
            for previous in db_session.scalars(select(Upload).where(Upload.owner_id == owner.id)):
                db_session.delete(previous)
            params["upload_id"] = uploads.create_upload(
                db_session, owner, filename="a.tar", size_bytes=5
            ).id
        url = path.format(**params)
        kwargs: dict[str, Any] = {"headers": headers}
        if isinstance(body, bytes):
            kwargs["content"] = body
            kwargs["params"] = {"offset": 0}
        elif body is not None:
            kwargs["json"] = _fill(body, params)
        response = client.request(method, url, **kwargs)
        status = response.status_code
        assert status < 500 or status == 503, (role, status, response.text)
        if role in ALLOWED[level]:
            assert status not in (401, 403), (role, status, response.text)
        elif level == SIGNATURE or role == "anonymous":
            assert status == 401, (role, status, response.text)
        elif level == OWNER:
            # Someone else's object: refused, or not even acknowledged.
            assert status in (403, 404), (role, status, response.text)
        else:
            assert status == 403, (role, status, response.text)
        if status >= 400 and level != PROBE:
            body_json = response.json()
            assert set(body_json) == {"error", "detail"}, body_json
