"""The owner's view of their runs' logs (issue 16 point 5): the container's stdout/stderr
tail on a public sample (the smoke test), never on held-out data, where only the fixed text
per outcome is shown; the runner's own header (host, host paths) never reaches the owner."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.disclosure.decision import OUTCOME_TEXT
from szbench.models import DatasetKind, Disclosure, EvaluationKind, Role, RunOutcome
from tests.platform import factories as f

from .conftest import PASSWORD, sign_in

pytestmark = pytest.mark.postgres

HEADER = (
    "outcome: crashed  exit code: 3  duration: 1.00 s\n"
    "image: sha256:abc  recording: /srv/secret/host/path/rec.edf\n"
    "host: worker-7  gpus: ()\n"
    "message: The algorithm exited with code 3.\n"
    "--- container log (tail) ---\n"
)
LOG = "loading model\nTraceback (most recent call last):\nValueError: bad channel Fp1-Avg\n"


def _world(session: Session) -> dict[str, int]:
    owner = f.user(session, email="owner@example.org", password=PASSWORD)
    f.user(session, email="other@example.org", password=PASSWORD)
    f.user(session, Role.ADMIN, email="admin@example.org", password=PASSWORD)
    algo = f.algorithm(session, owner, name="crashy")
    av = f.version(session, algo)
    ids = {}
    for kind, slug in ((DatasetKind.PUBLIC_SAMPLE, "sample"), (DatasetKind.HELD_OUT, "held")):
        ds = f.dataset(session, kind, slug=slug, disclosure=Disclosure.RECORDING)
        dv = f.dataset_version(session, ds)
        ev = f.evaluation(
            session,
            av,
            dv,
            kind=EvaluationKind.SMOKE_TEST if slug == "sample" else EvaluationKind.FULL,
        )
        first = f.run(
            session,
            ev,
            f.recording(session, dv),
            RunOutcome.CRASHED,
            submitter_message="The algorithm exited with code 3.",
            admin_log=HEADER + LOG + "[worker] ran image sha256:def, expected sha256:abc",
        )
        # A reused run shows the log of the run it reuses (same image, same recording).
        f.run(
            session,
            ev,
            f.recording(session, dv),
            RunOutcome.CRASHED,
            submitter_message="The algorithm exited with code 3.",
            admin_log=f"Reused the result of run {first.id} (same image, recording, scorer).",
            reused_from_id=first.id,
        )
        ids[slug] = ev.id
    session.commit()
    return ids


def _runs(client: TestClient, evaluation_id: int) -> list[dict]:
    r = client.get(f"/api/v1/evaluations/{evaluation_id}/recordings")
    assert r.status_code == 200, r.text
    return r.json()["items"]


def test_the_owner_reads_the_container_log_on_the_public_sample(
    client: TestClient, db_session: Session
) -> None:
    ids = _world(db_session)
    sign_in(client, "owner@example.org")
    runs = _runs(client, ids["sample"])
    assert [r["log"] for r in runs] == [LOG, LOG]
    assert all(r["admin_log"] is None for r in runs)
    page = client.get(f"/evaluations/{ids['sample']}").text
    assert "ValueError: bad channel Fp1-Avg" in page
    assert "Log of the run (tail)" in page
    for secret in ("/srv/secret/host/path", "worker-7", "[worker] ran image"):
        assert secret not in page


def test_held_out_runs_show_only_the_fixed_texts(client: TestClient, db_session: Session) -> None:
    ids = _world(db_session)
    sign_in(client, "owner@example.org")
    runs = _runs(client, ids["held"])
    assert [r["log"] for r in runs] == [None, None]
    assert {r["submitter_message"] for r in runs} == {OUTCOME_TEXT[RunOutcome.CRASHED]}
    page = client.get(f"/evaluations/{ids['held']}").text
    assert "bad channel" not in page
    assert "Log of the run" not in page


def test_others_never_read_a_log(client: TestClient, db_session: Session) -> None:
    ids = _world(db_session)
    sign_in(client, "other@example.org")
    for slug in ("sample", "held"):
        r = client.get(f"/api/v1/evaluations/{ids[slug]}/recordings")
        if r.status_code == 200:
            assert all(run["log"] is None for run in r.json()["items"])


def test_the_tail_is_bounded(
    client: TestClient, db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    from szbench.results import queries

    monkeypatch.setattr(queries, "OWNER_LOG_TAIL_CHARS", 20)
    ids = _world(db_session)
    sign_in(client, "owner@example.org")
    log = _runs(client, ids["sample"])[0]["log"]
    assert log == "[... earlier lines cut ...]\n" + LOG[-20:]
