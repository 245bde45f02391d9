"""``GET /api/v1/comparisons``: per-subject values side by side and paired tests, within
the disclosure rules of held-out data."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, Disclosure, EvaluationKind, Role, Visibility
from tests.platform import factories as f

SUBJECTS_A = {"01": 0.9, "02": 0.8, "03": 0.7, "04": 0.6, "05": None}
SUBJECTS_B = {"01": 0.5, "02": 0.6, "03": 0.3, "04": 0.2, "05": 0.4}


def _entry(session: Session, dv: Any, values: dict[str, float | None], **kw: Any) -> Any:
    owner = kw.pop("owner", None) or f.user(session)
    version = f.version(session, f.algorithm(session, owner, **kw))
    ev = f.evaluation(session, version, dv)
    f.result(session, ev, {s: {"event_f1": v} for s, v in values.items()})
    return ev


@pytest.fixture
def world(db_session: Session) -> dict[str, Any]:
    dv = f.dataset_version(
        db_session, f.dataset(db_session, DatasetKind.HELD_OUT, disclosure=Disclosure.SUBJECT)
    )
    a = _entry(db_session, dv, SUBJECTS_A)
    b = _entry(db_session, dv, SUBJECTS_B)
    return {"dv": dv, "a": a, "b": b}


def test_two_algorithms_side_by_side_with_a_paired_test(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    viewer = f.user(db_session)
    a, b = world["a"], world["b"]
    r = client.get(
        f"/api/v1/comparisons?evaluation={a.id}&evaluation={b.id}",
        headers=f.headers(db_session, viewer),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["metric"] == "event_f1"
    assert [e["evaluation_id"] for e in body["evaluations"]] == [a.id, b.id]
    rows = {row["subject"]: row["values"] for row in body["subjects"]}
    assert rows["01"] == [0.9, 0.5]
    assert rows["05"] == [None, 0.4]
    (test,) = body["tests"]
    # Subject 05 has no value under A: four pairs, every one better under A.
    assert test["n_subjects"] == 4
    assert test["mean_difference"] == pytest.approx((0.4 + 0.2 + 0.4 + 0.4) / 4)
    assert test["p_value"] == pytest.approx(2 / 16)
    assert test["exact"] is True
    assert test["low"] <= test["mean_difference"] <= test["high"]


def test_three_algorithms_give_every_pair(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    c = _entry(db_session, world["dv"], {"01": 0.1, "02": 0.2})
    ids = [world["a"].id, world["b"].id, c.id]
    query = "&".join(f"evaluation={i}" for i in ids)
    r = client.get(
        f"/api/v1/comparisons?{query}", headers=f.headers(db_session, f.user(db_session))
    )
    assert r.status_code == 200, r.text
    pairs = [(t["a"], t["b"]) for t in r.json()["tests"]]
    assert pairs == [(ids[0], ids[1]), (ids[0], ids[2]), (ids[1], ids[2])]


def _aggregate(session: Session) -> Any:
    return f.dataset_version(
        session, f.dataset(session, DatasetKind.HELD_OUT, disclosure=Disclosure.AGGREGATE)
    )


#: Twelve subjects (the minimum is 10), A better on each by a different amount.
TWELVE_A = {f"{i:02d}": 0.5 + 0.03 * i for i in range(1, 13)}
TWELVE_B = {f"{i:02d}": 0.4 + 0.011 * i for i in range(1, 13)}


def test_aggregate_below_the_minimum_says_why_and_the_smallest_p(
    client: TestClient, db_session: Session
) -> None:
    dv = _aggregate(db_session)
    a = _entry(db_session, dv, SUBJECTS_A)
    b = _entry(db_session, dv, SUBJECTS_B)
    url = f"/api/v1/comparisons?evaluation={a.id}&evaluation={b.id}"
    r = client.get(url, headers=f.headers(db_session, f.user(db_session)))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["release"] == "test"
    assert body["subjects"] == []
    assert "discloses aggregate figures only" in body["subjects_withheld"]
    (test,) = body["tests"]
    assert [test[k] for k in ("mean_difference", "low", "high", "p_value")] == [None] * 4
    assert test["n_subjects"] == 4
    # Four pairs: the exact sign-flip test cannot go below 2 / 2**4.
    assert test["smallest_p"] == 0.125
    assert "4 subjects have a value under both" in test["withheld"]
    assert "released from 10 on" in test["withheld"]
    assert "smallest p-value this test can give is 0.125" in test["withheld"]
    # The owner of one entry learns no more; an admin gets everything.
    owner = a.algorithm_version.algorithm.owner
    mine = client.get(url, headers=f.headers(db_session, owner)).json()
    assert mine["tests"][0]["mean_difference"] is None
    admin = f.user(db_session, role=Role.ADMIN)
    full = client.get(url, headers=f.headers(db_session, admin)).json()
    assert full["release"] == "subjects"
    assert full["subjects_withheld"] is None
    assert full["tests"][0]["p_value"] == pytest.approx(2 / 16)


def test_aggregate_from_the_minimum_gives_the_rounded_test_without_subjects(
    client: TestClient, db_session: Session
) -> None:
    dv = _aggregate(db_session)
    a = _entry(db_session, dv, TWELVE_A)
    b = _entry(db_session, dv, TWELVE_B)
    url = f"/api/v1/comparisons?evaluation={a.id}&evaluation={b.id}"
    admin = client.get(url, headers=f.headers(db_session, f.user(db_session, role=Role.ADMIN)))
    exact = admin.json()["tests"][0]
    body = client.get(url).json()  # anyone, as the leaderboard
    assert body["release"] == "test"
    assert body["subjects"] == []
    (test,) = body["tests"]
    assert test["withheld"] is None
    assert test["n_subjects"] == 12
    assert test["mean_difference"] == round(exact["mean_difference"], 2)
    assert test["low"] == round(exact["low"], 2)
    assert test["high"] == round(exact["high"], 2)
    # Every subject better under A: p = 2 / 2**12, released rounded up to 0.01.
    assert exact["p_value"] == pytest.approx(2 / 2**12)
    assert test["p_value"] == 0.01
    assert test["smallest_p"] == pytest.approx(2 / 2**12)
    assert [e["value"] for e in body["evaluations"]] == [
        round(sum(TWELVE_A.values()) / 12, 2),
        round(sum(TWELVE_B.values()) / 12, 2),
    ]
    # A metric the aggregate level does not release gets no test either.
    other = client.get(url + "&metric=sample_sensitivity").json()["tests"][0]
    assert other["p_value"] is None
    assert "compared on event_f1 only" in other["withheld"]


def test_an_entry_differing_on_one_subject_gets_no_test(
    client: TestClient, db_session: Session
) -> None:
    """Comparing one's own entry with a near copy of it (or of another entry) that differs on
    one subject would tell that subject's difference as n times the mean difference."""
    dv = _aggregate(db_session)
    owner = f.user(db_session)
    a = _entry(db_session, dv, TWELVE_A, owner=owner)
    twin = _entry(db_session, dv, {**TWELVE_A, "07": 0.0}, owner=owner)
    url = f"/api/v1/comparisons?evaluation={a.id}&evaluation={twin.id}"
    (test,) = client.get(url, headers=f.headers(db_session, owner)).json()["tests"]
    assert test["mean_difference"] is None
    assert test["p_value"] is None
    assert "differ on fewer than 10 subjects" in test["withheld"]


