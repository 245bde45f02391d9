"""The Ladder (issue 20.4): a submitter's released held-out score moves only when a submission
beats their best by the step, rounded to it, so adaptive resubmission cannot climb it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.disclosure.ladder import Submission, earned, ladder
from szbench.leaderboards import snapshots
from szbench.models import Disclosure, ReleaseRule, Role, TeamMember, TeamRole
from szbench.phases import service as phases_service
from szbench.teams import service as teams_service
from tests.platform import factories as f

STEP = 0.01


def test_the_ladder_releases_only_clear_improvements_rounded_to_its_step() -> None:
    scores = [0.30, 0.305, 0.3099, 0.3201, None, 0.29, 0.45, 0.459, 0.4601]
    assert ladder(scores, STEP) == [0.3, 0.3, 0.3, 0.32, 0.32, 0.32, 0.45, 0.45, 0.46]
    assert ladder([None, float("nan"), 0.2], 0.05) == [None, None, 0.2]
    assert ladder([0.5, 0.5 + 0.04], 0.05) == [0.5, 0.5]


def _boosting_attack(seed: int, rule: str, n: int = 4000, k: int = 300) -> tuple[float, float]:
    """Blum & Hardt's boosting attack on hidden random labels: submit k random label
    vectors, keep those whose released score looks better than chance (under the Ladder:
    those that moved it), submit their majority vote. Returns the best score released before
    the vote and the score released for it."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)

    def accuracy(prediction: Any) -> float:
        return float((prediction == labels).mean())

    guesses = [rng.integers(0, 2, n) for _ in range(k)]
    scores = [accuracy(g) for g in guesses]
    if rule == "exact":
        released = [round(s, 2) for s in scores]
        kept = [g for g, r in zip(guesses, released, strict=True) if r > 0.5]
    else:
        released = ladder(scores, STEP)
        kept = [g for i, g in enumerate(guesses) if i == 0 or released[i] != released[i - 1]]
    vote = (np.mean(kept, axis=0) > 0.5).astype(int)
    final = accuracy(vote)
    if rule == "exact":
        return max(r for r in released if r is not None), round(final, 2)
    after = ladder([*scores, final], STEP)
    return released[-1] or 0.0, after[-1] or 0.0


@pytest.mark.parametrize("seed", range(6))
def test_a_simulated_attacker_climbs_exact_scores_but_not_the_ladder(seed: int) -> None:
    # The labels are random, so no submission is better than chance on unseen data: any
    # climb of the released score is overfitting of the held-out set.
    best, boosted = _boosting_attack(seed, "exact")
    assert boosted >= best + 0.03, (best, boosted)  # the attack works on exact scores
    best, boosted = _boosting_attack(seed, "ladder")
    assert boosted == best, (best, boosted)  # and gains nothing under the Ladder
    assert best <= 0.5 + 3 * STEP  # the best released is chance plus noise


@pytest.fixture
def board(db_session: Session) -> dict[str, Any]:
    s = db_session
    admin, alice, bob = f.user(s, Role.ADMIN), f.user(s, name="Alice"), f.user(s, name="Bob")
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    # Open, no closing date, no rule of its own: a continuous phase, on the Ladder by default;
    # per-recording disclosure would show the exact score, so the Ladder withholds it too.
    phase = f.phase(s, slug="open", disclosure=Disclosure.RECORDING)
    phase.dataset_versions = [dv]
    algorithm = f.algorithm(s, alice, name="alpha")
    now = datetime.now(UTC)
    evaluations = []
    for i, score in enumerate([0.30, 0.305, 0.336, 0.331]):
        version = f.version(s, algorithm, version=str(i + 1), phase_id=phase.id)
        ev = f.evaluation(s, version, dv, finished_at=now + timedelta(minutes=i))
        f.result(
            s,
            ev,
            {"01": {"event_f1": score}, "02": {"event_f1": score}},
            metrics={"event_sensitivity": 0.777, "sample_f1": 0.666},
        )
        f.run(s, ev, f.recording(s, dv, subject="01"), event_ref_true=4242)
        evaluations.append(ev)
    other = f.evaluation(s, f.version(s, f.algorithm(s, bob, name="beta"), phase_id=phase.id), dv)
    f.result(s, other, {"01": {"event_f1": 0.4}, "02": {"event_f1": 0.4}})
    return {"admin": admin, "alice": alice, "phase": phase, "evaluations": evaluations}


