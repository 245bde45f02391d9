"""Every page for every role, on the real app and PostgreSQL: status, content, access rules.

Held-out reference annotations (a seizure at 1234-1300 s here) must never reach a
non-admin's page; hidden-phase results stay with their owner until an admin publishes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench import __version__, queue
from szbench.config import get_settings
from szbench.models import (
    Algorithm,
    ApiToken,
    Dataset,
    DatasetKind,
    DatasetVersion,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Role,
    User,
    VersionStatus,
    Visibility,
)
from szbench.web import account
from tests.platform import factories as f

from .conftest import PASSWORD, csrf_of, post_form, sign_in

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
HELD_SEIZURE = (1234.0, 66.0)
PUBLIC_SEIZURE = (100.0, 60.0)


def tsv(duration_s: float, *events: tuple[float, float]) -> str:
    rows = [f"{o}\t{d}\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t{duration_s}\n" for o, d in events]
    return HEADER + "".join(rows)


@dataclass
class World:
    admin: User
    alice: User
    bob: User
    centre: User
    held: DatasetVersion
    public: DatasetVersion
    alice_algo_id: int
    alice_held: Evaluation
    alice_public: Evaluation
    alice_queued: Evaluation
    bob_algo_id: int
    bob_hidden: Evaluation


def _dataset(
    session: Session, root: Path, slug: str, kind: DatasetKind, recs: list
) -> DatasetVersion:
    ds = f.dataset(session, kind, slug=slug, title=slug.replace("-", " ").title())
    dv = f.dataset_version(session, ds, path=str(root), version="v1")
    (root / "annotations").mkdir(parents=True)
    for key, subject, duration, seizure in recs:
        (root / "annotations" / f"{key}_events.tsv").write_text(tsv(duration, seizure))
        f.recording(
            session,
            dv,
            subject=subject,
            key=key,
            duration_s=duration,
            annotations_path=f"annotations/{key}_events.tsv",
        )
    return dv


@pytest.fixture
def world(db_session: Session, tmp_path: Path) -> World:
    s = db_session
    admin = f.user(s, Role.ADMIN, email="admin@example.org", password=PASSWORD, name="Ada Admin")
    alice = f.user(s, email="alice@example.org", password=PASSWORD, name="Alice")
    bob = f.user(s, email="bob@example.org", password=PASSWORD, name="Bob")
    centre = f.user(s, Role.CENTRE, email="centre@example.org", password=PASSWORD, name="Centre")
    held = _dataset(
        s,
        tmp_path / "held",
        "held-out",
        DatasetKind.HELD_OUT,
        [
            ("sub-01_run-00", "01", 3600.0, HELD_SEIZURE),
            ("sub-02_run-00", "02", 3600.0, HELD_SEIZURE),
        ],
    )
    public = _dataset(
        s,
        tmp_path / "public",
        "public-sample",
        DatasetKind.PUBLIC_SAMPLE,
        [("sub-09_run-00", "09", 600.0, PUBLIC_SEIZURE)],
    )

    alpha = f.algorithm(s, alice, name="alpha", title="Alpha detector", authors="A. Lice")
    v1 = f.version(s, alpha, version="1.0", status_message="Smoke test passed.")
    alice_held = f.evaluation(s, v1, held)
    for rec in held.recordings:
        f.run(s, alice_held, rec, submitter_message=f"{rec.subject} scored", event_tp=1)
    f.result(
        s,
        alice_held,
        {
            "01": {
                "event_f1": 0.8,
                "event_sensitivity": 0.9,
                "event_precision": 0.7,
                "event_fp_rate": 2.0,
            },
            "02": {
                "event_f1": None,
                "event_sensitivity": None,
                "event_precision": 0.5,
                "event_fp_rate": 4.0,
            },
        },
    )
    alice_public = f.evaluation(s, v1, public, recordings_total=1, recordings_done=1)
    f.run(
        s,
        alice_public,
        public.recordings[0],
        detections_tsv=tsv(600.0, (110.0, 40.0), (400.0, 20.0)),
    )
    f.result(
        s,
        alice_public,
        {
            "09": {
                "event_f1": 0.67,
                "event_sensitivity": 1.0,
                "event_precision": 0.5,
                "event_fp_rate": 144.0,
            }
        },
    )
    v2 = f.version(s, alpha, version="2.0", status=VersionStatus.SMOKE_TESTING, status_message="")
    alice_queued = f.evaluation(s, v2, held, status=EvaluationStatus.QUEUED)

    phase = f.phase(s, slug="final", title="Final phase", hidden=True)
    beta = f.algorithm(s, bob, name="beta", title="Beta secret")
    bv = f.version(s, beta, version="0.1", phase_id=phase.id)
    bob_hidden = f.evaluation(s, bv, held, published=False)
    f.result(
        s,
        bob_hidden,
        {
            "01": {
                "event_f1": 0.95,
                "event_sensitivity": 0.95,
                "event_precision": 0.95,
                "event_fp_rate": 0.5,
            }
        },
    )
    s.flush()
    return World(
        admin,
        alice,
        bob,
        centre,
        held,
        public,
        alpha.id,
        alice_held,
        alice_public,
        alice_queued,
        beta.id,
        bob_hidden,
    )


# --- anonymous --------------------------------------------------------------------------------


def test_anonymous_reads_public_pages(client: TestClient, world: World) -> None:
    home = client.get("/")
    assert home.status_code == 200
    assert "Held Out" in home.text
    assert 'href="/login"' in home.text
    assert "szbench_csrf" in client.cookies

    assert "script-src 'self'" in home.headers["content-security-policy"]
    assert home.headers["x-frame-options"] == "DENY"
    board = client.get("/leaderboards/held-out")
    assert board.status_code == 200
    assert "Alpha detector" in board.text
    assert "Beta secret" not in board.text  # hidden phase, unpublished
    assert board.text.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart ci"') == 4
    assert 'aria-sort="ascending"' in board.text  # sorted by rank
    assert "What do these metrics mean?" in board.text

    assert client.get("/definitions").status_code == 200
    page = client.get(f"/algorithms/{world.alice_algo_id}")
    assert page.status_code == 200
    assert "Event F1 per subject" in page.text
    assert "Sign in to see the timelines" in page.text or "public-sample datasets only" in page.text


@pytest.mark.parametrize(
    "path", ["/submissions", "/submit", "/tokens", "/admin", "/admin/users", "/admin/queue"]
)
def test_anonymous_is_sent_to_sign_in(client: TestClient, world: World, path: str) -> None:
    r = client.get(path, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"].startswith(f"/login?next={path}")


def test_progress_json_needs_a_session(client: TestClient, world: World) -> None:
    r = client.get("/submissions/progress.json")
    assert r.status_code == 401
    assert r.json()["error"] == "Unauthorized"


def test_errors_are_pages_but_api_errors_stay_json(client: TestClient, world: World) -> None:
    r = client.get("/no/such/page")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "Not found" in r.text
    api = client.get("/api/v1/no-such-route")
    assert api.status_code == 404
    assert api.json()["error"] == "NotFound"
    bad_sort = client.get("/leaderboards/held-out?sort=bogus")
    assert bad_sort.status_code == 400
    assert "This leaderboard cannot be sorted by &#39;bogus&#39;." in bad_sort.text
    assert client.get("/leaderboards/nope").status_code == 404
    assert client.get("/algorithms/999999").status_code == 404
    not_a_number = client.get("/algorithms/abc")
    assert not_a_number.status_code == 400
    assert not_a_number.headers["content-type"].startswith("text/html")
    # A sentence for a person, not the API's validator detail (issue 16 point 14).
    assert "The address gives algorithm_id as &#39;abc&#39;" in not_a_number.text
    assert "path.algorithm_id" not in not_a_number.text
    assert client.get("/api/v1/algorithms/abc").json()["error"] == "ValidationError"


def test_leaderboard_without_results(client: TestClient, world: World, db_session: Session) -> None:
    ds = f.dataset(db_session, DatasetKind.HELD_OUT, slug="empty-ds")
    f.dataset_version(db_session, ds, version="v1")
    page = client.get("/leaderboards/empty-ds")
    assert page.status_code == 200
    assert "No results on this dataset version yet." in page.text


# --- sign in / out / up ------------------------------------------------------------------------


def test_sign_in_wrong_password_missing_csrf_and_sign_out(client: TestClient, world: World) -> None:
    token = csrf_of(client.get("/login").text)
    r = client.post(
        "/login", data={"email": "alice@example.org", "password": "nope-nope", "csrf_token": token}
    )
    assert r.status_code == 401
    assert "wrong email or password" in r.text
    assert "szbench_session" not in client.cookies

    r = client.post("/login", data={"email": "alice@example.org", "password": PASSWORD})
    assert r.status_code == 403
    assert "security token" in r.text
    r = client.post(
        "/login",
        data={"email": "alice@example.org", "password": PASSWORD, "csrf_token": "forged" * 5},
    )
    assert r.status_code == 403

    sign_in(client, "alice@example.org")
    assert "HttpOnly" in client.get("/login").headers.get("set-cookie", "HttpOnly")
    assert client.get("/submissions").status_code == 200
    r = post_form(client, "/submissions", "/logout", follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/submissions", follow_redirects=False).status_code == 303


def test_sign_in_goes_back_to_next_but_never_off_site(client: TestClient, world: World) -> None:
    token = csrf_of(client.get("/login").text)
    data = {"email": "alice@example.org", "password": PASSWORD, "csrf_token": token}
    r = client.post("/login", data={**data, "next": "//evil.example/x"}, follow_redirects=False)
    assert r.headers["location"] == "/"
    r = client.post("/login", data={**data, "next": "/tokens"}, follow_redirects=False)
    assert r.headers["location"] == "/tokens"


def test_sign_up_when_open_and_closed(
    client: TestClient, world: World, settings_env: pytest.MonkeyPatch, db_session: Session
) -> None:
    page = client.get("/signup")
    assert page.status_code == 200
    data = {"email": "new@example.org", "password": "short", "csrf_token": csrf_of(page.text)}
    r = client.post("/signup", data=data)
    assert r.status_code == 400
    assert "at least 10 characters" in r.text
    r = client.post("/signup", data={**data, "password": "long-enough-1"}, follow_redirects=False)
    assert r.status_code == 303
    user = db_session.scalars(select(User).where(User.email == "new@example.org")).one()
    assert user.role == Role.RESEARCHER
    assert client.get("/submissions").status_code == 200  # signed in
    r = client.post("/signup", data={**data, "password": "long-enough-1"})
    assert r.status_code == 409  # taken

    settings_env.setenv("SZBENCH_CENTRE_MODE", "true")  # a clinical centre: never open
    get_settings.cache_clear()
    assert client.get("/signup").status_code == 403
    settings_env.setenv("SZBENCH_CENTRE_MODE", "false")
    settings_env.setenv("SZBENCH_ALLOW_SIGNUP", "false")
    get_settings.cache_clear()
    assert client.get("/signup").status_code == 403
    assert 'href="/signup"' not in client.get("/login").text
    token = csrf_of(client.get("/login").text)
    r = client.post(
        "/signup", data={"email": "x@example.org", "password": "x" * 10, "csrf_token": token}
    )
    assert r.status_code == 403


# --- researcher --------------------------------------------------------------------------------


def test_submissions_page_and_progress_json(client: TestClient, world: World) -> None:
    sign_in(client, "alice@example.org")
    page = client.get("/submissions")
    assert page.status_code == 200
    text = page.text
    assert "Alpha detector" in text
    assert "Smoke test passed." in text
    assert f'data-evaluation-id="{world.alice_queued.id}"' in text
    assert f'action="/evaluations/{world.alice_queued.id}/cancel"' in text
    assert f'action="/evaluations/{world.alice_held.id}/rerun"' in text
    assert "Beta secret" not in text
    assert "progress.js" in text
    fragment = client.get("/submissions?fragment=1")
    assert "<html" not in fragment.text
    assert f'data-evaluation-id="{world.alice_held.id}"' in fragment.text

    data = client.get("/submissions/progress.json").json()
    by_id = {e["id"]: e for e in data["evaluations"]}
    assert set(by_id) == {world.alice_held.id, world.alice_public.id, world.alice_queued.id}
    assert by_id[world.alice_held.id]["outcomes"] == {"ok": 2}
    assert by_id[world.alice_held.id]["recordings_done"] == 2
    assert by_id[world.alice_queued.id]["finished"] is False
    assert {v["status"] for v in data["versions"]} == {"active", "smoke_testing"}


def test_cancel_rerun_and_evaluate_from_the_page(
    client: TestClient, world: World, db_session: Session, sent: list
) -> None:
    sign_in(client, "alice@example.org")
    r = post_form(client, "/submissions", f"/evaluations/{world.alice_queued.id}/cancel")
    assert r.status_code == 200
    assert "cancelled" in r.text
    db_session.refresh(world.alice_queued)
    assert world.alice_queued.status == EvaluationStatus.CANCELLED

    before = {e.id for e in db_session.scalars(select(Evaluation))}
    r = post_form(client, "/submissions", f"/evaluations/{world.alice_held.id}/rerun")
    assert r.status_code == 200
    assert "Re-run queued" in r.text
    new = {e.id for e in db_session.scalars(select(Evaluation))} - before
    assert len(new) == 1
    assert any(name == queue.TASK_START_EVALUATION for name, _, _ in sent)

    version_id = world.alice_held.algorithm_version_id
    r = post_form(
        client, "/submissions", f"/versions/{version_id}/evaluate", {"dataset": "public-sample"}
    )
    assert r.status_code == 200
    assert "queued on public-sample" in r.text


def test_researcher_cannot_manage_others_or_see_hidden(client: TestClient, world: World) -> None:
    sign_in(client, "alice@example.org")
    for path in ("/admin", "/admin/users", "/admin/datasets", "/admin/publishing", "/admin/queue"):
        r = client.get(path)
        assert r.status_code == 403, path
        assert "Admins only." in r.text  # the service's words, as a sentence
    assert client.get(f"/evaluations/{world.bob_hidden.id}").status_code == 404
    assert (
        client.get(f"/algorithms/{world.bob_algo_id}?evaluation={world.bob_hidden.id}").status_code
        == 404
    )
    assert "Beta secret" not in client.get("/leaderboards/held-out").text
    r = post_form(client, "/submissions", f"/evaluations/{world.bob_hidden.id}/rerun")
    assert r.status_code == 404
    r = post_form(client, "/submissions", "/admin/users", {"email": "x@example.org"})
    assert r.status_code == 403


def test_owner_sees_hidden_result_marked(client: TestClient, world: World) -> None:
    sign_in(client, "bob@example.org")
    board = client.get("/leaderboards/held-out")
    assert "Beta secret" in board.text
    assert "hidden" in board.text
    assert client.get(f"/evaluations/{world.bob_hidden.id}").status_code == 200


def test_evaluation_page_shows_submitter_messages_not_admin_logs(
    client: TestClient, world: World
) -> None:
    sign_in(client, "alice@example.org")
    r = client.get(f"/evaluations/{world.alice_held.id}")
    assert r.status_code == 200
    # Held-out runs at the default disclosure: not even the owner sees them one by one
    # (the stored message may quote what the container wrote).
    assert "01 scored" not in r.text
    assert "Per-recording results of evaluation" in r.text
    assert "secret host details" not in r.text
    assert "Re-run" in r.text
    assert f"szbench {__version__} · SzCORE" in r.text  # the footer is not shadowed
    client.cookies.clear()
    sign_in(client, "admin@example.org")
    r = client.get(f"/evaluations/{world.alice_held.id}")
    assert "secret host details" in r.text
    assert "01 scored" in r.text


def _held_reference_shown(html: str) -> bool:
    return "1234-1300 s" in html


def test_timelines_follow_the_data_rules(client: TestClient, world: World) -> None:
    algo = f"/algorithms/{world.alice_algo_id}"
    public = f"{algo}?evaluation={world.alice_public.id}"
    held = f"{algo}?evaluation={world.alice_held.id}"

    anonymous = client.get(public).text
    assert "Sign in to see the timelines" in anonymous
    assert "100-160 s" not in anonymous

    sign_in(client, "alice@example.org")  # the owner: reference and own detections
    page = client.get(public).text
    assert "Timeline of sub-09_run-00" in page
    assert "Reference seizures: 100-160 s" in page
    assert "Detections: 110-150 s, 400-420 s" in page
    held_page = client.get(held).text
    assert "Timelines are not disclosed" in held_page
    assert not _held_reference_shown(held_page)
    # Per-subject figures are not disclosed at the default level (aggregate) either.
    assert "Per-subject results are not disclosed" in held_page
    assert "Event F1 per subject" not in held_page
    client.cookies.clear()

    sign_in(client, "bob@example.org")  # another researcher: reference, no detections
    page = client.get(public).text
    assert "Reference seizures: 100-160 s" in page
    assert "Detections: not shown" in page
    assert not _held_reference_shown(client.get(held).text)
    client.cookies.clear()

    sign_in(client, "admin@example.org")
    admin_page = client.get(held).text
    assert _held_reference_shown(admin_page)
    assert "Event F1 per subject" in admin_page
    assert "02: n/a" in admin_page  # NaN subject labelled, not drawn as zero


def test_held_out_timelines_at_the_recording_disclosure_level(
    client: TestClient, world: World, db_session: Session
) -> None:
    held = f"/algorithms/{world.alice_algo_id}?evaluation={world.alice_held.id}"
    world.held.dataset.disclosure = Disclosure.RECORDING
    db_session.flush()
    for who in (None, "bob@example.org"):
        client.cookies.clear()
        if who:
            sign_in(client, who)
        page = client.get(held).text
        assert _held_reference_shown(page)
        assert "Event F1 per subject" in page
        assert "Detections: not shown" in page  # held-out detections stay with admins


def test_tokens_created_once_listed_and_revoked(
    client: TestClient, world: World, db_session: Session
) -> None:
    sign_in(client, "alice@example.org")
    page = client.get("/tokens")
    assert page.status_code == 200
    assert 'value="admin"' not in page.text  # a researcher cannot hold the admin scope
    r = client.post(
        "/tokens",
        data={
            "name": "laptop",
            "scopes": ["read"],
            "expires_in_days": "30",
            "csrf_token": csrf_of(page.text),
        },
    )
    assert r.status_code == 200
    assert "shown only once" in r.text
    token = db_session.scalars(select(ApiToken).where(ApiToken.name == "laptop")).one()
    assert token.scopes == ["read"]
    secret = r.text.split('id="new-token" class="secret" readonly value="')[1].split('"')[0]
    assert secret.startswith(token.prefix)
    assert (
        client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 200
    )
    listing = client.get("/tokens").text
    assert secret not in listing
    assert token.prefix in listing

    r = post_form(client, "/tokens", "/tokens", {"name": "x", "scopes": ["admin"]})
    assert r.status_code == 403
    assert "cannot hold the &#39;admin&#39; scope" in r.text
    r = post_form(client, "/tokens", "/tokens", {"name": "x", "expires_in_days": "soon"})
    assert r.status_code == 400

    r = post_form(client, "/tokens", f"/tokens/{token.id}/revoke")
    assert r.status_code == 200
    db_session.refresh(token)
    assert token.revoked_at is not None
    assert (
        client.get("/api/v1/auth/me", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 401
    )


def test_submit_page_for_submitters_only(client: TestClient, world: World) -> None:
    sign_in(client, "alice@example.org")
    page = client.get("/submit")
    assert page.status_code == 200
    assert 'id="drop-zone"' in page.text
    assert f'data-chunk-bytes="{account.UPLOAD_CHUNK_BYTES}"' in page.text
    assert "upload.js" in page.text
    assert "alpha" in page.text  # existing algorithm offered
    assert "final" in page.text  # open phase offered
    client.cookies.clear()
    sign_in(client, "centre@example.org")
    r = client.get("/submit")
    assert r.status_code == 403
    assert "cannot submit" in r.text


def test_cookie_writes_from_another_site_are_refused(client: TestClient, world: World) -> None:
    sign_in(client, "alice@example.org")
    token = csrf_of(client.get("/submissions").text)
    r = client.post(
        f"/evaluations/{world.alice_queued.id}/cancel",
        data={"csrf_token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert r.status_code == 403


def test_leaderboard_sort_filter_and_versions(client: TestClient, world: World) -> None:
    sign_in(client, "admin@example.org")
    board = client.get("/leaderboards/held-out")
    assert board.text.index("Beta secret") < board.text.index("Alpha detector")  # F1 0.95 > 0.8
    by_fp = client.get("/leaderboards/held-out?sort=event_fp_rate&order=desc").text
    assert by_fp.index("Alpha detector") < by_fp.index("Beta secret")  # 3.0 FP/day first
    assert 'aria-sort="descending"' in by_fp
    searched = client.get("/leaderboards/held-out?q=alpha").text
    assert "Alpha detector" in searched
    assert "Beta secret" not in searched
    phased = client.get("/leaderboards/held-out?phase=final").text
    assert "Beta secret" in phased
    assert "Alpha detector" not in phased
    assert client.get("/leaderboards/held-out?version=v1&versions=all").status_code == 200
    assert client.get("/leaderboards/held-out?version=nope").status_code == 404


# --- admin -------------------------------------------------------------------------------------


def test_admin_users_and_roles(client: TestClient, world: World, db_session: Session) -> None:
    sign_in(client, "admin@example.org")
    page = client.get("/admin/users")
    assert page.status_code == 200
    assert "bob@example.org" in page.text
    r = post_form(
        client,
        "/admin/users",
        f"/admin/users/{world.bob.id}",
        {"role": "centre", "is_active": "true"},
    )
    assert r.status_code == 200
    db_session.refresh(world.bob)
    assert world.bob.role == Role.CENTRE
    r = post_form(client, "/admin/users", f"/admin/users/{world.admin.id}", {"role": "researcher"})
    assert r.status_code == 409
    r = post_form(
        client,
        "/admin/users",
        "/admin/users",
        {"email": "dan@example.org", "name": "Dan", "password": "dan-password-1", "role": "admin"},
    )
    assert r.status_code == 200
    assert (
        db_session.scalars(select(User).where(User.email == "dan@example.org")).one().role
        == Role.ADMIN
    )
    r = post_form(client, "/admin/users", "/admin/users", {"email": "not-an-email"})
    assert r.status_code == 400
    assert "is not an email address" in r.text


def _prepared(root: Path) -> Path:
    (root / "eeg").mkdir(parents=True)
    (root / "annotations").mkdir()
    (root / "eeg" / "r1.edf").write_bytes(b"0")
    (root / "annotations" / "r1_events.tsv").write_text(tsv(600.0, (10.0, 5.0)))
    (root / "manifest.json").write_text(
        '{"recordings": [{"id": "r1", "subject": "01", "checksum": "sha256:'
        + "a" * 64
        + '", "duration_s": 600, "eeg": "eeg/r1.edf", "annotations": "annotations/r1_events.tsv"}]}'
    )
    return root


def test_admin_datasets_dry_run_then_register(
    client: TestClient, world: World, db_session: Session, tmp_path: Path, sent: list
) -> None:
    sign_in(client, "admin@example.org")
    page = client.get("/admin/datasets")
    assert page.status_code == 200
    assert "held-out" in page.text
    r = post_form(client, "/admin/datasets", "/admin/datasets", {"slug": "Bad Slug"})
    assert r.status_code == 400
    assert "not a valid slug" in r.text
    r = post_form(
        client,
        "/admin/datasets",
        "/admin/datasets",
        {"slug": "held-2", "title": "Held 2", "kind": "held_out"},
    )
    assert r.status_code == 200
    assert "Dataset held-2 created" in r.text

    prepared = str(_prepared(tmp_path / "prep"))
    form = {"version": "v1", "prepared_path": prepared, "action": "check"}
    r = post_form(client, "/admin/datasets", "/admin/datasets/held-2/versions", form)
    assert r.status_code == 200, r.text
    assert "Dry run: held-2 v1" in r.text
    assert "1 recordings of 1 subjects" in r.text
    assert "alpha 1.0" in r.text  # the active version that would be queued
    ds = db_session.scalars(select(Dataset).where(Dataset.slug == "held-2")).one()
    assert (
        db_session.scalars(select(DatasetVersion).where(DatasetVersion.dataset_id == ds.id)).all()
        == []
    )

    r = post_form(
        client, "/admin/datasets", "/admin/datasets/held-2/versions", {**form, "action": "register"}
    )
    assert r.status_code == 200
    assert "registered: 1 recordings, " in r.text
    assert db_session.scalars(
        select(DatasetVersion).where(DatasetVersion.dataset_id == ds.id)
    ).one()
    assert sent

    r = post_form(
        client,
        "/admin/datasets",
        "/admin/datasets/held-2/versions",
        {**form, "prepared_path": str(tmp_path / "missing")},
    )
    assert r.status_code in (400, 409)
    plan = client.get("/admin/datasets/public-sample/versions/v1/benchmark")
    assert plan.status_code == 200
    assert "Continuous benchmark: public-sample v1" in plan.text


def test_admin_publishes_hidden_results(
    client: TestClient, world: World, db_session: Session
) -> None:
    sign_in(client, "admin@example.org")
    page = client.get("/admin/publishing")
    assert page.status_code == 200
    assert f"/admin/evaluations/{world.bob_hidden.id}/publish" in page.text
    r = post_form(client, "/admin/publishing", f"/admin/evaluations/{world.bob_hidden.id}/publish")
    assert r.status_code == 200
    db_session.refresh(world.bob_hidden)
    assert world.bob_hidden.published
    client.cookies.clear()
    assert "Beta secret" in client.get("/leaderboards/held-out").text  # now public
    sign_in(client, "admin@example.org")
    r = post_form(client, "/admin/publishing", "/admin/phases/final/publish")
    assert r.status_code == 200
    assert "Phase final: 0 evaluations published" in r.text


def test_admin_queue_page(client: TestClient, world: World) -> None:
    sign_in(client, "admin@example.org")
    for path in ("/admin", "/admin/queue"):
        page = client.get(path)
        assert page.status_code == 200
        assert f'href="/evaluations/{world.alice_queued.id}"' in page.text  # waiting
        assert "Per worker" in page.text
        assert "Embedded mode" in page.text  # no broker configured in these tests


def test_private_algorithm_is_not_found_for_others(
    client: TestClient, world: World, db_session: Session
) -> None:
    algorithm = db_session.get_one(Algorithm, world.alice_algo_id)
    algorithm.visibility = Visibility.PRIVATE
    db_session.flush()
    sign_in(client, "bob@example.org")
    assert client.get(f"/algorithms/{world.alice_algo_id}").status_code == 404
    assert "Alpha detector" not in client.get("/leaderboards/held-out").text


def test_static_files_are_served(client: TestClient) -> None:
    for name in ("app.css", "upload.js", "progress.js", "favicon.svg"):
        r = client.get(f"/static/{name}")
        assert r.status_code == 200, name


def test_anonymous_read_off_sends_everyone_to_sign_in(
    client: TestClient, world: World, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_ANONYMOUS_READ", "false")
    get_settings.cache_clear()
    for path in ("/", "/leaderboards/held-out", f"/algorithms/{world.alice_algo_id}"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/login")
    assert client.get("/login").status_code == 200
    sign_in(client, "bob@example.org")
    assert client.get("/leaderboards/held-out").status_code == 200


def test_evaluation_pages_for_others(client: TestClient, world: World, db_session: Session) -> None:
    # A published result of a public algorithm: anyone may read its runs, not its logs.
    page = client.get(f"/evaluations/{world.alice_held.id}")
    assert page.status_code == 200
    assert "01 scored" not in page.text  # held-out runs: not disclosed one by one
    assert "secret host details" not in page.text
    assert 'action="/evaluations/' not in page.text  # no cancel/re-run for others
    smoke = f.evaluation(
        db_session,
        world.alice_held.algorithm_version,
        world.public,
        kind=EvaluationKind.SMOKE_TEST,
    )
    assert client.get(f"/evaluations/{smoke.id}").status_code == 404  # smoke tests: owner only
    sign_in(client, "alice@example.org")
    assert client.get(f"/evaluations/{smoke.id}").status_code == 200