def test_the_ladder_refuses_comparisons(client: TestClient, db_session: Session) -> None:
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    phase = f.phase(db_session, is_open=True, dataset_versions=[dv])  # no closing date: Ladder
    evs = []
    for values in (TWELVE_A, TWELVE_B):
        version = f.version(
            db_session, f.algorithm(db_session, f.user(db_session)), phase_id=phase.id
        )
        ev = f.evaluation(db_session, version, dv)
        f.result(db_session, ev, {s: {"event_f1": v} for s, v in values.items()})
        evs.append(ev)
    url = f"/api/v1/comparisons?evaluation={evs[0].id}&evaluation={evs[1].id}"
    r = client.get(url, headers=f.headers(db_session, f.user(db_session)))
    assert r.status_code == 403
    assert "by the Ladder" in r.json()["detail"]
    assert client.get(url).status_code == 401


def test_a_phase_override_opens_the_comparison(client: TestClient, db_session: Session) -> None:
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    # Over (closed: exact scores), and naming the data its level applies to.
    phase = f.phase(
        db_session, disclosure=Disclosure.RECORDING, is_open=False, dataset_versions=[dv]
    )
    evs = []
    for values in (SUBJECTS_A, SUBJECTS_B):
        version = f.version(
            db_session, f.algorithm(db_session, f.user(db_session)), phase_id=phase.id
        )
        ev = f.evaluation(db_session, version, dv)
        f.result(db_session, ev, {s: {"event_f1": v} for s, v in values.items()})
        evs.append(ev)
    url = f"/api/v1/comparisons?evaluation={evs[0].id}&evaluation={evs[1].id}"
    assert client.get(url, headers=f.headers(db_session, f.user(db_session))).status_code == 200


