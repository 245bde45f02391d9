"""Quotas: atomic under real concurrency, covering re-runs, finite by default, shown to users.

The concurrency tests commit for real (threads, each with its own session and connection,
against real PostgreSQL, and against SQLite as the embedded mode runs it) and delete what
they made; the others use the API on the rolled-back test session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from szbench import db, migrate, queue
from szbench.algorithms import service as algorithms
from szbench.config import Settings, get_settings
from szbench.db import session_scope
from szbench.errors import QuotaExceeded
from szbench.evaluations import service as evaluations
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    ApiToken,
    Dataset,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    Recording,
    Role,
    RunOutcome,
    Team,
    TeamMember,
    TeamRole,
    User,
    VersionStatus,
)
from szbench.quotas import service as quotas
from tests.platform import factories as f

THREADS = 8


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    calls: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: calls.append((name, q, kwargs)))
    yield calls
    queue.set_sender(None)


def slow(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """Make ``module.name`` take a moment: it runs between the quota check and the insert,
    so without a lock every request passes the check before any of them records its row."""
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


def race(n: int, attempt: Callable[[int], None]) -> tuple[int, list[str], list[BaseException]]:
    """Run ``attempt(i)`` in ``n`` threads released together; (accepted, refusals, errors)."""
    barrier = threading.Barrier(n)
    lock = threading.Lock()
    accepted: list[int] = []
    refused: list[str] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        barrier.wait()
        try:
            attempt(i)
        except QuotaExceeded as exc:
            with lock:
                refused.append(exc.detail)
        except BaseException as exc:  # reported by the assertion below
            with lock:
                errors.append(exc)
        else:
            with lock:
                accepted.append(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return len(accepted), refused, errors


@pytest.fixture
def committed_pg(
    pg_url: str, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> Iterator[pytest.MonkeyPatch]:
    """Settings on the session's PostgreSQL database; what a test commits is deleted after."""
    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    get_settings.cache_clear()
    db.reset_engine()
    _made.clear()
    yield settings_env
    _delete_worlds(list(_made))
    _made.clear()


@pytest.fixture
def committed_sqlite(settings_env: pytest.MonkeyPatch, sent: list[Any]) -> pytest.MonkeyPatch:
    """The embedded mode's database: SQLite under the data dir, migrated."""
    migrate.upgrade(get_settings().effective_database_url)
    return settings_env


#: Users the committed tests made (their rows are deleted after each test).
_made: list[int] = []


def _seed(
    *,
    phase_quota: int | None = None,
    version_in_phase: bool = True,
    version_age: timedelta = timedelta(0),
) -> dict[str, int]:
    """A researcher with one active version (in a phase with ``phase_quota``, if given and
    ``version_in_phase``) and one done evaluation of it on a held-out dataset version."""
    with session_scope() as session:
        user = f.user(session)
        phase = f.phase(session, submission_quota=phase_quota) if phase_quota else None
        algo = f.algorithm(session, user)
        version = f.version(
            session,
            algo,
            phase_id=phase.id if phase and version_in_phase else None,
            created_at=datetime.now(UTC) - version_age,
        )
        dv = f.dataset_version(session, f.dataset(session, DatasetKind.HELD_OUT))
        f.recording(session, dv)
        # The smoke test's own held-out evaluation: no created_by, charged with the version.
        done = f.evaluation(session, version, dv)
        _made.append(user.id)
        return {
            "user": user.id,
            "algorithm": algo.id,
            "evaluation": done.id,
            "phase": phase.id if phase else 0,
        }


