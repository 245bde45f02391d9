"""What a submitter can learn is decided in one place and stays bounded (issue 20).

One held-out dataset version ``held 1`` with two subjects. Alice's version is in the phase
``over``: closed (its scores released exact), per-recording disclosure, naming ``held 1``.
Bob's version has no phase: his result follows the dataset's level (aggregate). Both results
carry the scorer's whole report (means, ``*_std``, pooled ratios and counts) with marked
values, and their per-subject figures and runs marked reference counts.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from szbench import queue
from szbench.algorithms import service as algorithms_service
from szbench.config import get_settings
from szbench.datasets import service as datasets_service
from szbench.disclosure import bits, decision
from szbench.models import (
    Algorithm,
    DatasetKind,
    DatasetVersion,
    Disclosure,
    Evaluation,
    EvaluationStatus,
    FailedRecordings,
    Phase,
    Recording,
    ReleaseRule,
    Role,
    RunOutcome,
    SubjectResult,
    User,
    Visibility,
)
from szbench.phases import service as phases_service
from tests.platform import factories as f
from tests.worker._pipeline_factories import Rec, make_prepared_dataset

# Marked figures: none may reach a non-admin as they are at the aggregate level.
EXACT_F1 = 0.5123457
EXACT_FP = 3.1415926
STD_F1 = 0.0612345
POOLED_FP = 6102
REF_TRUE = 4242


def _report(f1: float, fp: float, marked: bool) -> dict[str, Any]:
    """A report shaped as the pipeline stores it (szbench_worker.pipeline.report_dict);
    ``marked``: with the marked std and counts."""
    std, pooled_fp = (STD_F1, POOLED_FP) if marked else (0.0212121, 5102)
    return {
        "event_results": {
            "sensitivity": f1,
            "precision": f1,
            "f1": f1,
            "fpRate": fp,
            "sensitivity_std": std,
            "precision_std": std,
            "f1_std": std,
            "fpRate_std": 1.2345678,
        },
        "sample_results": {"sensitivity": 0.4321, "f1": f1, "f1_std": std},
        "pooled": {"event_results": {"f1": 0.7654321 if marked else 0.6543}},
        "pooled_counts": {
            "event": {"tp": 6101, "fp": pooled_fp, "fn": 6103, "ref_true": 6104},
            "sample": {"tp": 6201, "fp": 6202, "fn": 6203, "ref_true": 6204},
        },
        "params": {"tolerance_start_s": 30.0},
        "scorer_version": "0.1.0",
        "subjects": 2,
        "recordings": 2,
        "missing_hypotheses": 0,
    }


@dataclass
class World:
    admin: User
    alice: User
    bob: User
    dv: DatasetVersion
    phase: Phase
    alice_version: Any
    alice_eval: Evaluation
    bob_algorithm: Algorithm
    bob_eval: Evaluation


def _scored(
    s: Session, version: Any, dv: DatasetVersion, f1: float, *, marked: bool = False, **kw: Any
) -> Evaluation:
    fp = EXACT_FP if marked else 2.7182818
    ev = f.evaluation(s, version, dv, **kw)
    f.result(
        s,
        ev,
        {"01": {"event_f1": f1 - 0.05}, "02": {"event_f1": f1 + 0.05}},
        metrics={
            "event_f1": f1,
            "event_sensitivity": f1,
            "event_precision": f1,
            "event_fp_rate": fp,
            "sample_f1": f1,
            "sample_sensitivity": 0.4321,
        },
        report=_report(f1, fp, marked),
    )
    for subject in s.query(SubjectResult).filter_by(evaluation_id=ev.id):
        subject.counts = {"event_ref_true": REF_TRUE}
    # Every evaluation on a dataset version runs on its recordings (registered once).
    recordings = {r.subject: r for r in s.query(Recording).filter_by(dataset_version_id=dv.id)}
    for subject in ("01", "02"):
        recording = recordings.get(subject) or f.recording(s, dv, subject=subject)
        f.run(s, ev, recording, event_ref_true=REF_TRUE)
    s.flush()
    return ev


@pytest.fixture
def world(db_session: Session) -> World:
    s = db_session
    admin, alice, bob = f.user(s, Role.ADMIN), f.user(s, name="Alice"), f.user(s, name="Bob")
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
    phase = f.phase(s, slug="over", is_open=False, disclosure=Disclosure.RECORDING)
    phase.dataset_versions = [dv]
    alice_version = f.version(s, f.algorithm(s, alice, name="alpha"), phase_id=phase.id)
    bob_algorithm = f.algorithm(s, bob, name="beta")
    alice_eval = _scored(s, alice_version, dv, 0.4123457)
    bob_eval = _scored(s, f.version(s, bob_algorithm), dv, EXACT_F1, marked=True)
    return World(admin, alice, bob, dv, phase, alice_version, alice_eval, bob_algorithm, bob_eval)


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    calls: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


# --- 1. a phase's level applies only to the data it names ----------------------------------


def test_a_phase_level_reaches_only_the_data_it_names(
    client: TestClient, db_session: Session, world: World, tmp_path: Path, sent: list[Any]
) -> None:
    s = db_session
    as_alice, admin = f.headers(s, world.alice), f.headers(s, world.admin)
    own = f"/api/v1/evaluations/{world.alice_eval.id}/recordings"
    assert client.get(own, headers=as_alice).status_code == 200  # the data the phase names
    # New held-out data after the phase closed: continuous benchmarking runs every version,
    # Alice's closed-phase one included.
    prepared = make_prepared_dataset(tmp_path / "v2", [Rec("sub-03", "run-00", 600)])
    r = client.post(
        "/api/v1/datasets/held/versions",
        headers=admin,
        json={"version": "2", "prepared_path": str(prepared)},
    )
    assert r.status_code == 201, r.text
    (late,) = [
        e
        for e in map(s.get, [Evaluation] * 2, r.json()["evaluation_ids"])
        if e is not None and e.algorithm_version_id == world.alice_version.id
    ]
    late.status = EvaluationStatus.DONE
    f.run(s, late, late.dataset_version.recordings[0], event_ref_true=REF_TRUE)
    f.result(s, late, {"03": {"event_f1": 0.3}})
    paths = [
        f"/api/v1/evaluations/{late.id}/recordings",
        f"/api/v1/evaluations/{late.id}/recordings/download?format=csv",
        f"/api/v1/evaluations/{late.id}/subjects",
    ]
    for path in paths:
        answer = client.get(path, headers=as_alice)
        assert answer.status_code == 403, (path, answer.text)
        assert "aggregate" in answer.json()["detail"]
    page = client.get(f"/evaluations/{late.id}", headers=as_alice).text
    assert str(REF_TRUE) not in page
    assert "Per-recording results of evaluation" in page
    # Named by an admin, the phase's level applies there too, at once.
    r = client.patch(
        "/api/v1/phases/over",
        headers=admin,
        json={"dataset_versions": [{"dataset": "held", "version": v} for v in ("1", "2")]},
    )
    assert r.status_code == 200, r.text
    assert r.json()["dataset_versions"] == [
        {"dataset": "held", "version": "1"},
        {"dataset": "held", "version": "2"},
    ]
    assert client.get(paths[0], headers=as_alice).status_code == 200


def test_phases_name_their_data_by_dataset_and_version(
    client: TestClient, db_session: Session, world: World
) -> None:
    admin = f.headers(db_session, world.admin)
    r = client.post(
        "/api/v1/phases",
        headers=admin,
        json={"slug": "next", "dataset_versions": [{"dataset": "held", "version": "9"}]},
    )
    assert r.status_code == 400
    assert r.json()["detail"] == "dataset_versions[0]: dataset 'held' has no version '9'"
    r = client.post(
        "/api/v1/phases",
        headers=admin,
        json={"slug": "next", "dataset_versions": [{"dataset": "held", "version": "1"}]},
    )
    assert r.status_code == 201, r.text
    assert r.json()["dataset_versions"] == [{"dataset": "held", "version": "1"}]
    # No closing date and no rule of its own: an open continuous phase releases by the Ladder.
    assert (r.json()["release_rule"], r.json()["release"]) == (None, "ladder")
    r = client.patch("/api/v1/phases/next", headers=admin, json={"title": "Next"})
    assert r.json()["dataset_versions"] == [{"dataset": "held", "version": "1"}]  # unchanged
    r = client.patch("/api/v1/phases/next", headers=admin, json={"dataset_versions": []})
    assert r.json()["dataset_versions"] == []


def test_the_admin_phases_page_names_the_data(
    client: TestClient, db_session: Session, world: World
) -> None:
    from tests.web.conftest import PASSWORD, post_form, sign_in

    f.user(db_session, Role.ADMIN, email="phases-data@example.org", password=PASSWORD)
    sign_in(client, "phases-data@example.org")
    page = client.get("/admin/phases").text
    assert 'action="/admin/phases/over/datasets"' in page
    assert "Applies to: held 1." in page
    r = post_form(client, "/admin/phases", "/admin/phases/over/datasets", {})
    assert r.status_code == 200
    assert "Applies to: <strong>no data</strong>" in r.text
    db_session.expire_all()
    assert world.phase.dataset_versions == []
    r = post_form(
        client, "/admin/phases", "/admin/phases/over/datasets", {"dataset_version": world.dv.id}
    )
    assert "now apply to held 1" in r.text
    r = post_form(
        client, "/admin/phases", "/admin/phases/over/release", {"release_rule": "sometimes"}
    )
    assert r.status_code == 400
    # Under the field of that phase's form, in words (issue 30.5).
    assert re.search(r'class="field-error" id="phase-\d+-release-rule-error">Unknown rule', r.text)
    r = post_form(
        client,
        "/admin/phases",
        "/admin/phases/over/release",
        {"release_rule": "ladder", "ladder_step": "0.02"},
    )
    db_session.expire_all()
    assert (world.phase.release_rule, world.phase.ladder_step) == (ReleaseRule.LADDER, 0.02)


# --- 3. rounded at the aggregate level: no *_std over few subjects, no raw counts ------------


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield float(value)


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)


def test_aggregate_results_are_rounded_without_std_or_raw_counts(
    client: TestClient, db_session: Session, world: World
) -> None:
    s = db_session
    e = world.bob_eval.id
    for headers in ({}, f.headers(s, world.bob), f.headers(s, world.alice)):
        result = client.get(f"/api/v1/evaluations/{e}/result", headers=headers).json()
        assert result["release"] == "rounded"
        assert result["event_f1"] == 0.51
        assert result["event_fp_rate"] == 3.1
        assert result["sample_sensitivity"] is None  # not one of the leaderboard's figures
        assert result["report"]["event_results"] == {
            "sensitivity": 0.51,
            "precision": 0.51,
            "f1": 0.51,
            "fpRate": 3.1,
        }
        keys = set(_keys(result))
        assert not {k for k in keys if k.endswith("_std")}, keys
        assert {"pooled", "pooled_counts", "tp", "fp", "ref_true"}.isdisjoint(keys)
        marked = {EXACT_F1, EXACT_FP, STD_F1, float(POOLED_FP), 0.7654321}
        assert marked.isdisjoint(_numbers(result))
        board = client.get("/api/v1/leaderboards/held", headers=headers).json()
        (entry,) = [x for x in board["items"] if x["evaluation_id"] == e]
        assert (entry["event_f1"], entry["event_fp_rate"], entry["release"]) == (
            0.51,
            3.1,
            "rounded",
        )
        assert entry["ci"] is None  # two subjects: the interval would be the two figures
        assert marked.isdisjoint(_numbers(board))
        download = client.get("/api/v1/leaderboards/held/download?format=csv", headers=headers)
        rows = {r["evaluation_id"]: r for r in csv.DictReader(io.StringIO(download.text))}
        assert (rows[str(e)]["event_f1"], rows[str(e)]["release"]) == ("0.51", "rounded")
        side = client.get(f"/api/v1/algorithms/{world.bob_algorithm.id}/results", headers=headers)
        (row,) = side.json()["items"]
        assert (row["event_f1"], row["sample_sensitivity"]) == (0.51, None)
        page = client.get(f"/algorithms/{world.bob_algorithm.id}", headers=headers).text
        assert "0.512" not in page
        assert "0.51" in page
    admin = client.get(f"/api/v1/evaluations/{e}/result", headers=f.headers(s, world.admin)).json()
    assert (admin["release"], admin["event_f1"]) == ("exact", EXACT_F1)
    assert admin["report"]["pooled_counts"]["event"]["fp"] == POOLED_FP
    assert admin["report"]["event_results"]["f1_std"] == STD_F1


def test_std_only_where_intervals_are_disclosed(
    client: TestClient, db_session: Session, world: World, settings_env: pytest.MonkeyPatch
) -> None:
    s = db_session
    path = f"/api/v1/evaluations/{world.bob_eval.id}/result"
    # From decision.INTERVALS_MIN_SUBJECTS subjects on: the *_std of the released figures,
    # rounded as they are, and still no raw count.
    settings_env.setattr(decision, "INTERVALS_MIN_SUBJECTS", 2)
    report = client.get(path).json()["report"]
    assert report["event_results"]["f1_std"] == 0.06
    assert report["sample_results"] == {"f1": 0.51, "f1_std": 0.06}
    assert "pooled_counts" not in report
    settings_env.setattr(decision, "INTERVALS_MIN_SUBJECTS", 10)
    # Per-subject figures disclosed: the whole report, exact.
    datasets_service.set_disclosure(s, world.dv.dataset, Disclosure.SUBJECT)
    s.commit()
    report = client.get(path).json()["report"]
    assert report["event_results"]["f1_std"] == STD_F1
    assert report["pooled_counts"]["event"]["fp"] == POOLED_FP


def test_the_stated_bound_is_the_arithmetic(client: TestClient) -> None:
    """docs/security.md states the bits per evaluation and per day that the code computes."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    settings = get_settings()
    per_eval = bits.bits_per_evaluation(recordings=4360, subjects=9)
    per_day = per_eval * (settings.held_out_runs_per_day or 0)
    with_stats = bits.bits_per_evaluation(recordings=4360, subjects=65, entries=28)
    ladder = bits.ladder_bits_per_evaluation(recordings=4360, step=settings.ladder_step)
    stated = {m.group(1): float(m.group(2)) for m in re.finditer(r"<!-- (\w+) -->([0-9.]+)", text)}
    assert stated == {
        "bits_per_evaluation": round(per_eval, 1),
        "bits_per_day": round(per_day, 1),
        "bits_with_intervals": round(with_stats, 1),
        "bits_with_intervals_per_day": round(with_stats * (settings.held_out_runs_per_day or 0), 1),
        "ladder_bits": round(ladder, 1),
        "bits_per_comparison": round(bits.bits_per_comparison(subjects=10), 1),
        "bits_per_comparison_65": round(bits.bits_per_comparison(subjects=65), 1),
        **{
            f"timing_bits_{n}": round(
                bits.timing_bits_per_evaluation(recordings=n, run_timeout_s=900), 1
            )
            for n in (10, 100, 4360)
        },
    }