def test_bad_requests_name_the_field(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    h = f.headers(db_session, f.user(db_session))
    a, b = world["a"], world["b"]
    one = client.get(f"/api/v1/comparisons?evaluation={a.id}&evaluation={a.id}", headers=h)
    assert one.status_code == 400
    assert one.json()["detail"].startswith("evaluation: give between 2 and 8")
    metric = client.get(
        f"/api/v1/comparisons?evaluation={a.id}&evaluation={b.id}&metric=accuracy", headers=h
    )
    assert metric.status_code == 400
    assert "metric: unknown metric 'accuracy'" in metric.json()["detail"]
    other_dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    c = _entry(db_session, other_dv, SUBJECTS_B)
    mixed = client.get(f"/api/v1/comparisons?evaluation={a.id}&evaluation={c.id}", headers=h)
    assert mixed.status_code == 400
    assert "compare evaluations of one dataset version" in mixed.json()["detail"]
    smoke_version = f.version(db_session, f.algorithm(db_session, f.user(db_session)))
    smoke = f.evaluation(db_session, smoke_version, world["dv"], kind=EvaluationKind.SMOKE_TEST)
    r = client.get(
        f"/api/v1/comparisons?evaluation={a.id}&evaluation={smoke.id}",
        headers=f.headers(db_session, smoke_version.algorithm.owner),
    )
    assert r.status_code == 400
    assert f"evaluation: {smoke.id} has no results to compare" in r.json()["detail"]


def test_a_private_algorithm_is_not_found_for_others(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    hidden = _entry(db_session, world["dv"], SUBJECTS_B, visibility=Visibility.PRIVATE)
    r = client.get(
        f"/api/v1/comparisons?evaluation={world['a'].id}&evaluation={hidden.id}",
        headers=f.headers(db_session, f.user(db_session)),
    )
    assert r.status_code == 404
    assert r.json()["detail"] == f"evaluation {hidden.id} does not exist"


def test_ids_out_of_range_are_refused_before_the_database(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    h = f.headers(db_session, f.user(db_session))
    r = client.get(f"/api/v1/comparisons?evaluation={world['a'].id}&evaluation={10**30}", headers=h)
    assert r.status_code == 422
    nine = "&".join(f"evaluation={i}" for i in range(1, 10))
    assert client.get(f"/api/v1/comparisons?{nine}", headers=h).status_code == 422


def test_a_repeated_comparison_reuses_its_paired_test_and_a_new_result_does_not(
    client: TestClient, db_session: Session, world: dict[str, Any]
) -> None:
    """The resampling is kept by the values it ran on: asked again, the same test comes
    back without resampling; a changed per-subject value is another key, so a new result
    is never answered with the old test."""
    from szbench.compare import service
    from szbench.models import SubjectResult

    service.paired_test.cache_clear()
    a, b = world["a"], world["b"]
    url = f"/api/v1/comparisons?evaluation={a.id}&evaluation={b.id}"
    first = client.get(url).json()["tests"]
    assert client.get(url).json()["tests"] == first
    info = service.paired_test.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    row = db_session.query(SubjectResult).filter_by(evaluation_id=b.id, subject="01").one()
    row.event_f1 = 0.95  # subject 01 now better under B
    db_session.flush()
    (changed,) = client.get(url).json()["tests"]
    assert service.paired_test.cache_info().misses == 2
    assert changed["mean_difference"] == pytest.approx((-0.05 + 0.2 + 0.4 + 0.4) / 4)
    assert changed["mean_difference"] != first[0]["mean_difference"]