def test_results_and_boards_release_the_ladder_score_and_say_so(
    client: TestClient, db_session: Session, board: dict[str, Any]
) -> None:
    s = db_session
    alice = f.headers(s, board["alice"])
    # 0.305 and 0.331 do not beat the best shown before them by more than the step: they
    # earn no score of their own (issue 28.2), and never show another evaluation's.
    expected = [0.3, None, 0.34, None]
    for headers in ({}, alice):
        for ev, released in zip(board["evaluations"], expected, strict=True):
            result = client.get(f"/api/v1/evaluations/{ev.id}/result", headers=headers).json()
            assert (result["release"], result["event_f1"]) == ("ladder", released)
            assert result["event_sensitivity"] is None
            assert result["sample_f1"] is None
            assert set(result["report"]) <= {"params", "scorer_version", "subjects"}
            # Per-subject and per-recording figures would show the exact score.
            assert client.get(
                f"/api/v1/evaluations/{ev.id}/subjects", headers=headers
            ).status_code in (401, 403)
            assert client.get(
                f"/api/v1/evaluations/{ev.id}/recordings", headers=headers
            ).status_code in (401, 403)
        entries = client.get(
            "/api/v1/leaderboards/held",
            params={"versions": "all", "unranked": "true"},
            headers=headers,
        ).json()
        by_id = {e["evaluation_id"]: e for e in entries["items"]}
        assert [by_id[ev.id]["event_f1"] for ev in board["evaluations"]] == expected
        assert [by_id[ev.id]["unranked_reason"] for ev in board["evaluations"]] == [
            None,
            "not_released",
            None,
            "not_released",
        ]
        assert {e["release"] for e in entries["items"]} == {"ladder"}
        assert all(e["ci"] is None and e["rank_stability"] is None for e in entries["items"])
        assert entries["release"]["phases"] == [
            {"phase": "open", "rule": "ladder", "ladder_step": 0.01, "closed": False}
        ]
        # The default board shows each algorithm once: the version that earned its best.
        latest = client.get("/api/v1/leaderboards/held", headers=headers).json()["items"]
        alpha = [e for e in latest if e["algorithm"] == "alpha"]
        assert [(e["evaluation_id"], e["event_f1"]) for e in alpha] == [
            (board["evaluations"][2].id, 0.34)
        ]
    page = client.get("/leaderboards/held").text
    assert "Phase open releases scores on this data by the Ladder" in page
    assert "ladder-badge" in page
    # Admins see exact figures.
    admin = f.headers(s, board["admin"])
    ev = board["evaluations"][2]
    result = client.get(f"/api/v1/evaluations/{ev.id}/result", headers=admin).json()
    assert (result["release"], result["event_f1"]) == ("exact", 0.336)


def test_closed_or_final_phases_release_exact_scores(
    client: TestClient, db_session: Session, board: dict[str, Any]
) -> None:
    s = db_session
    ev = board["evaluations"][1]
    path = f"/api/v1/evaluations/{ev.id}/result"
    assert client.get(path).json()["event_f1"] is None  # earned nothing under the Ladder
    # A final round: exact (rounded at the aggregate level, exact here at recording level).
    phases_service.update_phase(s, board["phase"], release_rule=ReleaseRule.EXACT)
    assert (client.get(path).json()["release"], client.get(path).json()["event_f1"]) == (
        "exact",
        0.305,
    )
    phases_service.update_phase(s, board["phase"], release_rule=None)
    assert client.get(path).json()["release"] == "ladder"
    # Closed: exact, and its per-recording level applies.
    phases_service.update_phase(s, board["phase"], is_open=False)
    assert client.get(path).json()["event_f1"] == 0.305
    assert client.get(f"/api/v1/evaluations/{ev.id}/recordings").status_code == 200
    board_json = client.get("/api/v1/leaderboards/held").json()
    assert board_json["release"]["phases"][0]["closed"] is True
    assert board_json["release"]["phases"][0]["rule"] == "exact"
    # A phase with a deadline is not continuous: exact by default while open.
    phases_service.update_phase(
        s, board["phase"], is_open=True, closes_at=datetime.now(UTC) + timedelta(days=1)
    )
    assert client.get(path).json()["release"] == "exact"