def _delete_worlds(user_ids: list[int]) -> None:
    if not user_ids:
        return
    with session_scope() as session:
        # Teams of these users go first (their charges and algorithms are set free).
        teams = select(TeamMember.team_id).where(TeamMember.user_id.in_(user_ids))
        session.execute(delete(Team).where(Team.id.in_(teams)))
        algos = select(Algorithm.id).where(Algorithm.owner_id.in_(user_ids))
        versions = select(AlgorithmVersion.id).where(AlgorithmVersion.algorithm_id.in_(algos))
        dvs = list(
            session.scalars(
                select(Evaluation.dataset_version_id).where(
                    Evaluation.algorithm_version_id.in_(versions)
                )
            )
        )
        phases = list(
            session.scalars(
                select(AlgorithmVersion.phase_id).where(AlgorithmVersion.id.in_(versions))
            )
        )
        session.execute(delete(Evaluation).where(Evaluation.algorithm_version_id.in_(versions)))
        session.execute(delete(AlgorithmVersion).where(AlgorithmVersion.id.in_(versions)))
        session.execute(delete(Algorithm).where(Algorithm.owner_id.in_(user_ids)))
        datasets = select(DatasetVersion.dataset_id).where(DatasetVersion.id.in_(dvs))
        dataset_ids = list(session.scalars(datasets))
        session.execute(delete(Recording).where(Recording.dataset_version_id.in_(dvs)))
        session.execute(delete(DatasetVersion).where(DatasetVersion.id.in_(dvs)))
        session.execute(delete(Dataset).where(Dataset.id.in_(dataset_ids)))
        session.execute(delete(Phase).where(Phase.id.in_([p for p in phases if p])))
        session.execute(delete(ApiToken).where(ApiToken.user_id.in_(user_ids)))
        session.execute(delete(User).where(User.id.in_(user_ids)))


def _submit(world: dict[str, int], phase_slug: str | None) -> Callable[[int], None]:
    def attempt(i: int) -> None:
        with session_scope() as session:
            user = session.get_one(User, world["user"])
            algo = session.get_one(Algorithm, world["algorithm"])
            algorithms.submit_version(
                session,
                algorithm=algo,
                user=user,
                version=f"race-{i}",
                image_reference=f"reg:5000/algo@sha256:{i + 1:064x}",
                phase=phase_slug,
            )

    return attempt


def _rerun(world: dict[str, int]) -> Callable[[int], None]:
    def attempt(_: int) -> None:
        with session_scope() as session:
            user = session.get_one(User, world["user"])
            evaluation = session.get_one(Evaluation, world["evaluation"])
            evaluations.rerun_evaluation(session, evaluation, created_by=user)

    return attempt


def _count_rows(world: dict[str, int]) -> tuple[int, int]:
    with session_scope() as session:
        versions = session.scalars(
            select(AlgorithmVersion).where(AlgorithmVersion.algorithm_id == world["algorithm"])
        ).all()
        reruns = session.scalars(
            select(Evaluation).where(Evaluation.created_by_id == world["user"])
        ).all()
        return len(versions), len(reruns)


# --- atomic: N concurrent requests against a quota of 1 -------------------------------------


@pytest.mark.postgres
def test_concurrent_submissions_against_a_phase_quota_of_one_accept_exactly_one(
    committed_pg: pytest.MonkeyPatch,
) -> None:
    committed_pg.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "100")
    get_settings.cache_clear()
    world = _seed(phase_quota=1, version_in_phase=False)  # nothing used in the phase yet
    with session_scope() as session:
        slug = session.get_one(Phase, world["phase"]).slug
    slow(committed_pg, algorithms, "parse_image_reference")

    accepted, refused, errors = race(THREADS, _submit(world, slug))

    assert errors == []
    assert accepted == 1
    assert len(refused) == THREADS - 1
    assert all(f"phase {slug!r}: you have used all 1 submissions" in r for r in refused)
    assert _count_rows(world)[0] == 2  # the seeded version and the one accepted


@pytest.mark.postgres
def test_concurrent_reruns_against_a_daily_held_out_limit_of_one_accept_exactly_one(
    committed_pg: pytest.MonkeyPatch,
) -> None:
    committed_pg.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    # The version is older than the window: the user has one held-out run left today.
    world = _seed(version_age=timedelta(days=2))
    slow(committed_pg, evaluations, "evaluation_queue")

    accepted, refused, errors = race(THREADS, _rerun(world))

    assert errors == []
    assert accepted == 1
    assert len(refused) == THREADS - 1
    assert all("held-out evaluations" in r and "all 1 " in r for r in refused)
    assert _count_rows(world)[1] == 1


