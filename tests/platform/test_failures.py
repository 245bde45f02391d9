"""Issue 16 points 1, 2, 11 and 14 through the API: failures are not scores, one image
ranks once, times and the estimate of a running evaluation, index counts as the board's."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import (
    AlgorithmVersion,
    Dataset,
    DatasetVersion,
    Evaluation,
    EvaluationStatus,
    FailedRecordings,
    Role,
    RunOutcome,
    User,
)
from tests.platform import factories as f


@dataclass
class Board:
    admin: User
    alice: User
    bob: User
    ds: Dataset
    dv: DatasetVersion
    good: Evaluation
    crashed: Evaluation
    other: Evaluation


def _scored(
    s: Session, av: AlgorithmVersion, dv: DatasetVersion, f1: float, fp: float
) -> Evaluation:
    ev = f.evaluation(s, av, dv)
    f.result(s, ev, {"01": {"event_f1": f1, "event_sensitivity": f1, "event_fp_rate": fp}})
    return ev


@pytest.fixture
def board(db_session: Session) -> Board:
    s = db_session
    admin = f.user(s, Role.ADMIN)
    alice, bob = f.user(s, name="Alice"), f.user(s, name="Bob")
    ds = f.dataset(s, slug="held")
    dv = f.dataset_version(s, ds, version="1")
    recordings = [f.recording(s, dv, subject="01") for _ in range(2)]
    good = _scored(s, f.version(s, f.algorithm(s, alice, name="good")), dv, 0.5, 3.0)
    # Crashed on every recording: F1 0 and, with no detections, FP/day 0 (the best FP/day).
    crashed = _scored(s, f.version(s, f.algorithm(s, bob, name="crashy")), dv, 0.0, 0.0)
    other = _scored(s, f.version(s, f.algorithm(s, bob, name="other")), dv, 0.2, 5.0)
    for ev, outcome in ((good, RunOutcome.OK), (crashed, RunOutcome.CRASHED), (other, None)):
        for rec in recordings:
            f.run(s, ev, rec, outcome=outcome or RunOutcome.OK)
    return Board(admin, alice, bob, ds, dv, good, crashed, other)


def _names(body: dict) -> list[tuple[str, int | None]]:
    return [(e["algorithm"], e["rank"]) for e in body["items"]]


@pytest.mark.slow
def test_an_evaluation_with_failed_recordings_is_not_ranked_by_default(
    client: TestClient, board: Board
) -> None:
    body = client.get("/api/v1/leaderboards/held").json()
    assert _names(body) == [("good", 1), ("other", 2)]
    assert body["failed_recordings"] == "unranked"
    assert body["unranked_total"] == 1
    # Not first by FP/day either.
    by_fp = client.get("/api/v1/leaderboards/held", params={"sort": "event_fp_rate"}).json()
    assert [e["algorithm"] for e in by_fp["items"]] == ["good", "other"]
    apart = client.get("/api/v1/leaderboards/held", params={"unranked": True}).json()
    assert _names(apart) == [("good", 1), ("other", 2), ("crashy", None)]
    crashy = apart["items"][2]
    assert crashy["complete"] is False
    assert crashy["failed_recordings"] == 2
    assert crashy["unranked_reason"] == "failed"
    assert crashy["ci"] is None
    assert apart["items"][0]["complete"] is True
    assert apart["items"][0]["failed_recordings"] == 0


def test_a_dataset_may_score_failed_recordings_as_no_detections(
    client: TestClient, board: Board, db_session: Session
) -> None:
    client.get("/api/v1/leaderboards/held")  # cached before the change
    admin = f.headers(db_session, board.admin, scopes=["read", "write", "admin"])
    r = client.patch(
        "/api/v1/datasets/held", json={"failed_recordings": "no_detections"}, headers=admin
    )
    assert r.status_code == 200, r.text
    assert r.json()["failed_recordings"] == "no_detections"
    assert r.json()["disclosure"] == "aggregate"  # untouched
    body = client.get("/api/v1/leaderboards/held").json()
    assert _names(body) == [("good", 1), ("other", 2), ("crashy", 3)]
    assert body["failed_recordings"] == "no_detections"
    crashy = body["items"][2]
    assert crashy["complete"] is False
    assert crashy["failed_recordings_rule"] == "no_detections"
    # Only an admin changes it.
    researcher = f.headers(db_session, board.alice)
    denied = client.patch(
        "/api/v1/datasets/held", json={"failed_recordings": "unranked"}, headers=researcher
    )
    assert denied.status_code == 403
    bad = client.patch("/api/v1/datasets/held", json={"failed_recordings": "zero"}, headers=admin)
    assert bad.status_code == 422
    assert "failed_recordings" in bad.json()["detail"]


def test_a_phase_overrides_the_datasets_rule(
    client: TestClient, board: Board, db_session: Session
) -> None:
    admin = f.headers(db_session, board.admin, scopes=["read", "write", "admin"])
    made = client.post(
        "/api/v1/phases",
        json={
            "slug": "lenient",
            "failed_recordings": "no_detections",
            # Its rules apply to the data it names; its scores are released exact.
            "dataset_versions": [{"dataset": "held", "version": "1"}],
            "release_rule": "exact",
        },
        headers=admin,
    )
    assert made.status_code == 201, made.text
    assert made.json()["failed_recordings"] == "no_detections"
    version = db_session.get(AlgorithmVersion, board.crashed.algorithm_version_id)
    assert version is not None
    version.phase_id = made.json()["id"]
    db_session.flush()
    body = client.get("/api/v1/leaderboards/held").json()
    assert ("crashy", 3) in _names(body)
    cleared = client.patch(
        "/api/v1/phases/lenient", json={"failed_recordings": None}, headers=admin
    )
    assert cleared.json()["failed_recordings"] is None
    assert "crashy" not in [
        e["algorithm"] for e in client.get("/api/v1/leaderboards/held").json()["items"]
    ]


def test_the_same_image_ranks_once_as_its_earliest_submission(
    client: TestClient, board: Board, db_session: Session
) -> None:
    s = db_session
    digest = "sha256:" + "ab" * 32
    early = datetime.now(UTC) - timedelta(days=2)
    first = f.version(s, f.algorithm(s, board.alice, name="original"), image_digest=digest,
                      created_at=early)  # fmt: skip
    copy = f.version(s, f.algorithm(s, board.bob, name="renamed"), image_digest=digest,
                     created_at=early + timedelta(hours=1))  # fmt: skip
    # The copy scores better (another run of the same image): it still does not rank.
    _scored(s, copy, board.dv, 0.9, 1.0)
    original = _scored(s, first, board.dv, 0.8, 1.0)
    body = client.get("/api/v1/leaderboards/held", params={"unranked": True}).json()
    ranked = [e["algorithm"] for e in body["items"] if e["rank"] is not None]
    assert ranked == ["original", "good", "other"]
    dup = next(e for e in body["items"] if e["algorithm"] == "renamed")
    assert dup["rank"] is None
    assert dup["unranked_reason"] == "duplicate"
    assert dup["duplicate_of"]["evaluation_id"] == original.id
    assert dup["duplicate_of"]["algorithm"] == "original"
    version = client.get(f"/api/v1/algorithms/{copy.algorithm_id}/versions/{copy.id}").json()
    assert version["same_image_as"]["algorithm_version_id"] == first.id
    listed = client.get(f"/api/v1/algorithms/{first.algorithm_id}/versions").json()
    assert listed["items"][0]["same_image_as"] is None


def test_csv_download_has_the_flags_and_times(client: TestClient, board: Board) -> None:
    r = client.get("/api/v1/leaderboards/held/download", params={"unranked": True})
    rows = list(csv.DictReader(io.StringIO(r.text)))
    by_name = {row["algorithm"]: row for row in rows}
    assert by_name["crashy"]["complete"] == "False"
    assert by_name["crashy"]["failed_recordings"] == "2"
    assert by_name["crashy"]["unranked_reason"] == "failed"
    assert by_name["crashy"]["rank"] == ""
    assert by_name["good"]["complete"] == "True"
    for column in ("submitted_at", "started_at", "finished_at", "duplicate_of_evaluation_id"):
        assert column in rows[0]
    finished = datetime.fromisoformat(by_name["good"]["finished_at"])
    assert finished.tzinfo is not None
    default = list(
        csv.DictReader(io.StringIO(client.get("/api/v1/leaderboards/held/download").text))
    )
    assert [row["algorithm"] for row in default] == ["good", "other"]


def test_index_counts_the_default_view(
    client: TestClient, board: Board, db_session: Session
) -> None:
    # An older version of "good": the default view shows each algorithm's latest only.
    good_algo = db_session.get(AlgorithmVersion, board.good.algorithm_version_id)
    assert good_algo is not None
    older = f.version(db_session, good_algo.algorithm, version="0.9")
    _scored(db_session, older, board.dv, 0.1, 9.0)
    index = client.get("/api/v1/leaderboards").json()
    row = next(r for r in index if r["dataset"] == "held")
    body = client.get("/api/v1/leaderboards/held").json()
    assert row["entries"] == body["total"] == 2
    assert row["unranked"] == body["unranked_total"] == 1


def test_failed_counts_follow_the_disclosure_rules(
    client: TestClient, board: Board, db_session: Session
) -> None:
    s = db_session
    bob = f.headers(s, board.bob)
    done = client.get(f"/api/v1/evaluations/{board.crashed.id}", headers=bob).json()
    assert done["progress"]["failed_recordings"] == 2
    assert done["progress"]["complete"] is False
    assert done["progress"]["outcomes"] == {"failed": 2}  # which outcome: not disclosed
    # While it runs, a count that moves would tell which held-out recording failed.
    running = f.evaluation(
        s, f.version(s, f.algorithm(s, board.bob)), board.dv,
        status=EvaluationStatus.RUNNING, recordings_total=3, recordings_done=1,
        started_at=datetime.now(UTC) - timedelta(seconds=100),
    )  # fmt: skip
    rec = f.recording(s, board.dv)
    f.run(s, running, rec, outcome=RunOutcome.TIMEOUT, wall_time_s=30.0,
          finished_at=datetime.now(UTC))  # fmt: skip
    mine = client.get(f"/api/v1/evaluations/{running.id}", headers=bob).json()["progress"]
    assert mine["failed_recordings"] is None
    assert mine["complete"] is None
    # The owner of a held-out run follows it coarsely (docs/security.md, timing): the run
    # finished after the progress clock's last tick, so no quarter is done yet and there
    # is no estimate; never one from the run's own wall time, which the container chose.
    assert mine["detail"] == "coarse"
    assert mine["recordings_done"] == 0
    assert mine["estimated_remaining_s"] is None
    admin = f.headers(s, board.admin, scopes=["read", "write", "admin"])
    seen = client.get(f"/api/v1/evaluations/{running.id}", headers=admin).json()["progress"]
    assert seen["failed_recordings"] == 1
    assert seen["estimated_remaining_s"] == pytest.approx(60)
    assert seen["estimate_basis"] == "mean wall time of the finished runs"
    assert seen["state"] == "running"


def test_a_running_evaluation_whose_recordings_all_finished_is_scoring(
    client: TestClient, board: Board, db_session: Session
) -> None:
    s = db_session
    ev = f.evaluation(
        s, f.version(s, f.algorithm(s, board.bob)), board.dv,
        status=EvaluationStatus.RUNNING, recordings_total=3, recordings_done=3,
    )  # fmt: skip
    # Finished before the progress clock's last tick: the owner's coarse view has them too.
    for _ in range(3):
        f.run(s, ev, f.recording(s, board.dv), finished_at=datetime.now(UTC) - timedelta(days=1))
    progress = client.get(f"/api/v1/evaluations/{ev.id}", headers=f.headers(s, board.bob)).json()
    # Every recording had run by the clock's last tick: a coarse view sees it scoring, status
    # and state alike, whether the worker has switched yet or not (issue 28.3).
    assert progress["status"] == "scoring"
    assert progress["progress"]["state"] == "scoring"
    assert progress["progress"]["estimated_remaining_s"] is None
    assert progress["created_at"] is not None


def test_the_datasets_rule_is_in_its_api_body(client: TestClient, board: Board) -> None:
    body = client.get("/api/v1/datasets/held").json()
    assert body["failed_recordings"] == FailedRecordings.UNRANKED.value


def test_a_phase_may_keep_failures_unranked_on_a_lenient_dataset(
    client: TestClient, board: Board, db_session: Session
) -> None:
    admin = f.headers(db_session, board.admin, scopes=["read", "write", "admin"])
    client.patch(
        "/api/v1/datasets/held", json={"failed_recordings": "no_detections"}, headers=admin
    )
    made = client.post(
        "/api/v1/phases",
        json={
            "slug": "strict",
            "dataset_versions": [{"dataset": "held", "version": "1"}],
            "release_rule": "exact",
        },
        headers=admin,
    ).json()
    version = db_session.get(AlgorithmVersion, board.crashed.algorithm_version_id)
    assert version is not None
    version.phase_id = made["id"]
    db_session.flush()
    assert ("crashy", 3) in _names(client.get("/api/v1/leaderboards/held").json())
    # The cached answer must not survive the override (it bumps the data's change counter).
    r = client.patch("/api/v1/phases/strict", json={"failed_recordings": "unranked"}, headers=admin)
    assert r.status_code == 200, r.text
    body = client.get("/api/v1/leaderboards/held").json()
    assert _names(body) == [("good", 1), ("other", 2)]
    assert body["failed_recordings"] == "no_detections"  # the dataset's; the phase overrides
