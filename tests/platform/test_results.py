"""Evaluations, results, drill-downs, leaderboards: ranking, visibility, downloads, provenance."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.algorithms import service as algorithms_service
from szbench.datasets import service as datasets_service
from szbench.disclosure import decision
from szbench.models import (
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    FailedRecordings,
    Role,
    RunOutcome,
    User,
    Visibility,
)
from tests.platform import factories as f


@dataclass
class World:
    admin: User
    alice: User
    bob: User
    carol: User
    dv: DatasetVersion
    sample_dv: DatasetVersion
    evals: dict[str, Evaluation]
    versions: dict[str, AlgorithmVersion]


def _subjects(f1: list[float | None], sens: float = 0.5) -> dict[str, dict[str, float | None]]:
    return {
        f"{i:02d}": {
            "event_f1": v,
            "event_sensitivity": sens,
            "event_precision": v,
            "event_fp_rate": 1.0 + i,
        }
        for i, v in enumerate(f1)
    }


@pytest.fixture
def world(db_session: Session) -> World:
    s = db_session
    admin, alice, bob, carol = (
        f.user(s, Role.ADMIN, name="Admin"),
        f.user(s, name="Alice"),
        f.user(s, name="Bob"),
        f.user(s, name="Carol"),
    )
    # alpha v2 timed out on one recording: this board scores that as no detections, so it
    # still ranks (tests/platform/test_failures.py covers the default, unranked).
    ds = f.dataset(
        s,
        slug="chb-heldout",
        title="Held-out",
        failed_recordings=FailedRecordings.NO_DETECTIONS,
    )
    dv = f.dataset_version(s, ds, version="1.0")
    sample = f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample")
    sample_dv = f.dataset_version(s, sample, version="1.0")
    a = f.algorithm(s, alice, name="alpha")
    b = f.algorithm(s, bob, name="beta")
    c = f.algorithm(s, carol, name="gamma", visibility=Visibility.PRIVATE)
    d = f.algorithm(s, bob, name="delta")
    versions = {
        "a1": f.version(s, a, version="1"),
        "a2": f.version(s, a, version="2"),
        "b1": f.version(s, b, version="1"),
        "c1": f.version(s, c, version="1"),
        "d1": f.version(s, d, version="1"),
    }
    evals = {}
    # alpha v1 (old) and v2 (latest): v2 is better.
    evals["a1"] = f.evaluation(s, versions["a1"], dv)
    f.result(s, evals["a1"], _subjects([0.2, 0.3, 0.1]))
    evals["a2"] = f.evaluation(s, versions["a2"], dv)
    f.result(s, evals["a2"], _subjects([0.6, 0.7, 0.5]))
    # beta ties alpha v2 on F1 but has higher sensitivity: ranks first.
    evals["b1"] = f.evaluation(s, versions["b1"], dv)
    f.result(s, evals["b1"], _subjects([0.6, 0.7, 0.5], sens=0.9))
    # gamma is private; delta is unpublished (hidden phase).
    evals["c1"] = f.evaluation(s, versions["c1"], dv)
    f.result(s, evals["c1"], _subjects([0.9, 0.9, 0.9]))
    evals["d1"] = f.evaluation(s, versions["d1"], dv, published=False)
    f.result(s, evals["d1"], _subjects([0.8, 0.8, 0.8]))
    # A non-official re-score and a still-running evaluation never rank.
    evals["a2_rescore"] = f.evaluation(
        s, versions["a2"], dv, kind=EvaluationKind.RESCORE, official=False
    )
    f.result(s, evals["a2_rescore"], _subjects([1.0, 1.0, 1.0]))
    evals["b1_running"] = f.evaluation(s, versions["b1"], dv, status=EvaluationStatus.RUNNING)
    # Runs for the drill-down.
    r1 = f.recording(s, dv, subject="00")
    r2 = f.recording(s, dv, subject="01")
    f.run(
        s, evals["a2"], r1, detections_tsv="onset\tduration\n", gpu_model="H100", gpu_driver="550.1"
    )
    f.run(s, evals["a2"], r2, outcome=RunOutcome.TIMEOUT, submitter_message="timed out after 900 s")
    evals["a2_sample"] = f.evaluation(s, versions["a2"], sample_dv)
    f.run(s, evals["a2_sample"], f.recording(s, sample_dv), detections_tsv="onset\tduration\n")
    return World(admin, alice, bob, carol, dv, sample_dv, evals, versions)


def test_leaderboard_szcore_ranking_and_visibility(client: TestClient, world: World) -> None:
    r = client.get("/api/v1/leaderboards/chb-heldout")
    assert r.status_code == 200, r.text
    board = r.json()
    assert [(e["algorithm"], e["algorithm_version"], e["rank"]) for e in board["items"]] == [
        ("beta", "1", 1),
        ("alpha", "2", 2),
    ]
    assert board["total"] == 2
    assert board["dataset_version"] == "1.0"
    assert "SzCORE" in board["ranking"]
    top = board["items"][0]
    assert top["event_f1"] == pytest.approx(0.6)
    assert top["provenance"]["image_digest"] == world.versions["b1"].image_digest
    assert top["provenance"]["scorer_version"] == "0.1.0"
    assert top["mine"] is False


def test_leaderboard_all_versions_and_ties(
    client: TestClient, world: World, db_session: Session
) -> None:
    board = client.get("/api/v1/leaderboards/chb-heldout", params={"versions": "all"}).json()
    assert [(e["algorithm"], e["algorithm_version"]) for e in board["items"]] == [
        ("beta", "1"),
        ("alpha", "2"),
        ("alpha", "1"),
    ]
    # Equal F1 and sensitivity share a rank.
    world.evals["a2"].result.event_sensitivity = 0.9  # type: ignore[union-attr]
    db_session.flush()
    ranks = [e["rank"] for e in client.get("/api/v1/leaderboards/chb-heldout").json()["items"]]
    assert ranks == [1, 1]


def test_owner_sees_own_unpublished_and_private_marked(
    client: TestClient, world: World, db_session: Session
) -> None:
    bob = client.get(
        "/api/v1/leaderboards/chb-heldout", headers=f.headers(db_session, world.bob)
    ).json()
    rows = {e["algorithm"]: e for e in bob["items"]}
    assert rows["delta"]["published"] is False
    assert rows["delta"]["mine"] is True
    assert rows["delta"]["rank"] == 1
    assert "gamma" not in rows
    carol = client.get(
        "/api/v1/leaderboards/chb-heldout", headers=f.headers(db_session, world.carol)
    ).json()
    assert "gamma" in {e["algorithm"] for e in carol["items"]}
    assert "delta" not in {e["algorithm"] for e in carol["items"]}
    admin = client.get(
        "/api/v1/leaderboards/chb-heldout", headers=f.headers(db_session, world.admin)
    ).json()
    assert {e["algorithm"] for e in admin["items"]} == {"alpha", "beta", "gamma", "delta"}


def test_publishing_a_phase_shows_results_to_everyone(
    client: TestClient, world: World, db_session: Session
) -> None:
    phase = f.phase(db_session, slug="hidden-phase", hidden=True)
    world.versions["d1"].phase_id = phase.id
    db_session.flush()
    assert "delta" not in {
        e["algorithm"] for e in client.get("/api/v1/leaderboards/chb-heldout").json()["items"]
    }
    h = f.headers(db_session, world.admin)
    r = client.post("/api/v1/phases/hidden-phase/publish", headers=h)
    assert r.json() == {"published": 1}
    names = [e["algorithm"] for e in client.get("/api/v1/leaderboards/chb-heldout").json()["items"]]
    assert names[0] == "delta"


def test_leaderboard_sorting_and_pagination(
    client: TestClient, world: World, db_session: Session
) -> None:
    h = f.headers(db_session, world.admin)
    url = "/api/v1/leaderboards/chb-heldout"
    by_fp = client.get(url, headers=h, params={"sort": "event_fp_rate"}).json()
    assert by_fp["order"] == "asc"
    by_f1_asc = client.get(url, headers=h, params={"sort": "event_f1", "order": "asc"}).json()
    f1s = [e["event_f1"] for e in by_f1_asc["items"]]
    assert f1s == sorted(f1s)
    page = client.get(url, headers=h, params={"limit": 1, "offset": 1}).json()
    assert page["total"] == 4
    assert len(page["items"]) == 1
    assert page["items"][0]["rank"] == 2
    r = client.get(url, params={"sort": "nonsense"})
    assert r.status_code == 400
    assert "sort" in r.json()["detail"]
    assert client.get("/api/v1/leaderboards/nope").status_code == 404
    assert client.get(url, params={"version": "9.9"}).status_code == 404


def test_leaderboard_downloads(client: TestClient, world: World) -> None:
    r = client.get("/api/v1/leaderboards/chb-heldout/download", params={"format": "csv"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["algorithm"] for row in rows] == ["beta", "alpha"]
    assert rows[0]["rank"] == "1"
    assert "event_f1_ci_low" in rows[0]
    r = client.get("/api/v1/leaderboards/chb-heldout/download", params={"format": "json"})
    assert [row["algorithm"] for row in r.json()] == ["beta", "alpha"]


def test_leaderboard_index(client: TestClient, world: World) -> None:
    index = client.get("/api/v1/leaderboards").json()
    assert {
        "dataset": "chb-heldout",
        "title": "Held-out",
        "kind": "held_out",
        "dataset_version": "1.0",
        # As the leaderboard's default view: alpha's latest version and beta (not alpha v1).
        "entries": 2,
        "unranked": 0,
    } in index


def test_evaluation_list_get_progress(
    client: TestClient, world: World, db_session: Session
) -> None:
    h = f.headers(db_session, world.alice)
    listing = client.get("/api/v1/evaluations", headers=h, params={"mine": True}).json()
    assert listing["total"] == 4  # a1, a2, a2 rescore, a2 sample
    ev = world.evals["a2"]
    # Held-out data at the default (aggregate) disclosure: how many runs failed, not how;
    # no wall time or memory (a container chooses both).
    detail = client.get(f"/api/v1/evaluations/{ev.id}").json()
    assert detail["progress"]["outcomes"] == {"ok": 1, "failed": 1}
    assert detail["provenance"]["wall_time_s"] is None
    assert detail["provenance"]["peak_memory_bytes"] is None
    detail = client.get(
        f"/api/v1/evaluations/{ev.id}", headers=f.headers(db_session, world.admin)
    ).json()
    assert detail["progress"]["outcomes"] == {"ok": 1, "timeout": 1}
    prov = detail["provenance"]
    assert prov["image_digest"] == ev.image_digest
    assert prov["dataset"] == "chb-heldout"
    assert prov["dataset_version"] == "1.0"
    assert prov["worker_hosts"] == ["worker-1"]
    assert prov["gpu_models"] == ["H100"]
    assert prov["gpu_drivers"] == ["550.1"]
    assert prov["wall_time_s"] == pytest.approx(25.0)
    assert prov["peak_memory_bytes"] == 10**8
    progress = client.get(f"/api/v1/evaluations/{ev.id}/progress").json()
    assert progress == {
        "status": "done",
        "state": "done",
        # Held-out data, anonymous: coarse (issue 23.8), which once it is over is the count.
        "detail": "coarse",
        "recordings_done": 2,
        "recordings_done_at_most": None,
        "recordings_total": 2,
        "fraction_done": 1.0,
        "as_of": None,
        "next_update_at": None,
        "outcomes": {"ok": 1, "failed": 1},
        # A count per evaluation once it is over (issue 16 point 1); no estimate when done.
        "failed_recordings": 1,
        "complete": False,
        "estimated_remaining_s": None,
        "estimated_finish_at": None,
        "estimate_basis": None,
        # A finished evaluation waits on no platform fault (issue 21's Progress.held_by).
        "held_by": None,
    }
    filtered = client.get("/api/v1/evaluations", params={"status": "running"}).json()
    assert [e["id"] for e in filtered["items"]] == [world.evals["b1_running"].id]
    # Unpublished and private evaluations are not found by others.
    assert client.get(f"/api/v1/evaluations/{world.evals['d1'].id}").status_code == 404
    assert client.get(f"/api/v1/evaluations/{world.evals['c1'].id}", headers=h).status_code == 404


def test_results_drill_down_and_logs(client: TestClient, world: World, db_session: Session) -> None:
    ev = world.evals["a2"]
    world.dv.dataset.disclosure = Disclosure.RECORDING
    db_session.flush()
    result = client.get(f"/api/v1/evaluations/{ev.id}/result").json()
    assert result["subjects"] == 3
    assert result["provenance"]["image_digest"] == ev.image_digest
    subjects = client.get(f"/api/v1/evaluations/{ev.id}/subjects", params={"limit": 2}).json()
    assert subjects["total"] == 3
    assert [s["subject"] for s in subjects["items"]] == ["00", "01"]
    assert subjects["provenance"]["dataset_version"] == "1.0"
    owner = f.headers(db_session, world.alice)
    runs = client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=owner).json()
    assert runs["total"] == 2
    assert {r["outcome"] for r in runs["items"]} == {"ok", "timeout"}
    assert all(r["admin_log"] is None for r in runs["items"])
    # Held-out runs: a fixed text per outcome, never the stored detail, even at this level.
    assert {r["submitter_message"] for r in runs["items"]} == {
        decision.OUTCOME_TEXT[RunOutcome.OK],
        decision.OUTCOME_TEXT[RunOutcome.TIMEOUT],
    }
    # Host names and held-out checksums are for admins (issue 28.3, 28.4).
    assert runs["items"][0]["provenance"]["worker_host"] is None
    assert runs["items"][0]["provenance"]["recording_checksum"] is None
    assert runs["items"][0]["provenance"]["wall_time_s"] is None
    admin = f.headers(db_session, world.admin)
    runs = client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=admin).json()
    assert all(r["admin_log"] for r in runs["items"])
    assert {r["provenance"]["worker_host"] for r in runs["items"]} == {"worker-1"}
    assert "timed out after 900 s" in {r["submitter_message"] for r in runs["items"]}
    only_timeouts = client.get(
        f"/api/v1/evaluations/{ev.id}/recordings", headers=owner, params={"outcome": "timeout"}
    ).json()
    assert only_timeouts["total"] == 1
    # Downloads.
    r = client.get(f"/api/v1/evaluations/{ev.id}/subjects/download")
    assert len(list(csv.DictReader(io.StringIO(r.text)))) == 3
    r = client.get(
        f"/api/v1/evaluations/{ev.id}/recordings/download", params={"format": "json"}, headers=owner
    )
    assert {row["worker_host"] for row in r.json()} == {None}
    assert all("admin_log" not in row for row in r.json())


def test_detections_held_out_only_for_admins(
    client: TestClient, world: World, db_session: Session
) -> None:
    ev = world.evals["a2"]
    run_id = client.get(
        f"/api/v1/evaluations/{ev.id}/recordings",
        params={"outcome": "ok"},
        headers=f.headers(db_session, world.admin),
    ).json()["items"][0]["id"]
    url = f"/api/v1/evaluations/{ev.id}/recordings/{run_id}/detections"
    assert client.get(url, headers=f.headers(db_session, world.alice)).status_code == 403
    r = client.get(url, headers=f.headers(db_session, world.admin))
    assert r.status_code == 200
    assert r.text.startswith("onset")
    sample = world.evals["a2_sample"]
    sample_run = client.get(
        f"/api/v1/evaluations/{sample.id}/recordings", headers=f.headers(db_session, world.alice)
    ).json()["items"][0]["id"]
    url = f"/api/v1/evaluations/{sample.id}/recordings/{sample_run}/detections"
    assert client.get(url, headers=f.headers(db_session, world.alice)).status_code == 200
    # Not the owner: smoke/sample evaluations of others are not theirs to read.
    assert client.get(url, headers=f.headers(db_session, world.bob)).status_code == 403


def test_algorithm_results_side_by_side(
    client: TestClient, world: World, db_session: Session
) -> None:
    algo_id = world.versions["a1"].algorithm_id
    body = client.get(f"/api/v1/algorithms/{algo_id}/results").json()
    assert body["algorithm"] == "alpha"
    assert {(r["dataset"], r["algorithm_version"]) for r in body["items"]} == {
        ("chb-heldout", "1"),
        ("chb-heldout", "2"),
        ("sample", "2"),
    }
    assert all(r["official"] for r in body["items"])
    with_rescores = client.get(
        f"/api/v1/algorithms/{algo_id}/results", params={"official_only": False}
    ).json()
    assert with_rescores["total"] == 4
    page = client.get(
        f"/api/v1/algorithms/{algo_id}/results", params={"limit": 2, "offset": 2}
    ).json()
    assert page["total"] == 3
    assert len(page["items"]) == 1
    assert page["items"][0]["evaluation_id"] not in {r["evaluation_id"] for r in body["items"][:2]}


def test_held_out_recordings_never_served_to_non_admins(
    client: TestClient, world: World, db_session: Session, tmp_path
) -> None:
    url = "/api/v1/datasets/chb-heldout/versions/1.0/recordings"
    assert client.get(url).status_code == 401
    assert client.get(url, headers=f.headers(db_session, world.alice)).status_code == 403
    r = client.get(url, headers=f.headers(db_session, world.admin))
    assert r.json()["total"] == 2
    # A public sample's recordings and annotations are served to anyone signed in.
    root = tmp_path / "sample"
    (root / "annotations").mkdir(parents=True)
    world.sample_dv.path = str(root)
    rec = world.sample_dv.recordings[0]
    (root / rec.annotations_path).write_text("onset\tduration\teventType\n")
    db_session.flush()
    h = f.headers(db_session, world.bob)
    assert (
        client.get("/api/v1/datasets/sample/versions/1.0/recordings", headers=h).json()["total"]
        == 1
    )
    r = client.get(
        f"/api/v1/datasets/sample/versions/1.0/recordings/{rec.key}/annotations", headers=h
    )
    assert r.status_code == 200
    assert r.text.startswith("onset")
    r = client.get(f"/api/v1/datasets/sample/versions/1.0/recordings/{rec.key}/eeg", headers=h)
    assert r.status_code == 404  # no EDF written in this test: named, not a 500
    held = world.dv.recordings[0]
    r = client.get(
        f"/api/v1/datasets/chb-heldout/versions/1.0/recordings/{held.key}/annotations", headers=h
    )
    assert r.status_code == 403


def test_dataset_detail_hides_admin_fields(
    client: TestClient, world: World, db_session: Session
) -> None:
    body = client.get("/api/v1/datasets/chb-heldout").json()
    assert body["versions"][0]["recordings"] == 2
    assert body["run_limits"] is None
    assert "path" not in body["versions"][0]
    admin = client.get(
        "/api/v1/datasets/chb-heldout", headers=f.headers(db_session, world.admin)
    ).json()
    assert admin["run_limits"] == {}


def test_leaderboard_statistics(
    client: TestClient, world: World, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    # Three subjects: shown to anyone once the minimum for intervals allows it (below).
    settings_env.setattr(decision, "INTERVALS_MIN_SUBJECTS", 3)
    board = client.get("/api/v1/leaderboards/chb-heldout").json()
    assert board["statistics"]["status"] == "ok"
    beta, alpha = board["items"]
    ci = alpha["ci"]["event_f1"]
    assert ci["low"] <= alpha["event_f1"] <= ci["high"]
    assert ci["low"] >= 0.5 - 1e-9
    assert ci["high"] <= 0.7 + 1e-9
    assert set(alpha["ci"]) == {"event_f1", "event_sensitivity", "event_precision", "event_fp_rate"}
    # Same F1 per subject, beta wins every subject on sensitivity: rank 1 on all 3.
    assert beta["rank_stability"]["best_share"] == 1.0
    assert alpha["rank_stability"]["median"] == 2.0
    # The histogram of per-subject ranks is per-subject data: not at the aggregate level.
    assert beta["rank_stability"]["histogram"] == []
    admin = client.get(
        "/api/v1/leaderboards/chb-heldout", headers=f.headers(db_session, world.admin)
    )
    assert admin.json()["items"][0]["rank_stability"]["histogram"][0] == 3
    # Cached: the same set of entries gives the same (seeded) figures.
    again = client.get("/api/v1/leaderboards/chb-heldout").json()
    assert again["items"][1]["ci"] == alpha["ci"]


def test_leaderboard_intervals_over_few_subjects_only_where_subjects_are_disclosed(
    client: TestClient, world: World, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    # A percentile bootstrap over 3 subjects has the per-subject figures for bounds: at the
    # default (aggregate) level non-admins get no interval and no rank stability below
    # decision.INTERVALS_MIN_SUBJECTS (10); admins, and everyone at the subject level, do.
    def entries(headers: dict[str, str]) -> list[dict[str, object]]:
        return client.get("/api/v1/leaderboards/chb-heldout", headers=headers).json()["items"]

    for headers in ({}, f.headers(db_session, world.alice)):
        for entry in entries(headers):
            assert entry["subjects"] == 3
            assert entry["ci"] is None
            assert entry["rank_stability"] is None
    download = client.get("/api/v1/leaderboards/chb-heldout/download?format=csv").text
    assert all(row["event_f1_ci_low"] == "" for row in csv.DictReader(io.StringIO(download)))
    admin = f.headers(db_session, world.admin)
    assert all(e["ci"] is not None and e["rank_stability"] for e in entries(admin))
    datasets_service.set_disclosure(db_session, world.dv.dataset, Disclosure.SUBJECT)
    db_session.commit()
    assert all(e["ci"] is not None and e["rank_stability"] for e in entries({}))
    datasets_service.set_disclosure(db_session, world.dv.dataset, Disclosure.AGGREGATE)
    db_session.commit()
    settings_env.setattr(decision, "INTERVALS_MIN_SUBJECTS", 3)
    assert all(e["ci"] is not None and e["rank_stability"] for e in entries({}))


def test_leaderboard_cache_sees_new_results_at_once(
    client: TestClient, world: World, db_session: Session
) -> None:
    before = client.get("/api/v1/leaderboards/chb-heldout").json()
    assert before["total"] == 2
    newcomer = f.algorithm(db_session, world.carol, name="epsilon")
    ev = f.evaluation(db_session, f.version(db_session, newcomer), world.dv)
    f.result(db_session, ev, _subjects([0.95, 0.95, 0.95]))
    after = client.get("/api/v1/leaderboards/chb-heldout").json()
    assert after["total"] == 3
    assert after["items"][0]["algorithm"] == "epsilon"
    # Hiding the algorithm hides it at once too.
    algorithms_service.update_algorithm(db_session, newcomer, visibility=Visibility.PRIVATE)
    assert client.get("/api/v1/leaderboards/chb-heldout").json()["total"] == 2