@pytest.mark.postgres
def test_concurrent_submissions_against_a_daily_held_out_limit_accept_exactly_one(
    committed_pg: pytest.MonkeyPatch,
) -> None:
    committed_pg.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "2")
    get_settings.cache_clear()
    world = _seed()  # one of the two used by the seeded version
    slow(committed_pg, algorithms, "parse_image_reference")

    accepted, refused, errors = race(THREADS, _submit(world, None))

    assert errors == []
    assert accepted == 1
    assert all("held-out evaluations" in r for r in refused)


@pytest.mark.postgres
def test_concurrent_reruns_by_members_of_one_team_accept_exactly_one(
    committed_pg: pytest.MonkeyPatch,
) -> None:
    # Each member has their own held-out run left; the team has one: exactly one member
    # gets it, whichever accounts the requests come from (the team's row is locked too).
    committed_pg.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    world = _seed(version_age=timedelta(days=2))
    with session_scope() as session:
        team = Team(name=f"race-{f.n()}")
        team.members.append(TeamMember(user_id=world["user"], role=TeamRole.OWNER))
        members = [f.user(session) for _ in range(THREADS - 1)]
        _made.extend(m.id for m in members)
        team.members.extend(TeamMember(user_id=m.id) for m in members)
        session.add(team)
        session.flush()
        session.get_one(Algorithm, world["algorithm"]).team_id = team.id
        name, users = team.name, [world["user"], *(m.id for m in members)]
    slow(committed_pg, evaluations, "evaluation_queue")

    def attempt(i: int) -> None:
        with session_scope() as session:
            evaluation = session.get_one(Evaluation, world["evaluation"])
            member = session.get_one(User, users[i])
            evaluations.rerun_evaluation(session, evaluation, created_by=member)

    accepted, refused, errors = race(THREADS, attempt)

    assert errors == []
    assert accepted == 1
    assert len(refused) == THREADS - 1
    assert all(f"team {name!r} has used all 1 " in r for r in refused)
    with session_scope() as session:
        reruns = session.scalars(
            select(Evaluation).where(Evaluation.created_by_id.in_(users))
        ).all()
        assert [e.team_id is not None for e in reruns] == [True]


def test_concurrent_reruns_on_sqlite_accept_exactly_one(
    committed_sqlite: pytest.MonkeyPatch,
) -> None:
    committed_sqlite.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    world = _seed(version_age=timedelta(days=2))
    slow(committed_sqlite, evaluations, "evaluation_queue")

    accepted, refused, errors = race(THREADS, _rerun(world))

    assert errors == []
    assert accepted == 1
    assert len(refused) == THREADS - 1
    assert _count_rows(world)[1] == 1


# --- re-runs count, refusals are clear, admins are exempt, faults are given back -----------


def _held_out_world(db_session: Session) -> tuple[User, AlgorithmVersion, DatasetVersion]:
    owner = f.user(db_session)
    version = f.version(db_session, f.algorithm(db_session, owner))
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    f.recording(db_session, dv)
    return owner, version, dv


def test_reruns_count_against_the_daily_held_out_limit_and_the_refusal_names_it(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "3")
    get_settings.cache_clear()
    owner, version, dv = _held_out_world(db_session)  # the version: 1 of 3
    done = f.evaluation(db_session, version, dv)
    h = f.headers(db_session, owner)

    assert client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=h).status_code == 201
    assert client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=h).status_code == 201
    r = client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=h)

    assert r.status_code == 429
    body = r.json()
    assert body["error"] == "QuotaExceeded"
    assert "held-out evaluations" in body["detail"]
    assert "all 3 of the last 24 hours" in body["detail"]
    assert "UTC" in body["detail"]  # when the next one frees up
    # A requested full evaluation on held-out data is refused the same way.
    slug = db_session.get_one(Dataset, dv.dataset_id).slug
    body = {"algorithm_version_id": version.id, "dataset": slug, "version": dv.version}
    assert client.post("/api/v1/evaluations", headers=h, json=body).status_code == 429
    # So is a new version.
    r = client.post(
        f"/api/v1/algorithms/{version.algorithm_id}/versions",
        headers=h,
        json={"version": "next", "image_reference": "reg:5000/a@sha256:" + "c" * 64},
    )
    assert r.status_code == 429
    assert "held-out evaluations" in r.json()["detail"]