# --- issue 28.1 and 28.2: the rule follows the data; a figure belongs to what earned it -------


def _scored(s: Session, version: Any, dv: Any, score: float, minute: int, **kw: Any) -> Any:
    ev = f.evaluation(
        s, version, dv, finished_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minute)
    )
    f.result(
        s,
        ev,
        {"01": {"event_f1": score}, "02": {"event_f1": score}},
        metrics={"event_sensitivity": 0.777, "sample_f1": 0.666, **kw},
    )
    return ev


def test_a_released_score_belongs_to_the_evaluation_that_earned_it(
    client: TestClient, db_session: Session
) -> None:
    """Issue 28.2: a background-only image (exact F1 0.0) of a submitter whose other
    algorithm earned 0.56 ranked second at 0.56, and a snapshot froze that in its citation."""
    s = db_session
    admin, alice, bob = f.user(s, Role.ADMIN), f.user(s, name="Alice"), f.user(s, name="Bob")
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    phase = f.phase(s, slug="open")
    phase.dataset_versions = [dv]
    good = f.algorithm(s, alice, name="good")
    background = f.algorithm(s, alice, name="background")
    # A renamed copy of "good", a hair better: not a step better, so it earns nothing.
    copy = f.algorithm(s, alice, name="good-copy")
    better = f.algorithm(s, alice, name="better")
    rival = f.algorithm(s, bob, name="rival")
    e_good = _scored(s, f.version(s, good, phase_id=phase.id), dv, 0.561, 0)
    e_background = _scored(s, f.version(s, background, phase_id=phase.id), dv, 0.0, 1)
    e_copy = _scored(s, f.version(s, copy, phase_id=phase.id), dv, 0.565, 2)
    e_rival = _scored(s, f.version(s, rival, phase_id=phase.id), dv, 0.40, 3)
    # A real improvement of more than a step still shows, on the algorithm that made it.
    e_better = _scored(s, f.version(s, better, phase_id=phase.id), dv, 0.60, 4)
    expected = {
        e_good.id: 0.56,
        e_background.id: None,
        e_copy.id: None,
        e_rival.id: 0.4,
        e_better.id: 0.6,
    }
    for headers in ({}, f.headers(s, alice), f.headers(s, bob)):
        for ev_id, released in expected.items():
            body = client.get(f"/api/v1/evaluations/{ev_id}/result", headers=headers).json()
            assert body["event_f1"] == released, (ev_id, body)
        items = client.get(
            "/api/v1/leaderboards/held", params={"unranked": "true"}, headers=headers
        ).json()["items"]
        by_id = {e["evaluation_id"]: e for e in items}
        assert {i: by_id[i]["event_f1"] for i in expected} == expected
        assert [e["algorithm"] for e in items if e["rank"] is not None] == [
            "better",
            "good",
            "rival",
        ]
        assert {by_id[e_background.id]["unranked_reason"], by_id[e_copy.id]["unranked_reason"]} == {
            "not_released"
        }
        side = client.get(f"/api/v1/algorithms/{background.id}/results", headers=headers).json()
        assert all(r["event_f1"] is None for r in side["items"]), side
    page = client.get("/leaderboards/held?unranked=true").text
    assert "no score released" in page
    # What a snapshot freezes, and the citation of each of its entries.
    snapshot, _ = snapshots.take(s, "held", "1", by=admin)
    base = f"/api/v1/leaderboards/held/snapshots/{snapshot.id}"
    frozen = {e["evaluation_id"]: e for e in client.get(base).json()["board"]["items"]}
    assert {i: frozen[i]["event_f1"] for i in expected} == expected
    assert frozen[e_background.id]["rank"] is None
    cited = client.get(f"{base}/entries/{e_background.id}/citation?format=bibtex").text
    assert "0.56" not in cited
    assert "Event F1 n/a" in cited
    assert "Event F1 0.56" in client.get(f"{base}/entries/{e_good.id}/citation").text


