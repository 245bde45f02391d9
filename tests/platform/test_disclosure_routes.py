"""Every read that shows something of an evaluation's results asks the one decision point.

The routes are enumerated from the app (the API's OpenAPI document, the web UI's routers):
each GET whose path names an evaluation, an algorithm, a leaderboard, a comparison or the
caller's submissions is called as the owner of a held-out evaluation, and must call
:func:`szbench.disclosure.decision.decide`, unless it is listed in ``NO_RESULTS`` with why it
shows nothing that rule governs, or in ``FROZEN``: a leaderboard snapshot, whose figures
were decided once, for an anonymous viewer, when it was taken (the test checks that too).
A new route that shows results without asking fails here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.app import create_app
from szbench.disclosure import decision
from szbench.disclosure import facts as rule_facts
from szbench.leaderboards import snapshots
from szbench.models import Role
from szbench.web import (
    account,
    admin,
    algorithms,
    compare,
    datasets,
    pages,
    submit_help,
)
from szbench.web import snapshots as snapshot_pages
from tests.platform import factories as f

EXACT = 0.5123457  # the held-out figure as computed; the owner gets it rounded

SHOWS_RESULTS = re.compile(
    r"\{evaluation_id\}|\{algorithm_id\}|/leaderboards|/compar|/submissions|^/$"
)
NO_RESULTS = {
    "/api/v1/algorithms/{algorithm_id}": "the algorithm's own fields",
    "/api/v1/algorithms/{algorithm_id}/versions": "its versions: images and smoke tests",
    "/api/v1/algorithms/{algorithm_id}/versions/{version_id}": "one version",
    "/algorithms/{algorithm_id}/edit": "the edit form",
    "/api/v1/evaluations/{evaluation_id}/citation": "what ran (digest, data, scorer), no figure",
}
# Snapshots store what decide(None, ...) released when they were taken (never recomputed).
FROZEN = {
    "/api/v1/leaderboards/{slug}/snapshots",
    "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}",
    "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}/citation",
    "/api/v1/leaderboards/{slug}/snapshots/{snapshot_id}/entries/{evaluation_id}/citation",
    "/leaderboards/{slug}/snapshots/{snapshot_id}",
}


def _get_paths() -> set[str]:
    app = create_app()
    api = {path for path, ops in app.openapi()["paths"].items() if "get" in ops}
    routers = (pages, compare, algorithms, account, admin, datasets, submit_help, snapshot_pages)
    web = {
        route.path
        for module in routers
        for route in module.router.routes
        if isinstance(route, APIRoute) and "GET" in route.methods
    }
    return {p for p in api | web if SHOWS_RESULTS.search(p) and not p.startswith("/admin")}


@pytest.fixture
def viewers() -> list[int | None]:
    """Who each call of decide was for (a user id; None: anonymous)."""
    return []


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, viewers: list[int | None]) -> list[int | None]:
    seen: list[int | None] = []
    real = decision.decide

    def counting(viewer: Any, facts: rule_facts.Facts) -> decision.View:
        seen.append(facts.owner_id)
        viewers.append(None if viewer is None else viewer.id)
        return real(viewer, facts)

    monkeypatch.setattr(decision, "decide", counting)
    return seen


def test_every_result_read_asks_decide(
    client: TestClient,
    db_session: Session,
    calls: list[int | None],
    viewers: list[int | None],
) -> None:
    s = db_session
    owner, other = f.user(s, name="Owner"), f.user(s, name="Other")
    admin = f.user(s, Role.ADMIN)
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    algorithm = f.algorithm(s, owner, name="alpha")
    version = f.version(s, algorithm)
    figures = {"event_f1": EXACT, "event_sensitivity": EXACT}
    evaluation = f.evaluation(s, version, dv)
    f.result(s, evaluation, {"01": figures, "02": figures})
    rival = f.evaluation(s, f.version(s, f.algorithm(s, other, name="beta")), dv)
    f.result(s, rival, {"01": figures, "02": figures})
    run = f.run(s, evaluation, f.recording(s, dv))
    calls.clear()
    viewers.clear()
    snapshot, _ = snapshots.take(s, "held", "1", by=admin)
    # Per entry, and once for the board's own rule (its stated bound: facts of no owner).
    assert set(calls) == {owner.id, other.id, None}, "a snapshot asks decide per entry"
    assert viewers == [None] * len(calls), "a snapshot is the anonymous view, not the admin's"
    values = {
        "evaluation_id": evaluation.id,
        "algorithm_id": algorithm.id,
        "run_id": run.id,
        "slug": "held",
        "snapshot_id": snapshot.id,
    }
    query = {
        "comparisons": f"?evaluation={evaluation.id}&evaluation={rival.id}",
        "compare": f"?dataset=held&evaluation={evaluation.id}&evaluation={rival.id}",
    }
    headers = f.headers(s, owner)
    paths = _get_paths()
    assert {"/api/v1/evaluations/{evaluation_id}/result", "/leaderboards/{slug}"} <= paths
    for path in sorted(paths):
        if path in NO_RESULTS:
            continue
        url = re.sub(r"\{(\w+)\}", lambda m: str(values[m.group(1)]), path)
        url += next((q for key, q in query.items() if path.endswith(key)), "")
        calls.clear()
        answer = client.get(url, headers=headers)
        assert answer.status_code < 500, (path, answer.text[:300])
        if path in FROZEN:
            assert not calls, f"{path} recomputes what its snapshot froze"
        else:
            assert calls, f"{path} shows results without asking decision.decide"
        assert str(EXACT) not in answer.text, path
    assert set(NO_RESULTS) | FROZEN <= paths  # the exceptions name routes that exist