# --- 5. change counters: seen at once; invisible changes move no ETag ------------------------


def test_someone_elses_private_evaluation_moves_no_etag(
    client: TestClient, db_session: Session, world: World
) -> None:
    s = db_session
    carol = f.user(s, name="Carol")
    viewers = {"anonymous": {}, "bob": f.headers(s, world.bob)}
    paths = ["/api/v1/leaderboards/held", "/api/v1/leaderboards/held/download?format=json"]
    before = {w: client.get(paths[0], headers=h).headers["etag"] for w, h in viewers.items()}
    # Carol's private algorithm finishes an evaluation on the same data (as the pipeline
    # does: its result stored, the counters bumped).
    hidden = f.algorithm(s, carol, name="secret", visibility=Visibility.PRIVATE)
    _scored(s, f.version(s, hidden), world.dv, 0.9)
    for who, headers in viewers.items():
        again = client.get(paths[0], headers={**headers, "If-None-Match": before[who]})
        assert again.status_code == 304, who
        assert again.headers["etag"] == before[who]
    # Carol sees her entry at once.
    mine = client.get(paths[0], headers=f.headers(s, carol)).json()
    assert "secret" in [e["algorithm"] for e in mine["items"]]


def test_lowering_a_phase_level_withdraws_intervals_at_once(
    client: TestClient, db_session: Session, world: World
) -> None:
    admin = f.headers(db_session, world.admin)

    def alpha() -> dict[str, Any]:
        board = client.get("/api/v1/leaderboards/held").json()
        (entry,) = [e for e in board["items"] if e["algorithm"] == "alpha"]
        return entry

    assert alpha()["ci"] is not None  # per-recording disclosure: intervals shown, exact
    r = client.patch("/api/v1/phases/over", headers=admin, json={"disclosure": "aggregate"})
    assert r.status_code == 200, r.text
    entry = alpha()
    assert entry["ci"] is None
    assert entry["event_f1"] == 0.41