def test_the_release_rule_follows_the_data_whatever_the_versions_phase(
    client: TestClient, db_session: Session
) -> None:
    """Issue 28.1: a version with no phase, or in a phase that does not name the data, was
    evaluated on the data a Ladder phase names and released rounded (about 48 bits instead
    of the Ladder's figure), ranking on the same board."""
    s = db_session
    alice = f.user(s, name="Alice")
    headers = f.headers(s, alice)
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    ladder_phase = f.phase(s, slug="continuous")
    ladder_phase.dataset_versions = [dv]
    elsewhere = f.phase(s, slug="elsewhere")  # open, names other data only
    elsewhere.dataset_versions = [f.dataset_version(s, f.dataset(s, slug="other"), version="1")]
    # Registered after the phase, named by none: it follows its own rule.
    late = f.dataset_version(s, f.dataset(s, slug="late"), version="1")
    inside = f.version(s, f.algorithm(s, alice, name="inside"), phase_id=ladder_phase.id)
    no_phase = f.version(s, f.algorithm(s, alice, name="nophase"))
    other_phase = f.version(s, f.algorithm(s, alice, name="otherphase"), phase_id=elsewhere.id)
    on_ladder = [
        _scored(s, version, dv, score, minute)
        for minute, (version, score) in enumerate(
            ((inside, 0.30), (no_phase, 0.50), (other_phase, 0.70))
        )
    ]
    on_late = _scored(s, no_phase, late, 0.4321, 9)
    for ev in on_ladder:
        for who in ({}, headers):
            body = client.get(f"/api/v1/evaluations/{ev.id}/result", headers=who).json()
            assert body["release"] == "ladder", body
            assert body["event_sensitivity"] is None
            assert body["sample_f1"] is None
    board = client.get("/api/v1/leaderboards/held", headers=headers).json()
    assert {e["release"] for e in board["items"]} == {"ladder"}
    assert [e["event_f1"] for e in board["items"]] == [0.7, 0.5, 0.3]
    late_body = client.get(f"/api/v1/evaluations/{on_late.id}/result", headers=headers).json()
    assert (late_body["release"], late_body["event_f1"]) == ("rounded", 0.43)
    # A level a phase sets reaches every evaluation on its data, too: a dataset disclosing
    # per-recording results, named by an open phase at the aggregate level.
    final = f.phase(
        s, slug="final", closes_at=datetime.now(UTC) + timedelta(days=3),
        disclosure=Disclosure.AGGREGATE,
    )  # fmt: skip
    open_data = f.dataset(s, slug="open-data", disclosure=Disclosure.RECORDING)
    named = f.dataset_version(s, open_data, version="1")
    final.dataset_versions = [named]
    ev = _scored(s, no_phase, named, 0.5123, 20)
    f.run(s, ev, f.recording(s, named))
    body = client.get(f"/api/v1/evaluations/{ev.id}/result", headers=headers).json()
    assert (body["release"], body["event_f1"]) == ("rounded", 0.51)
    assert client.get(f"/api/v1/evaluations/{ev.id}/recordings", headers=headers).status_code == 403
    # Once the Ladder phase is over, its own entries are published exact by its rules; the
    # others on its data follow what still governs it (here: the dataset's aggregate level).
    phases_service.update_phase(s, ladder_phase, is_open=False)
    inside_body = client.get(f"/api/v1/evaluations/{on_ladder[0].id}/result").json()
    assert (inside_body["release"], inside_body["event_f1"]) == ("rounded", 0.3)
    phases_service.update_phase(s, ladder_phase, disclosure=Disclosure.SUBJECT)
    inside_body = client.get(f"/api/v1/evaluations/{on_ladder[0].id}/result").json()
    assert inside_body["release"] == "exact"
    out_body = client.get(f"/api/v1/evaluations/{on_ladder[1].id}/result").json()
    assert (out_body["release"], out_body["event_f1"]) == ("rounded", 0.5)


def test_the_bar_is_shared_by_an_owners_algorithms_and_a_teams_accounts() -> None:
    step = 0.01
    alice, bob, team = ("user", 1), ("user", 2), ("team", 7)
    sequence = [
        Submission(1, 10, (alice,), 0.50),
        # A renamed copy of the same owner meets the same bar.
        Submission(2, 11, (alice,), 0.505),
        # Bob's own algorithm, outside any team: another account, its own bar.
        Submission(3, 12, (bob,), 0.40),
        # The team's algorithm (Alice's): the team's bar starts from what was released to
        # Alice, and Bob's version of it meets that bar.
        Submission(4, 10, (alice, team), 0.55),
        Submission(5, 10, (bob, team), 0.555),
        # Bob's new algorithm in the team meets the team's bar too.
        Submission(6, 13, (bob, team), 0.559),
        Submission(7, 13, (bob, team), 0.58),
    ]
    assert earned(sequence, step) == {1: 0.5, 2: None, 3: 0.4, 4: 0.55, 5: None, 6: None, 7: 0.58}


