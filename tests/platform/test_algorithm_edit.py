"""Editing an algorithm: links (http(s) only) and withdrawal from the leaderboards."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, Role
from tests.platform import factories as f


@pytest.fixture
def ranked(db_session: Session) -> dict[str, Any]:
    ds = f.dataset(db_session, DatasetKind.HELD_OUT)
    dv = f.dataset_version(db_session, ds)
    owner = f.user(db_session)
    algo = f.algorithm(db_session, owner)
    ev = f.evaluation(db_session, f.version(db_session, algo), dv)
    f.result(db_session, ev, {"01": {"event_f1": 0.5}})
    other = f.algorithm(db_session, f.user(db_session))
    ev2 = f.evaluation(db_session, f.version(db_session, other), dv)
    f.result(db_session, ev2, {"01": {"event_f1": 0.4}})
    return {"ds": ds, "owner": owner, "algo": algo, "other": other}


def test_links_are_fields_and_only_http_links_are_accepted(
    client: TestClient, db_session: Session, ranked: dict[str, Any]
) -> None:
    algo, h = ranked["algo"], f.headers(db_session, ranked["owner"])
    r = client.patch(
        f"/api/v1/algorithms/{algo.id}",
        json={
            "code_url": " https://git.example.org/me/detector ",
            "paper_url": "http://doi.org/10.1/x",
        },
        headers=h,
    )
    assert r.status_code == 200, r.text
    assert r.json()["code_url"] == "https://git.example.org/me/detector"
    assert r.json()["paper_url"] == "http://doi.org/10.1/x"
    for bad in (
        "javascript:alert(1)",
        "data:text/html,hi",
        "//evil.example",
        "https://",
        "ftp://x.org/a",
    ):
        r = client.patch(f"/api/v1/algorithms/{algo.id}", json={"paper_url": bad}, headers=h)
        assert r.status_code == 400, bad
        assert r.json()["detail"].startswith("paper_url: "), r.text
        assert "is not an http(s) link" in r.json()["detail"]
    # Refused changes leave the stored link as it was; an empty one removes it.
    assert (
        client.get(f"/api/v1/algorithms/{algo.id}").json()["paper_url"] == "http://doi.org/10.1/x"
    )
    r = client.patch(f"/api/v1/algorithms/{algo.id}", json={"paper_url": ""}, headers=h)
    assert r.json()["paper_url"] == ""
    created = client.post(
        "/api/v1/algorithms",
        json={"name": "linked", "code_url": "javascript:x"},
        headers=h,
    )
    assert created.status_code == 400
    assert created.json()["detail"].startswith("code_url: ")


@pytest.mark.parametrize(
    ("link", "because"),
    [
        ("https://a.org/\nb", "holds U+000A"),
        ("https://a.org/paper\u2028", "holds U+2028 (LINE SEPARATOR)"),
        ("https://a.org/\u2029x", "holds U+2029"),
        ("https://a.org/x\u200b", "holds U+200B"),
        ("https://a.org/\u202egpj.exe", "holds U+202E"),
        ("https://a.org/x\x7f", "holds U+007F"),
        ("https://a.org/a\u00a0b", "holds U+00A0"),
        ("https://user:pass@a.org/x", "user name or password before the host"),
        ("https://good.example@evil.example/", "user name or password before the host"),
        ("https://evil.example\\@good.example/", "backslash"),
        ("https://a.org:99999/", "invalid port"),
    ],
)
def test_links_refuse_hidden_characters_and_credentials(
    client: TestClient, db_session: Session, link: str, because: str
) -> None:
    owner = f.user(db_session)
    algo = f.algorithm(db_session, owner)
    h = f.headers(db_session, owner)
    r = client.patch(f"/api/v1/algorithms/{algo.id}", json={"code_url": link}, headers=h)
    assert r.status_code == 400, (link, r.text)
    assert r.json()["detail"].startswith("code_url: ")
    assert because in r.json()["detail"]
    created = client.post("/api/v1/algorithms", json={"name": "l", "paper_url": link}, headers=h)
    assert created.status_code == 400, (link, created.text)
    assert because in created.json()["detail"]
    db_session.refresh(algo)
    assert algo.code_url == ""


def test_a_withdrawn_algorithm_leaves_every_leaderboard_and_can_come_back(
    client: TestClient, db_session: Session, ranked: dict[str, Any]
) -> None:
    ds, algo = ranked["ds"], ranked["algo"]
    admin_h = f.headers(db_session, f.user(db_session, role=Role.ADMIN))

    def names(headers: dict[str, str] | None = None) -> list[str]:
        body = client.get(f"/api/v1/leaderboards/{ds.slug}", headers=headers or {}).json()
        return [e["algorithm"] for e in body["items"]]

    def entries() -> int:
        index = client.get("/api/v1/leaderboards").json()
        return next(row["entries"] for row in index if row["dataset"] == ds.slug)

    assert algo.name in names()
    assert entries() == 2
    r = client.patch(
        f"/api/v1/algorithms/{algo.id}",
        json={"withdrawn": True},
        headers=f.headers(db_session, ranked["owner"]),
    )
    assert r.status_code == 200
    assert r.json()["withdrawn_at"] is not None
    assert names() == [ranked["other"].name]
    assert names(admin_h) == [ranked["other"].name]
    assert entries() == 1
    # Its results stay readable on its own page.
    results = client.get(f"/api/v1/algorithms/{algo.id}/results").json()
    assert results["total"] == 1
    r = client.patch(f"/api/v1/algorithms/{algo.id}", json={"withdrawn": False}, headers=admin_h)
    assert r.json()["withdrawn_at"] is None
    assert algo.name in names()


def test_only_the_owner_or_an_admin_may_withdraw(
    client: TestClient, db_session: Session, ranked: dict[str, Any]
) -> None:
    algo = ranked["algo"]
    r = client.patch(
        f"/api/v1/algorithms/{algo.id}",
        json={"withdrawn": True},
        headers=f.headers(db_session, f.user(db_session)),
    )
    assert r.status_code == 403
    assert client.get(f"/api/v1/algorithms/{algo.id}").json()["withdrawn_at"] is None