def _alpha(client: TestClient, **params: Any) -> dict[str, Any] | None:
    board = client.get("/api/v1/leaderboards/held", params={"unranked": True, **params}).json()
    return next((e for e in board["items"] if e["algorithm"] == "alpha"), None)


def test_every_rule_change_is_seen_at_once(
    client: TestClient, db_session: Session, world: World
) -> None:
    """Each service that changes what a board shows bumps its counter in its transaction;
    each read before and after sees the change (the answers in between are cached)."""
    s = db_session
    admin = f.headers(s, world.admin)
    alpha = world.alice_version.algorithm
    assert _alpha(client)["release"] == "exact"  # closed phase, per-recording level
    # Results stored: a new evaluation of Alice's shows at once (versions=all).
    newer = _scored(s, f.version(s, alpha, phase_id=world.phase.id), world.dv, 0.61)
    assert _alpha(client, versions="latest")["evaluation_id"] == newer.id
    # Withdrawn and back.
    algorithms_service.update_algorithm(s, alpha, withdrawn=True)
    assert _alpha(client) is None
    algorithms_service.update_algorithm(s, alpha, withdrawn=False)
    assert _alpha(client) is not None
    # Hidden (private) and shown again.
    algorithms_service.update_algorithm(s, alpha, visibility=Visibility.PRIVATE)
    assert _alpha(client) is None
    algorithms_service.update_algorithm(s, alpha, visibility=Visibility.PUBLIC)
    assert _alpha(client) is not None
    # Unpublished (hidden phase) until published.
    hidden = _scored(
        s, f.version(s, alpha, phase_id=world.phase.id), world.dv, 0.7, published=False
    )
    assert _alpha(client, versions="latest")["evaluation_id"] == newer.id
    phases_service.publish_evaluation(s, hidden)
    assert _alpha(client, versions="latest")["evaluation_id"] == hidden.id
    # The phase no longer names the data: the dataset's level (aggregate) applies.
    phases_service.set_dataset_versions(s, world.phase, [])
    assert _alpha(client)["release"] == "rounded"
    phases_service.set_dataset_versions(s, world.phase, [world.dv])
    assert _alpha(client)["release"] == "exact"
    # Reopened without a deadline: the Ladder's score only.
    phases_service.update_phase(s, world.phase, is_open=True)
    entry = _alpha(client)
    assert (entry["release"], entry["event_sensitivity"]) == ("ladder", None)
    # An explicit rule.
    phases_service.update_phase(s, world.phase, release_rule=ReleaseRule.EXACT)
    assert _alpha(client)["release"] == "exact"
    # Its closing date passes: no write, the rule still changes at once (read every time).
    phases_service.update_phase(s, world.phase, release_rule=None)
    assert _alpha(client)["release"] == "ladder"
    s.execute(
        update(Phase)
        .where(Phase.id == world.phase.id)
        .values(closes_at=datetime.now(UTC) - timedelta(seconds=1))
    )
    s.commit()
    assert _alpha(client)["release"] == "exact"
    # The dataset's failed-recordings rule and the phase's.
    s.get(Evaluation, hidden.id).runs[0].outcome = RunOutcome.CRASHED  # type: ignore[union-attr]
    s.flush()
    datasets_service.set_failed_recordings(s, world.dv.dataset, FailedRecordings.NO_DETECTIONS)
    assert _alpha(client)["rank"] is not None
    phases_service.update_phase(s, world.phase, failed_recordings=FailedRecordings.UNRANKED)
    assert _alpha(client)["rank"] is None
    # The dataset's level, for the phase-less entry.
    datasets_service.set_disclosure(s, world.dv.dataset, Disclosure.SUBJECT)
    board = client.get("/api/v1/leaderboards/held").json()
    assert {e["algorithm"]: e["release"] for e in board["items"]}["beta"] == "exact"
    # The dataset's kind (confirmed): a public sample is shown in full.
    phases_service.update_phase(s, world.phase, failed_recordings=None)
    datasets_service.set_disclosure(s, world.dv.dataset, Disclosure.AGGREGATE)
    assert _alpha(client)["release"] == "exact"
    board = client.get("/api/v1/leaderboards/held").json()
    assert {e["algorithm"]: e["release"] for e in board["items"]}["beta"] == "rounded"
    datasets_service.set_kind(s, world.dv.dataset, DatasetKind.PUBLIC_SAMPLE, confirm_public=True)
    board = client.get("/api/v1/leaderboards/held").json()
    assert {e["algorithm"]: e["release"] for e in board["items"]}["beta"] == "exact"
    assert client.get("/api/v1/leaderboards/held", headers=admin).json()["kind"] == "public_sample"