def _simulated_attack(
    s: Session, client: TestClient, seed: int, n: int = 4000, k: int = 240
) -> tuple[float, float | None, list[str]]:
    """Blum & Hardt's boosting attack, run through the platform by an attacker who spreads
    its submissions over everything issue 28.1 names: versions in the Ladder phase, versions
    in no phase, renamed copies (a new algorithm per submission), and a second account of
    its team submitting the team's algorithm and algorithms of its own in the team; each
    version is also evaluated on data registered after the phase. The hidden labels are
    random, so nothing generalises: any climb is overfitting of the held-out set. Returns
    the best score released on the Ladder's data before the vote, the score released for
    the vote, and the releases seen on the later data."""
    rng = np.random.default_rng(seed)
    labels, late_labels = rng.integers(0, 2, n), rng.integers(0, 2, n)
    first, second = f.user(s, name="Mallory"), f.user(s, name="Mallory2")
    team = teams_service.create_team(s, owner=first, name=f"boost-{seed}-{f.n()}")
    team.members.append(TeamMember(user_id=second.id, role=TeamRole.MEMBER))
    s.flush()
    dv = f.dataset_version(s, f.dataset(s, slug=f"held-{seed}"), version="1")
    late = f.dataset_version(s, f.dataset(s, slug=f"late-{seed}"), version="1")
    phase = f.phase(s, slug=f"continuous-{seed}")
    phase.dataset_versions = [dv]
    main = f.algorithm(s, first, name=f"main-{seed}", team_id=team.id)
    moment = iter(range(10**6))

    def submit(guess: Any, i: int) -> int:
        kind = i % 4
        if kind == 2:  # a renamed copy: a new algorithm each time
            algorithm = f.algorithm(s, first, name=f"copy-{seed}-{i}", team_id=team.id)
        elif kind == 3 and i % 8 == 3:  # the second account's own algorithm, in the team
            algorithm = f.algorithm(s, second, name=f"second-{seed}-{i}", team_id=team.id)
        else:
            algorithm = main
        version = f.version(
            s, algorithm, phase_id=phase.id if kind in (0, 2) else None, team_id=team.id
        )
        if kind == 3:
            version.created_by_id = second.id
        minute = next(moment)
        ev = _scored(s, version, dv, float((guess == labels).mean()), minute)
        _scored(s, version, late, float((guess == late_labels).mean()), minute)
        return int(ev.id)

    guesses = [rng.integers(0, 2, n) for _ in range(k)]
    ids = [submit(g, i) for i, g in enumerate(guesses)]
    headers = f.headers(s, first)

    def released(slug: str) -> dict[int, dict[str, Any]]:
        body = client.get(
            f"/api/v1/leaderboards/{slug}/download",
            params={"format": "json", "versions": "all", "unranked": "true"},
            headers=headers,
        ).json()
        return {row["evaluation_id"]: row for row in body}

    shown = released(f"held-{seed}")
    scores = [shown[i]["event_f1"] for i in ids]
    # What looked better than chance (a rounded figure above 0.5, or a Ladder score earned).
    kept = [
        g for g, score in zip(guesses, scores, strict=True) if score is not None and score > 0.5
    ]
    best = max((score for score in scores if score is not None), default=0.0)
    vote = (np.mean(kept, axis=0) > 0.5).astype(int) if kept else guesses[0]
    final = submit(vote, 1)  # as a version in no phase
    late_rules = {row["release"] for row in released(f"late-{seed}").values()}
    return best, released(f"held-{seed}")[final]["event_f1"], sorted(late_rules)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_a_simulated_attacker_gains_nothing_across_phases_copies_and_accounts(
    client: TestClient, db_session: Session, seed: int
) -> None:
    best, boosted, late_rules = _simulated_attack(db_session, client, seed)
    # The vote earns no score: it does not beat what the attacker was already shown.
    assert boosted is None, (best, boosted)
    assert best <= 0.5 + 3 * STEP
    # The data registered after the phase follows its own rule (aggregate: rounded).
    assert late_rules == ["rounded"]
