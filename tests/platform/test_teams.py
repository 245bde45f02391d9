"""Teams (issue 23.2): members see and submit the team's algorithms, view their evaluations as
the owner does (the same disclosure), and held-out quotas count per team as well as per user,
so that splitting a team's work over accounts buys nothing and a user in two teams gains
nothing either. Through the API, on the rolled-back test session."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.disclosure import decision
from szbench.disclosure import facts as rule_facts
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    Role,
    Team,
    User,
    Visibility,
)
from szbench.quotas import service as quotas
from tests.platform import factories as f

DIGEST = "sha256:" + "d" * 64


@pytest.fixture
def sent() -> Any:
    from szbench import queue

    calls: list[Any] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


def _team(client: TestClient, h: dict[str, str], name: str, *members: User) -> int:
    r = client.post("/api/v1/teams", headers=h, json={"name": name})
    assert r.status_code == 201, r.text
    team_id = int(r.json()["id"])
    for member in members:
        r = client.post(
            f"/api/v1/teams/{team_id}/members", headers=h, json={"email": member.email.upper()}
        )
        assert r.status_code == 201, r.text
    return team_id


def _put(client: TestClient, h: dict[str, str], team_id: int, algorithm: Algorithm) -> None:
    r = client.put(f"/api/v1/teams/{team_id}/algorithms/{algorithm.id}", headers=h)
    assert r.status_code == 204, r.text


def test_members_see_and_submit_versions_of_a_private_team_algorithm(
    client: TestClient, db_session: Session, sent: list[Any]
) -> None:
    owner, member, outsider = f.user(db_session), f.user(db_session), f.user(db_session)
    ho, hm, hx = (f.headers(db_session, u) for u in (owner, member, outsider))
    algo = f.algorithm(db_session, owner, visibility=Visibility.PRIVATE)
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE))
    f.recording(db_session, dv)
    ev = f.evaluation(db_session, f.version(db_session, algo), dv)
    f.result(db_session, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})

    # Before the algorithm is in the team, the member is anyone else.
    team_id = _team(client, ho, "Lab A", member)
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=hm).status_code == 404
    _put(client, ho, team_id, algo)

    for h, seen in ((hm, 200), (hx, 404)):
        assert client.get(f"/api/v1/algorithms/{algo.id}", headers=h).status_code == seen
        assert client.get(f"/api/v1/evaluations/{ev.id}/result", headers=h).status_code == seen
        mine = client.get("/api/v1/algorithms?mine=true", headers=h).json()["items"]
        assert (algo.id in {a["id"] for a in mine}) == (seen == 200)
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=hm).json()["team_id"] == team_id
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=hm,
        json={"version": "by-member", "image_reference": f"reg:5000/a@{DIGEST}"},
    )
    assert r.status_code == 201, r.text
    version = db_session.get_one(AlgorithmVersion, r.json()["id"])
    assert (version.created_by_id, version.team_id) == (member.id, team_id)
    # Members submit; changing the algorithm itself stays with its owner.
    r = client.patch(f"/api/v1/algorithms/{algo.id}", headers=hm, json={"title": "Mine now"})
    assert r.status_code == 403
    assert "only its owner" in r.json()["detail"]
    assert (
        client.patch(
            f"/api/v1/algorithms/{algo.id}", headers=ho, json={"title": "Renamed"}
        ).status_code
        == 200
    )

    # Removed: the member is anyone else again.
    assert (
        client.delete(f"/api/v1/teams/{team_id}/members/{member.id}", headers=ho).status_code == 204
    )
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=hm).status_code == 404
    assert client.get(f"/api/v1/evaluations/{ev.id}/result", headers=hm).status_code == 404


def test_a_member_learns_what_the_owner_learns_of_held_out_results_and_no_more(
    client: TestClient, db_session: Session
) -> None:
    owner, member, outsider = f.user(db_session), f.user(db_session), f.user(db_session)
    team_id = _team(client, f.headers(db_session, owner), "Lab D", member)
    algo = f.algorithm(db_session, owner, team_id=team_id)
    held = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    sample = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE))
    version = f.version(db_session, algo)
    for dv in (held, sample):
        ev = f.evaluation(db_session, version, dv)
        db_session.refresh(member)
        facts = rule_facts.facts_of(ev)
        as_owner, as_member = decision.decide(owner, facts), decision.decide(member, facts)
        assert as_member == as_owner
        assert as_member.owner
        assert not decision.decide(outsider, facts).owner
        # Detections and run details: the owner's on a public sample, nobody's on held-out.
        assert as_member.detections == (dv is sample)
    # Per-subject held-out figures at the default (aggregate) disclosure: refused to both.
    ev = f.evaluation(db_session, version, held)
    f.result(db_session, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    for user in (owner, member):
        r = client.get(f"/api/v1/evaluations/{ev.id}/subjects", headers=f.headers(db_session, user))
        assert r.status_code == 403, r.text


def _quota_world(
    db_session: Session, settings_env: pytest.MonkeyPatch, limit: int
) -> tuple[DatasetVersion, Any]:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", str(limit))
    settings_env.setenv("SZBENCH_SUBMISSIONS_PER_DAY", "")
    get_settings.cache_clear()
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    f.recording(db_session, dv)
    return dv, None


def _rerun(client: TestClient, h: dict[str, str], ev: Evaluation) -> Any:
    return client.post(f"/api/v1/evaluations/{ev.id}/rerun", headers=h)


def test_splitting_a_teams_work_across_its_accounts_buys_nothing(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    dv, _ = _quota_world(db_session, settings_env, 3)
    a, b, c = f.user(db_session), f.user(db_session), f.user(db_session)
    ha, hb, hc = (f.headers(db_session, u) for u in (a, b, c))
    team_id = _team(client, ha, "Lab S", b, c)
    algo = f.algorithm(db_session, a, team_id=team_id)
    ev = f.evaluation(db_session, f.version(db_session, algo), dv)

    # Three accounts, one team: three held-out runs in all, whoever starts them.
    assert _rerun(client, ha, ev).status_code == 201
    assert _rerun(client, hb, ev).status_code == 201
    assert _rerun(client, hc, ev).status_code == 201
    for h in (ha, hb, hc):
        r = _rerun(client, h, ev)
        assert r.status_code == 429
        assert "team 'Lab S' has used all 3 of the last 24 hours" in r.json()["detail"]
    # A new version is held-out work too: refused the same way.
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=hb,
        json={"version": "more", "image_reference": f"reg:5000/a@{DIGEST}"},
    )
    assert r.status_code == 429
    assert "team 'Lab S'" in r.json()["detail"]
    team = client.get(f"/api/v1/teams/{team_id}", headers=hb).json()
    assert team["quota"]["held_out_runs"]["used"] == 3
    assert team["quota"]["held_out_runs"]["remaining"] == 0
    # Each member was charged for their own run as well, and keeps the rest for other work.
    assert client.get("/api/v1/users/me/quota", headers=hb).json()["held_out_runs"]["used"] == 1
    own = f.evaluation(db_session, f.version(db_session, f.algorithm(db_session, b)), dv)
    assert _rerun(client, hb, own).status_code == 201


def test_a_user_in_two_teams_cannot_launder_quota_through_them(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    dv, _ = _quota_world(db_session, settings_env, 2)
    x, y, z = f.user(db_session), f.user(db_session), f.user(db_session)
    hx = f.headers(db_session, x)
    one = _team(client, f.headers(db_session, y), "Lab One", x)
    two = _team(client, f.headers(db_session, z), "Lab Two", x)
    ev1 = f.evaluation(
        db_session, f.version(db_session, f.algorithm(db_session, y, team_id=one)), dv
    )
    ev2 = f.evaluation(
        db_session, f.version(db_session, f.algorithm(db_session, z, team_id=two)), dv
    )

    assert _rerun(client, hx, ev1).status_code == 201
    assert _rerun(client, hx, ev2).status_code == 201
    # Both teams have one left, x has none: x's own limit holds whichever team pays.
    for ev in (ev1, ev2):
        r = _rerun(client, hx, ev)
        assert r.status_code == 429
        assert "you have used all 2" in r.json()["detail"]
    for team_id in (one, two):
        usage = quotas.held_out_usage(db_session, db_session.get_one(Team, team_id))
        assert usage.used == 1
    # Re-scores are charged the same way (to x and to the team).
    r = client.post(
        f"/api/v1/evaluations/{ev1.id}/rescore", headers=hx, json={"scoring_params": {}}
    )
    assert r.status_code == 429


def test_past_work_of_a_member_who_left_stays_charged_to_the_team(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    dv, _ = _quota_world(db_session, settings_env, 2)
    a, b = f.user(db_session), f.user(db_session)
    ha, hb = f.headers(db_session, a), f.headers(db_session, b)
    team_id = _team(client, ha, "Lab L", b)
    algo = f.algorithm(db_session, a, team_id=team_id)
    ev = f.evaluation(db_session, f.version(db_session, algo), dv)
    assert _rerun(client, hb, ev).status_code == 201
    assert _rerun(client, hb, ev).status_code == 201
    # b leaves; what b started stays the team's.
    assert client.delete(f"/api/v1/teams/{team_id}/members/{b.id}", headers=hb).status_code == 204
    r = _rerun(client, ha, ev)
    assert r.status_code == 429
    assert "team 'Lab L'" in r.json()["detail"]
    # Taking the algorithm out of the team does not give the team its runs back either.
    r = client.delete(f"/api/v1/teams/{team_id}/algorithms/{algo.id}", headers=ha)
    assert r.status_code == 204
    assert quotas.held_out_usage(db_session, db_session.get_one(Team, team_id)).used == 2


def test_owners_manage_members_and_members_may_only_leave(
    client: TestClient, db_session: Session
) -> None:
    owner, member, other = f.user(db_session), f.user(db_session), f.user(db_session)
    inactive = f.user(db_session)
    inactive.is_active = False
    ho, hm = f.headers(db_session, owner), f.headers(db_session, member)
    team_id = _team(client, ho, "Lab M", member)
    base = f"/api/v1/teams/{team_id}"

    r = client.post("/api/v1/teams", headers=hm, json={"name": "  lab   m "})
    assert r.status_code == 409
    assert r.json()["detail"].startswith("name: you are in a team called 'Lab M' already")
    for email, status, text in (
        ("nobody@example.org", 404, "email: no active account"),
        (inactive.email, 404, "email: no active account"),
        (member.email, 409, "already a member"),
    ):
        r = client.post(f"{base}/members", headers=ho, json={"email": email})
        assert r.status_code == status
        assert text in r.json()["detail"]
    # A member neither adds nor removes others, nor deletes the team.
    r = client.post(f"{base}/members", headers=hm, json={"email": other.email})
    assert r.status_code == 403
    assert client.delete(f"{base}/members/{owner.id}", headers=hm).status_code == 403
    assert client.delete(base, headers=hm).status_code == 403
    # The last owner stays while others are in the team.
    r = client.delete(f"{base}/members/{owner.id}", headers=ho)
    assert r.status_code == 409
    assert "needs an owner" in r.json()["detail"]
    r = client.patch(f"{base}/members/{member.id}", headers=ho, json={"role": "owner"})
    assert r.status_code == 200
    assert r.json()["role"] == "owner"
    assert client.delete(f"{base}/members/{owner.id}", headers=ho).status_code == 204
    assert client.get(base, headers=ho).status_code == 404  # not a member any more
    listed = client.get("/api/v1/teams", headers=hm).json()
    assert [(t["name"], t["role"], t["members"]) for t in listed["items"]] == [
        ("Lab M", "owner", 1)
    ]


def test_deleting_a_team_leaves_its_algorithms_with_their_owners(
    client: TestClient, db_session: Session
) -> None:
    owner, member = f.user(db_session), f.user(db_session)
    ho = f.headers(db_session, owner)
    team_id = _team(client, ho, "Lab X", member)
    algo = f.algorithm(db_session, member, visibility=Visibility.PRIVATE)
    hm = f.headers(db_session, member)
    _put(client, hm, team_id, algo)
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=ho).status_code == 200
    # Only its owner moves an algorithm, and only into a team they are in.
    mine = f.algorithm(db_session, owner)
    stranger = f.headers(db_session, f.user(db_session))
    assert (
        client.put(f"/api/v1/teams/{team_id}/algorithms/{mine.id}", headers=hm).status_code == 403
    )
    assert (
        client.put(f"/api/v1/teams/{team_id}/algorithms/{mine.id}", headers=stranger).status_code
        == 404
    )

    assert client.delete(f"/api/v1/teams/{team_id}", headers=ho).status_code == 204
    db_session.expire_all()
    assert db_session.get(Team, team_id) is None
    assert db_session.get_one(Algorithm, algo.id).team_id is None
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=ho).status_code == 404
    assert client.get(f"/api/v1/algorithms/{algo.id}", headers=hm).status_code == 200


def test_admins_list_every_team_and_others_only_their_own(
    client: TestClient, db_session: Session
) -> None:
    a, b = f.user(db_session), f.user(db_session)
    _team(client, f.headers(db_session, a), "Lab Alpha")
    _team(client, f.headers(db_session, b), "Lab Beta")
    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    names = {t["name"] for t in client.get("/api/v1/teams?all=true", headers=admin).json()["items"]}
    assert {"Lab Alpha", "Lab Beta"} <= names
    ha = f.headers(db_session, a)
    assert client.get("/api/v1/teams?all=true", headers=ha).status_code == 403
    assert [t["name"] for t in client.get("/api/v1/teams", headers=ha).json()["items"]] == [
        "Lab Alpha"
    ]


# --- issue 28.8: names read as people read them; a clash tells nothing of other teams -------


@pytest.mark.parametrize(
    "typed",
    [
        "lab n",  # case and blanks
        "\uff2c\uff41\uff42 \uff2e",  # full-width letters (NFKC)
        "L\u0430b N",  # a Cyrillic small a for the Latin a (a look-alike)
        "La\u200bb N",  # a zero-width space
        "Lab\u202e N",  # a right-to-left override
        "Lab N\u00ad",  # a soft hyphen
        "1ab N",  # ASCII look-alikes (1 and l)
    ],
)
def test_a_name_that_reads_as_one_of_your_teams_is_refused(
    client: TestClient, db_session: Session, typed: str
) -> None:
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    _team(client, h, "Lab N")
    r = client.post("/api/v1/teams", headers=h, json={"name": typed})
    assert r.status_code == 409, (typed, r.text)
    assert "you are in a team called 'Lab N' already" in r.json()["detail"]


def test_a_clash_with_someone_elses_team_tells_nothing(
    client: TestClient, db_session: Session
) -> None:
    """Another researcher's team is invisible to a non-member: taking its name (or a name
    that reads as it) is allowed, so the answer cannot tell that it exists."""
    a, b = f.user(db_session), f.user(db_session)
    ha, hb = f.headers(db_session, a), f.headers(db_session, b)
    first = _team(client, ha, "Seizure Lab")
    for typed in ("Seizure Lab", "seizure lab", "Seizure L\u0430b"):
        r = client.post("/api/v1/teams", headers=hb, json={"name": typed})
        assert r.status_code == 201, r.text
        assert "exists" not in r.text
        second = r.json()["id"]
        assert second != first
        assert client.delete(f"/api/v1/teams/{second}", headers=hb).status_code == 204
    # What is stored and shown holds no invisible or bidirectional character.
    r = client.post("/api/v1/teams", headers=hb, json={"name": "Ev\u202eil\u200b Lab"})
    assert r.status_code == 201
    assert r.json()["name"] == "Evil Lab"
    r = client.post("/api/v1/teams", headers=hb, json={"name": "\u200b\u202e "})
    assert r.status_code == 400
    assert "a letter or a digit" in r.json()["detail"]


def test_preflight_asks_the_teams_quota_as_the_submission_does(
    client: TestClient, db_session: Session, sent: list[Any]
) -> None:
    """A team's phase quota, spent by one member: the other's preflight refuses as the
    submit would (it answered ok, and the submit 429, after the upload)."""
    a, b = f.user(db_session), f.user(db_session)
    ha, hb = f.headers(db_session, a), f.headers(db_session, b)
    team_id = _team(client, ha, "Lab Q", b)
    algo = f.algorithm(db_session, a, team_id=team_id)
    phase = f.phase(db_session, submission_quota=1)
    r = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=ha,
        json={"version": "1", "image_reference": f"reg:5000/a@{DIGEST}", "phase": phase.slug},
    )
    assert r.status_code == 201, r.text
    asked = {"algorithm_id": algo.id, "version": "2", "phase": phase.slug}
    pre = client.post("/api/v1/algorithms/preflight", headers=hb, json=asked)
    submit = client.post(
        f"/api/v1/algorithms/{algo.id}/versions",
        headers=hb,
        json={"version": "2", "image_reference": f"reg:5000/a@{DIGEST}", "phase": phase.slug},
    )
    assert submit.status_code == 429, submit.text
    assert pre.status_code == submit.status_code, pre.text
    assert pre.json()["detail"] == submit.json()["detail"]
    assert "team 'Lab Q'" in pre.json()["detail"]
    # b's own algorithm, outside the team, is not held by the team's quota.
    own = f.algorithm(db_session, b)
    r = client.post(
        "/api/v1/algorithms/preflight",
        headers=hb,
        json={"algorithm_id": own.id, "version": "1", "phase": phase.slug},
    )
    assert r.status_code == 200, r.text