# --- 6. held-out by default; public only when confirmed -------------------------------------


def test_new_datasets_are_held_out_and_public_only_when_confirmed(
    client: TestClient, db_session: Session, world: World
) -> None:
    s = db_session
    admin, researcher = f.headers(s, world.admin), f.headers(s, world.bob)
    r = client.post("/api/v1/datasets", headers=admin, json={"slug": "fresh"})
    assert (r.status_code, r.json()["kind"]) == (201, "held_out")
    r = client.post(
        "/api/v1/datasets", headers=admin, json={"slug": "pub", "kind": "public_sample"}
    )
    assert r.status_code == 400
    assert r.json()["detail"].startswith("kind: a public sample's recordings and annotations")
    r = client.post(
        "/api/v1/datasets",
        headers=admin,
        json={"slug": "pub", "kind": "public_sample", "confirm_public": True},
    )
    assert (r.status_code, r.json()["kind"]) == (201, "public_sample")
    # A held-out set becomes downloadable only by a confirmed change.
    r = client.patch("/api/v1/datasets/held", headers=admin, json={"kind": "public_sample"})
    assert r.status_code == 400
    assert client.get("/api/v1/datasets/held").json()["kind"] == "held_out"
    assert client.get("/datasets/held/download.tar.gz", headers=researcher).status_code == 403
    r = client.patch(
        "/api/v1/datasets/held",
        headers=admin,
        json={"kind": "public_sample", "confirm_public": True},
    )
    assert (r.status_code, r.json()["kind"]) == (200, "public_sample")
    r = client.patch("/api/v1/datasets/held", headers=admin, json={"kind": "held_out"})
    assert (r.status_code, r.json()["kind"]) == (200, "held_out")