def test_rescores_on_held_out_data_count_against_the_daily_limit(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    # A re-score runs no container but asks the held-out annotations about the stored
    # detections with parameters the user picks: each is one more query, so it is charged.
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "3")
    get_settings.cache_clear()
    owner, version, dv = _held_out_world(db_session)  # the version: 1 of 3
    done = f.evaluation(db_session, version, dv)
    h = f.headers(db_session, owner)
    params = {"scoring_params": {"tolerance_start_s": 10}}

    for _ in range(2):
        r = client.post(f"/api/v1/evaluations/{done.id}/rescore", headers=h, json=params)
        assert r.status_code == 201, r.text
    r = client.post(f"/api/v1/evaluations/{done.id}/rescore", headers=h, json=params)
    assert r.status_code == 429
    assert "re-score" in r.json()["detail"]
    quota = client.get("/api/v1/users/me/quota", headers=h).json()
    assert quota["held_out_runs"]["remaining"] == 0
    # Admins are exempt.
    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    r = client.post(f"/api/v1/evaluations/{done.id}/rescore", headers=admin, json=params)
    assert r.status_code == 201, r.text


def test_public_sample_evaluations_and_admins_are_not_charged(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    owner, version, dv = _held_out_world(db_session)  # the version uses the only one
    sample = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE))
    f.recording(db_session, sample)
    on_sample = f.evaluation(db_session, version, sample)
    held = f.evaluation(db_session, version, dv)
    h = f.headers(db_session, owner)
    assert client.post(f"/api/v1/evaluations/{on_sample.id}/rerun", headers=h).status_code == 201
    assert client.post(f"/api/v1/evaluations/{held.id}/rerun", headers=h).status_code == 429

    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    for _ in range(3):
        assert client.post(f"/api/v1/evaluations/{held.id}/rerun", headers=admin).status_code == 201


def test_platform_faults_are_given_back_and_the_submitters_are_not(
    db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "10")
    get_settings.cache_clear()
    owner, version, dv = _held_out_world(db_session)
    sample = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.PUBLIC_SAMPLE))
    rec = f.recording(db_session, sample)
    # A rerun that failed (only platform faults fail an evaluation): given back.
    f.evaluation(db_session, version, dv, status=EvaluationStatus.FAILED, created_by_id=owner.id)
    f.evaluation(db_session, version, dv, status=EvaluationStatus.DONE, created_by_id=owner.id)
    # A version whose smoke test crashed (its image could not start): the submitter's, but it
    # never reached held-out data (issue 23.6): a submission of the day, no held-out slot.
    crashed = f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.REJECTED)
    smoke = f.evaluation(
        db_session, crashed, sample, status=EvaluationStatus.DONE, kind=EvaluationKind.SMOKE_TEST
    )
    f.run(db_session, smoke, rec, outcome=RunOutcome.CRASHED)
    # One whose smoke test failed through infrastructure faults only: given back.
    broken = f.version(db_session, f.algorithm(db_session, owner), status=VersionStatus.PENDING)
    smoke = f.evaluation(
        db_session, broken, sample, status=EvaluationStatus.FAILED, kind=EvaluationKind.SMOKE_TEST
    )
    f.run(db_session, smoke, rec, outcome=RunOutcome.INFRASTRUCTURE_ERROR)

    usage = quotas.held_out_usage(db_session, owner)

    # version + done re-run
    assert usage.used == 2
    assert usage.remaining == 8
    # The crashed one is a submission of the day (the infrastructure-failed one is not).
    assert quotas.submissions_usage(db_session, owner).used == 2


def test_phase_quota_covers_reruns(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    owner = f.user(db_session)
    phase = f.phase(db_session, slug="final-round", submission_quota=1)
    version = f.version(db_session, f.algorithm(db_session, owner), phase_id=phase.id)
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    f.recording(db_session, dv)
    done = f.evaluation(db_session, version, dv)

    r = client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=f.headers(db_session, owner))

    assert r.status_code == 429
    assert "phase 'final-round'" in r.json()["detail"]


