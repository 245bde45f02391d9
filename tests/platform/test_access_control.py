"""Access control around the API: existence oracles, the last admin, sign-in without
anonymous reads, nosniff everywhere, and the OpenAPI security of public reads."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

import szbench.web
from szbench.auth import service as auth
from szbench.config import get_settings
from szbench.errors import Conflict
from szbench.leaderboards import service as leaderboards
from szbench.leaderboards import statistics
from szbench.models import DatasetKind, Role, User, Visibility
from szbench.results import service as results
from tests.platform import factories as f

# --- (a) a private object answers exactly as a missing one -------------------------------


def _probes(algo: int, version: int, evaluation: int, slug: str) -> list[tuple[str, str, Any]]:
    digest = "sha256:" + "a" * 64
    return [
        ("GET", f"/api/v1/algorithms/{algo}", None),
        ("PATCH", f"/api/v1/algorithms/{algo}", {"description": "mine now"}),
        ("GET", f"/api/v1/algorithms/{algo}/versions", None),
        ("GET", f"/api/v1/algorithms/{algo}/versions/{version}", None),
        (
            "POST",
            f"/api/v1/algorithms/{algo}/versions",
            {"version": "9.9", "image_reference": f"localhost:5000/x@{digest}"},
        ),
        ("POST", "/api/v1/evaluations", {"algorithm_version_id": version, "dataset": slug}),
        ("GET", f"/api/v1/evaluations?algorithm_id={algo}", None),
        ("GET", f"/api/v1/evaluations?algorithm_version_id={version}", None),
        ("GET", f"/api/v1/evaluations/{evaluation}", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/progress", None),
        ("POST", f"/api/v1/evaluations/{evaluation}/cancel", None),
        ("POST", f"/api/v1/evaluations/{evaluation}/rerun", None),
        ("POST", f"/api/v1/evaluations/{evaluation}/rescore", {"scoring_params": {}}),
        ("GET", f"/api/v1/evaluations/{evaluation}/result", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/subjects", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/recordings", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/subjects/download", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/recordings/download", None),
        ("GET", f"/api/v1/evaluations/{evaluation}/recordings/1/detections", None),
        ("GET", f"/api/v1/algorithms/{algo}/results", None),
    ]


def _answers(
    client: TestClient, headers: dict[str, str], probes: list[tuple[str, str, Any]]
) -> dict[str, tuple[int, bytes]]:
    for clear in (statistics.clear_cache, leaderboards.clear_cache, results.clear_cache):
        clear()
    answers = {}
    for method, url, body in probes:
        response = client.request(method, url, json=body, headers=headers)
        answers[f"{method} {url}"] = (response.status_code, response.content)
    return answers


@pytest.mark.parametrize("private", ["algorithm", "hidden evaluation"])
def test_another_users_private_objects_answer_as_missing_ones(
    client: TestClient, db_session: Session, private: str
) -> None:
    owner = f.user(db_session)
    caller = f.headers(db_session, f.user(db_session))
    visibility = Visibility.PRIVATE if private == "algorithm" else Visibility.PUBLIC
    algo = f.algorithm(db_session, owner, visibility=visibility)
    version = f.version(db_session, algo)
    ds = f.dataset(db_session, DatasetKind.HELD_OUT)
    dv = f.dataset_version(db_session, ds, is_active=True)
    f.recording(db_session, dv)
    evaluation = f.evaluation(db_session, version, dv, published=False)
    db_session.commit()
    probes = _probes(algo.id, version.id, evaluation.id, ds.slug)
    if private != "algorithm":
        # A public algorithm and its versions are everyone's to see: only the unpublished
        # evaluation is private.
        probes = [p for p in probes if "/evaluations/" in p[1]]

    existing = _answers(client, caller, probes)

    # The same ids once nothing is behind them.
    table = "evaluations" if private != "algorithm" else "algorithms"
    key = evaluation.id if private != "algorithm" else algo.id
    db_session.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": key})
    db_session.commit()
    db_session.expunge_all()
    missing = _answers(client, caller, probes)

    assert existing == missing
    # Not found, or refused for reasons that have nothing to do with the object.
    assert all(status in (200, 404) for status, _ in existing.values()), existing


# --- (b) the last active admin stays one ---------------------------------------------------


def _only_admin(db_session: Session) -> tuple[Any, dict[str, str]]:
    # Admins made by other fixtures of this database are set aside inside this test's
    # transaction (rolled back with it).
    db_session.execute(text("UPDATE users SET is_active = false WHERE role = 'admin'"))
    admin = f.user(db_session, Role.ADMIN)
    return admin, f.headers(db_session, admin, ["read", "write", "admin"])


@pytest.mark.parametrize("change", [{"role": "researcher"}, {"is_active": False}])
def test_the_last_active_admin_cannot_demote_or_deactivate_itself(
    client: TestClient, db_session: Session, change: dict[str, Any]
) -> None:
    admin, headers = _only_admin(db_session)
    db_session.commit()

    refused = client.patch(f"/api/v1/users/{admin.id}", json=change, headers=headers)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == "Conflict"
    assert "last active admin" in refused.json()["detail"]
    me = client.get(f"/api/v1/users/{admin.id}", headers=headers).json()
    assert (me["role"], me["is_active"]) == ("admin", True)

    # An inactive admin does not count; an active one does.
    f.user(db_session, Role.ADMIN).is_active = False
    db_session.commit()
    again = client.patch(f"/api/v1/users/{admin.id}", json=change, headers=headers)
    assert again.status_code == 409
    f.user(db_session, Role.ADMIN)
    db_session.commit()
    done = client.patch(f"/api/v1/users/{admin.id}", json=change, headers=headers)
    assert done.status_code == 200, done.text


def test_admins_may_still_change_other_fields_of_the_last_admin(
    client: TestClient, db_session: Session
) -> None:
    admin, headers = _only_admin(db_session)
    researcher = f.user(db_session)
    db_session.commit()
    renamed = client.patch(
        f"/api/v1/users/{admin.id}", json={"name": "Still admin", "role": "admin"}, headers=headers
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "Still admin"
    demoted = client.patch(
        f"/api/v1/users/{researcher.id}", json={"is_active": False}, headers=headers
    )
    assert demoted.status_code == 200, demoted.text


# --- (c) sign-up and login while anonymous reads are off -----------------------------------


def test_signup_and_login_work_when_anonymous_reads_are_off(
    client: TestClient, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_ANONYMOUS_READ", "false")
    settings_env.setenv("SZBENCH_ALLOW_SIGNUP", "true")
    get_settings.cache_clear()
    email, password = f"closed{f.n()}@example.org", "Quiet-Heron-Ledger-1937"

    assert client.get("/api/v1/algorithms").status_code == 401
    signed_up = client.post("/api/v1/auth/signup", json={"email": email, "password": password})
    assert signed_up.status_code == 201, signed_up.text
    login = client.post("/api/v1/auth/login", json={"email": email, "password": password})
    assert login.status_code == 200, login.text
    token = login.json()["token"]
    reads = client.get("/api/v1/algorithms", headers={"Authorization": f"Bearer {token}"})
    assert reads.status_code == 200, reads.text


# --- (d) nosniff on every response -------------------------------------------------------


def test_every_response_says_nosniff(app: FastAPI, client: TestClient, db_session: Session) -> None:
    def boom() -> None:
        raise RuntimeError("an unexpected fault")

    app.add_api_route("/api/v1/test-boom", boom)
    researcher = f.headers(db_session, f.user(db_session))
    db_session.commit()
    static = sorted((Path(szbench.web.__file__).parent / "static").iterdir())[0].name
    answers = {
        "api read": client.get("/api/v1/algorithms"),
        "api read, signed in": client.get("/api/v1/algorithms", headers=researcher),
        "api read, again (read front)": client.get("/api/v1/algorithms"),
        "not found": client.get("/api/v1/algorithms/999999"),
        "unknown path": client.get("/no/such/path"),
        "unknown api path": client.get("/api/v1/no-such-thing"),
        "method not allowed": client.delete("/api/v1/algorithms"),
        "validation error": client.get("/api/v1/algorithms?limit=-1"),
        "unauthorized": client.get("/api/v1/auth/me"),
        "bad token": client.get("/api/v1/algorithms", headers={"Authorization": "Bearer x"}),
        "server error": client.get("/api/v1/test-boom"),
        "static file": client.get(f"/static/{static}"),
        "missing static file": client.get("/static/nope.js"),
        "openapi": client.get("/api/v1/openapi.json"),
        "docs page": client.get("/api/v1/docs"),
        "web page": client.get("/"),
        "health": client.get("/healthz"),
        "metrics": client.get("/metrics"),
        "head": client.head("/api/v1/algorithms"),
    }
    assert answers["server error"].status_code == 500
    assert answers["unknown path"].status_code == 404
    for what, response in answers.items():
        values = response.headers.get_list("x-content-type-options")
        assert values == ["nosniff"], (what, response.status_code, values)


# --- (e) the OpenAPI document says which operations need no token -------------------------


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]] | None]]:
    return [
        (method.upper(), path, operation.get("security"))
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
    ]


def test_openapi_marks_exactly_the_operations_anonymous_callers_may_use(
    client: TestClient,
) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    assert set(schema["components"]["securitySchemes"]) == {"token"}
    operations = _operations(schema)
    public = {(m, p) for m, p, security in operations if security and {} in security}
    assert {
        ("GET", "/api/v1/algorithms"),
        ("GET", "/api/v1/leaderboards/{slug}"),
        ("GET", "/api/v1/evaluations/{evaluation_id}"),
    } <= public
    for method, path, security in operations:
        if not path.startswith("/api/v1/") or path == "/api/v1/auth/login":
            continue
        url = path.replace("{slug}", "x").replace("{version}", "x").replace("{key}", "x")
        url = re.sub(r"\{[a-z_]+\}", "1", url)
        answer = client.request(method, url, json={} if method != "GET" else None)
        if (method, path) in public:
            assert answer.status_code != 401, (method, path, answer.text)
        elif security is not None:
            # Not usable without a token, and the document says which one.
            assert security == [{"token": []}], (method, path, security)
            assert answer.status_code == 401, (method, path, answer.status_code, answer.text)
        else:
            # The ways an anonymous caller stops being one: sign up, and the account
            # links (a reset or verification token is the credential).
            assert path in {
                "/api/v1/auth/signup",
                "/api/v1/auth/password-reset",
                "/api/v1/auth/password-reset/request",
                "/api/v1/auth/verify",
                # A centre's signed bundle: its Ed25519 signature is the credential.
                "/api/v1/federation/bundles",
            }, (method, path)


def test_without_anonymous_reads_the_document_asks_for_a_token_everywhere(
    app: FastAPI, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_ANONYMOUS_READ", "false")
    get_settings.cache_clear()
    schema = app.openapi()
    assert all(security in (None, [{"token": []}]) for _, _, security in _operations(schema)), [
        op for op in _operations(schema) if op[2] not in (None, [{"token": []}])
    ]


def test_two_admins_demoting_each_other_at_once_leave_one(pg_engine: Engine) -> None:
    """On real PostgreSQL, two transactions: the second waits for the first's lock, then
    sees that its own target is now the last active admin."""
    with Session(pg_engine) as setup:
        # Admins other tests committed to this session's database are set aside meanwhile.
        others = list(
            setup.scalars(select(User.id).where(User.role == Role.ADMIN, User.is_active.is_(True)))
        )
        setup.execute(update(User).where(User.id.in_(others)).values(is_active=False))
        a_id, b_id = f.user(setup, Role.ADMIN).id, f.user(setup, Role.ADMIN).id
        setup.commit()
    first, second = Session(pg_engine), Session(pg_engine)
    outcome: dict[str, str] = {}

    def demote_a() -> None:
        try:
            auth.update_user(second, second.get_one(User, a_id), role=Role.RESEARCHER)
            second.commit()
            outcome["second"] = "demoted"
        except Conflict:
            second.rollback()
            outcome["second"] = "refused"

    def someone_waits_for_a_lock() -> bool:
        with pg_engine.connect() as conn:
            waiting = conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        return bool(waiting)

    try:
        auth.update_user(first, first.get_one(User, b_id), role=Role.RESEARCHER)
        thread = threading.Thread(target=demote_a)
        thread.start()
        deadline = time.monotonic() + 30
        while not someone_waits_for_a_lock() and time.monotonic() < deadline:
            time.sleep(0.05)
        first.commit()
        thread.join(timeout=30)
        assert outcome == {"second": "refused"}
        with Session(pg_engine) as check:
            roles = {
                u.id: u.role for u in check.scalars(select(User).where(User.id.in_([a_id, b_id])))
            }
        assert roles == {a_id: Role.ADMIN, b_id: Role.RESEARCHER}
    finally:
        first.close()
        second.close()
        with Session(pg_engine) as cleanup:
            cleanup.execute(delete(User).where(User.id.in_([a_id, b_id])))
            cleanup.execute(update(User).where(User.id.in_(others)).values(is_active=True))
            cleanup.commit()
