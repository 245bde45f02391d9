"""Access control around the API: existence oracles, the last admin, sign-in without
anonymous reads, nosniff everywhere, and the OpenAPI security of public reads."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.leaderboards import service as leaderboards
from szbench.leaderboards import statistics
from szbench.models import DatasetKind, Role, Visibility
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
    db_session.execute(text(f"DELETE FROM {table} WHERE id = :id"), {"id": key})  # noqa: S608
    db_session.commit()
    db_session.expunge_all()
    missing = _answers(client, caller, probes)

    assert existing == missing
    # Not found, or refused for reasons that have nothing to do with the object.
    assert all(status in (200, 404) for status, _ in existing.values()), existing