def test_the_default_deployment_has_a_finite_daily_held_out_limit(
    settings_env: pytest.MonkeyPatch,
) -> None:
    settings_env.delenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", raising=False)
    limit = Settings(_env_file=None).held_out_runs_per_day  # type: ignore[call-arg]
    assert limit is not None
    assert 0 < limit <= 20
    text = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    assert f"# SZBENCH_HELD_OUT_RUNS_PER_DAY={limit}\n" in text
    # Empty lifts it, as .env.example says.
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "")
    assert Settings(_env_file=None).held_out_runs_per_day is None  # type: ignore[call-arg]


# --- shown to the user ------------------------------------------------------------------------


def test_quota_endpoint_shows_what_is_left_and_when_it_frees_up(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "4")
    get_settings.cache_clear()
    owner, version, dv = _held_out_world(db_session)
    phase = f.phase(db_session, slug="open-phase", submission_quota=3)
    f.version(db_session, f.algorithm(db_session, owner), phase_id=phase.id)
    done = f.evaluation(db_session, version, dv)
    h = f.headers(db_session, owner)
    assert client.post(f"/api/v1/evaluations/{done.id}/rerun", headers=h).status_code == 201

    r = client.get("/api/v1/users/me/quota", headers=h)

    assert r.status_code == 200, r.text
    body = r.json()
    assert body["exempt"] is False
    assert body["window_s"] == 86400
    held = body["held_out_runs"]
    assert (held["limit"], held["used"], held["remaining"]) == (4, 3, 1)
    frees = datetime.fromisoformat(held["resets_at"])
    first = db_session.get_one(AlgorithmVersion, version.id).created_at
    assert frees == (first if first.tzinfo else first.replace(tzinfo=UTC)) + timedelta(days=1)
    assert {"phase": "open-phase", "limit": 3, "used": 1, "remaining": 2}.items() <= {
        **next(p for p in body["phases"] if p["phase"] == "open-phase")
    }.items()
    # Anonymous callers have no quota to see.
    assert client.get("/api/v1/users/me/quota").status_code == 401

    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    body = client.get("/api/v1/users/me/quota", headers=admin).json()
    assert body["exempt"] is True
    assert body["held_out_runs"]["remaining"] is None


def test_submit_page_shows_the_remaining_quota(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "5")
    get_settings.cache_clear()
    owner, _, _ = _held_out_world(db_session)
    r = client.get("/submit", headers=f.headers(db_session, owner))
    assert r.status_code == 200, r.text
    assert "<strong>4 of 5</strong> left in the last 24 hours" in r.text
    assert "the next one frees up at" in r.text


def test_daily_submission_limit_counts_versions(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    settings_env.setenv("SZBENCH_SUBMISSIONS_PER_DAY", "2")
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "")
    get_settings.cache_clear()
    owner, version, _ = _held_out_world(db_session)  # 1 of 2
    h = f.headers(db_session, owner)
    url = f"/api/v1/algorithms/{version.algorithm_id}/versions"

    def submit(label: str) -> Any:
        body = {"version": label, "image_reference": "reg:5000/a@sha256:" + label * 64}
        return client.post(url, headers=h, json=body)

    assert submit("a").status_code == 201
    r = submit("b")
    assert r.status_code == 429
    assert "all 2 submissions of the last 24 hours" in r.json()["detail"]


def test_resets_at_is_when_one_more_use_becomes_available() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    times = [now - timedelta(hours=h) for h in (1, 5, 3, 20)]
    assert quotas._windowed(None, []) == quotas.Usage(limit=None, used=0)
    # Under the limit: when the oldest use leaves the window.
    assert quotas._windowed(6, times).resets_at == now - timedelta(hours=20) + quotas.DAY
    # At the limit: the same moment frees the next one.
    assert quotas._windowed(4, times).remaining == 0
    assert quotas._windowed(4, times).resets_at == now - timedelta(hours=20) + quotas.DAY
    # Over a lowered limit of 2: three uses must expire first (20, 5 and 3 h old).
    assert quotas._windowed(2, times).resets_at == now - timedelta(hours=3) + quotas.DAY
