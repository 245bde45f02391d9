"""The bound the product states is the one its rules enforce (issue 28.9, issue 32.5): each
leaderboard says, by the rule that applies to its data now, how many bits one evaluation can
tell a non-admin (``release.bits_per_evaluation``, ``timing_bits_per_evaluation``,
``bits_per_comparison``), computed by :mod:`szbench.disclosure.bits`."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.disclosure import bits
from szbench.models import DatasetKind, Disclosure
from szbench.phases import service as phases_service
from tests.platform import factories as f


def _board(s: Session, slug: str, subjects: int, **dataset: Any) -> Any:
    dv = f.dataset_version(s, f.dataset(s, slug=slug, **dataset), version="1")
    for i in range(subjects):
        f.recording(s, dv, subject=f"{i:02d}")
    ev = f.evaluation(s, f.version(s, f.algorithm(s, f.user(s))), dv)
    f.result(s, ev, {f"{i:02d}": {"event_f1": 0.5} for i in range(subjects)})
    return dv


def test_each_board_states_the_bound_of_its_rule(client: TestClient, db_session: Session) -> None:
    s = db_session
    rounded = _board(s, "rounded", 12)
    body = client.get("/api/v1/leaderboards/rounded").json()["release"]
    assert body["rule"] == "rounded"
    assert body["bits_per_evaluation"] == round(
        bits.bits_per_evaluation(recordings=12, subjects=12, entries=1), 1
    )
    assert body["timing_bits_per_evaluation"] == round(
        bits.timing_bits_per_evaluation(recordings=12, run_timeout_s=900), 1
    )
    assert body["bits_per_comparison"] == round(bits.bits_per_comparison(subjects=12), 1)
    # A phase releasing by the Ladder names the data: the Ladder's bound, no comparison.
    phase = f.phase(s, slug="continuous", ladder_step=0.05)
    phases_service.update_phase(s, phase, dataset_versions=[rounded])
    body = client.get("/api/v1/leaderboards/rounded").json()["release"]
    assert body["rule"] == "ladder"
    assert body["bits_per_evaluation"] == round(
        bits.ladder_bits_per_evaluation(recordings=12, step=0.05), 1
    )
    assert body["bits_per_comparison"] is None
    page = client.get("/leaderboards/rounded").text
    assert f"{body['bits_per_evaluation']} bits through its shown figures" in page
    # Exact figures state no bound on them; a public sample states none at all.
    _board(s, "exact", 3, disclosure=Disclosure.SUBJECT)
    body = client.get("/api/v1/leaderboards/exact").json()["release"]
    assert (body["rule"], body["bits_per_evaluation"]) == ("exact", None)
    assert body["timing_bits_per_evaluation"] is not None
    _board(s, "sample", 2, kind=DatasetKind.PUBLIC_SAMPLE)
    body = client.get("/api/v1/leaderboards/sample").json()["release"]
    assert body["bits_per_evaluation"] is None
    assert body["timing_bits_per_evaluation"] is None