def test_the_admin_form_defaults_to_held_out_and_confirms_public(
    client: TestClient, db_session: Session, world: World
) -> None:
    from tests.web.conftest import PASSWORD, post_form, sign_in

    f.user(db_session, Role.ADMIN, email="kind-admin@example.org", password=PASSWORD)
    sign_in(client, "kind-admin@example.org")
    page = client.get("/admin/datasets").text
    select = page[page.index('<select id="ds-kind"') :]
    select = select[: select.index("</select>")]
    assert re.search(r'<option value="held_out" selected>', select)
    assert "selected" not in select.split('value="public_sample"')[1]
    r = post_form(client, "/admin/datasets", "/admin/datasets", {"slug": "a-default"})
    assert "Dataset a-default created" in r.text
    r = post_form(
        client, "/admin/datasets", "/admin/datasets", {"slug": "oops", "kind": "public_sample"}
    )
    assert r.status_code == 400
    # Under the confirmation field, saying what to type (issue 30.5).
    assert '<p class="field-error" id="confirm-public-error">Type oops here to confirm' in r.text
    r = post_form(
        client,
        "/admin/datasets",
        "/admin/datasets",
        {"slug": "meant", "kind": "public_sample", "confirm_public": "meant"},
    )
    assert "Dataset meant created" in r.text
    # Making held-out data public: only with its slug typed.
    action = "/admin/datasets/held/kind"
    r = post_form(
        client, "/admin/datasets", action, {"kind": "public_sample", "confirm_public": ""}
    )
    assert r.status_code == 400
    assert re.search(r'class="field-error" id="ds-\d+-confirm-public-error">Type held here', r.text)
    db_session.expire_all()
    assert world.dv.dataset.kind == DatasetKind.HELD_OUT
    r = post_form(
        client, "/admin/datasets", action, {"kind": "public_sample", "confirm_public": "held"}
    )
    assert "is a public sample" in r.text
    db_session.expire_all()
    assert world.dv.dataset.kind == DatasetKind.PUBLIC_SAMPLE
