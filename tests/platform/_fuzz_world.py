"""The seeded world of the schema fuzzer (test_schemathesis): objects, callers and checks.

Another user (the victim) owns a private algorithm with versions, a public one with a
version in an open phase and one in a hidden phase, evaluations on held-out data and a
smoke test on the public sample, a token and an upload session. The researcher who calls
owns a private algorithm with an evaluation on held-out data and an upload session, and a
version in a closed phase that discloses per-recording results on the held-out set it names,
evaluated on a second held-out dataset registered after the phase closed. The open phase
names the held-out set and releases by the Ladder (no closing date), so every evaluation on
that set, whatever its version's phase, gets the Ladder's figure: the researcher's version in
no phase (whose rounded sensitivity is marked), a renamed copy of its algorithm (a
background-only image), and a version of a team algorithm of a second account in the
researcher's team; each entry may show only the score its own evaluation earned (issue 28).
The held-out set has two subjects (mean and std of two figures are the figures). Every run on
held-out data carries unique markers (messages, admin log, exit code, reference counts, resources,
detections), as do the held-out annotations and EEG files, the exact dataset-level figures,
their ``*_std`` and the pooled counts of the stored reports: none of them may reach a
non-admin, owner included. The victim's private objects carry unique names that may reach
only the victim and admins. No non-admin may start held-out work in the closed phase.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import strategies as st
from schemathesis.core.transport import Response
from schemathesis.python.asgi import ASGIClient
from sqlalchemy import Connection
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from starlette.responses import Response as StarletteResponse

from szbench import db
from szbench.api.deps import get_session, get_side_session
from szbench.app import create_app
from szbench.auth import service as auth
from szbench.auth.cookies import set_session_cookie
from szbench.config import get_settings
from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.leaderboards import service as leaderboards
from szbench.leaderboards import statistics
from szbench.models import (
    DatasetKind,
    DatasetResult,
    Disclosure,
    EvaluationKind,
    Role,
    SubjectResult,
    Team,
    TeamMember,
    TeamRole,
    User,
    VersionStatus,
    Visibility,
)
from szbench.results import service as results
from szbench.uploads import service as uploads
from tests.platform import factories as f
from tests.worker._pipeline_factories import HEADER, Rec, make_prepared_dataset

# "unscoped" is an admin's token without the admin scope: every rule for non-admins applies.
CALLERS = ("anonymous", "researcher", "readonly", "unscoped", "admin")
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Operations anyone may call to get credentials: a 2xx from them is no write by the caller.
CREDENTIAL_OPERATIONS = frozenset({"/api/v1/auth/login", "/api/v1/auth/signup"})
ORIGIN = "http://testserver"  # the host schemathesis' ASGI client sends
MISSING_ID = 2_000_000_000
MISSING_UPLOAD = "0" * 32
EDF_SEED = 4242  # the held-out EDFs' header says "seed4242000", "seed4242001"
HELD_RECS = (
    Rec("sub-01", "run-00", 600, ((123.0, 45.0),)),
    Rec("sub-02", "run-00", 600, ((321.0, 54.0),)),
)
SAMPLE_RECS = (Rec("sub-90", "run-00", 600, ((200.0, 30.0),)),)
# Registered after the closed phase closed; its EDF headers say "seed4343000".
LATE_RECS = (Rec("sub-07", "run-00", 600, ((111.0, 22.0),)),)
LATE_SEED = EDF_SEED + 101

Owner = int | None  # the user who may see a value; None: anyone


@dataclass
class Pools:
    """Seeded values to steer each parameter name to, with the owner of each private one."""

    by_name: dict[str, list[tuple[Any, Owner]]] = field(default_factory=dict)
    # Path parameters that must agree (a run of that evaluation): whole tuples to draw.
    joint: dict[tuple[str, ...], list[tuple[Any, ...]]] = field(default_factory=dict)
    missing: dict[str, Any] = field(default_factory=dict)
    # Every seeded object with an owner, private or not: parameter name -> value -> owner.
    owner_of: dict[str, dict[Any, int]] = field(default_factory=dict)


@dataclass
class Facts:
    """What must not reach a caller: byte markers and values under known keys."""

    held_out_markers: list[bytes] = field(default_factory=list)
    private_markers: dict[int, list[bytes]] = field(default_factory=dict)
    held_values: dict[str, set[float]] = field(default_factory=dict)  # key -> values
    held_floats: set[float] = field(default_factory=set)
    private_floats: dict[int, set[float]] = field(default_factory=dict)
    private_evaluations: dict[int, int] = field(default_factory=dict)  # id -> owner
    held_recordings: set[int] = field(default_factory=set)
    # A closed phase's versions and their evaluations, and the held-out dataset slugs: no
    # non-admin may start held-out work of them.
    closed_versions: set[int] = field(default_factory=set)
    closed_evaluations: set[int] = field(default_factory=set)
    held_slugs: set[str] = field(default_factory=set)
    # Under the Ladder, the event_f1 an evaluation's rows may show: what it earned, or null.
    earned: dict[int, set[float | None]] = field(default_factory=dict)


@dataclass
class Steered:
    """The seeded private values a case names: (container, key, value, owner)."""

    private: list[tuple[str, str, Any, int]] = field(default_factory=list)


class CheckFailed(AssertionError):
    """A check failed on one answer; the message holds the request to repeat it."""


@dataclass
class World:
    conn: Connection
    app: FastAPI
    client: ASGIClient
    users: dict[str, int | None]
    headers: dict[str, dict[str, str]]
    pools: Pools
    facts: Facts
    uploads: dict[str, bytes]  # upload files as seeded, restored before each request
    session: Session | None = None

    # -- generation -----------------------------------------------------------------------

    def steer(self, case: Any, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        """Point some of ``case``'s ids and names at seeded objects (drawn: reproducible)."""
        path_params = case.path_parameters if case.path_parameters is not None else {}
        joint_drawn: set[str] = set()
        for names, tuples in self.pools.joint.items():
            if set(path_params) == set(names):
                choice = draw(st.sampled_from([*tuples, None]))
                if choice is not None:
                    path_params.update(zip(names, choice, strict=True))
                    joint_drawn.update(names)
                break
        for where, container in _containers(case).items():
            for key in sorted(container or {}):
                pool = self._pool(case.path, where, key)
                if not pool or (where == "path" and key in joint_drawn):
                    continue
                choice = draw(st.sampled_from([*range(len(pool)), None]))
                if choice is not None and container is not None:
                    container[key] = pool[choice][0]

    def steered(self, case: Any) -> Steered:
        """The seeded private values ``case`` names."""
        steered = Steered()
        for where, container in _containers(case).items():
            for key, value in (container or {}).items():
                for pooled, owner in self._pool(case.path, where, key):
                    if pooled == value and owner is not None:
                        steered.private.append((where, key, value, owner))
        return steered

    def _pool(self, path: str, where: str, key: str) -> list[tuple[Any, Owner]]:
        if key == "slug" or (key == "phase" and where != "path"):
            family = "phase" if path.startswith("/api/v1/phases") or key == "phase" else "dataset"
            return self.pools.by_name[f"{family}_slug"]
        if key == "dataset":
            return self.pools.by_name["dataset_slug"]
        if key == "dataset_version" or (
            key == "version" and path.startswith(("/api/v1/datasets", "/api/v1/leaderboards"))
        ):
            return self.pools.by_name["dataset_version"]
        return self.pools.by_name.get(key, [])

    # -- exchange -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _request_scope(self) -> Iterator[None]:
        """A savepoint rolled back after the request, so every request sees the seed."""
        savepoint = self.conn.begin_nested()
        self.session = Session(
            bind=self.conn, join_transaction_mode="create_savepoint", expire_on_commit=False
        )
        sessions = uploads.sessions_dir()
        for name, content in self.uploads.items():
            (sessions / name).write_bytes(content)
        statistics.clear_cache()
        leaderboards.clear_cache()
        results.clear_cache()
        self.client.cookies.clear()
        try:
            yield
        finally:
            self.session.close()
            self.session = None
            savepoint.rollback()

    def send(self, case: Any, headers: dict[str, str]) -> Response:
        with self._request_scope():
            return case.call(session=self.client, headers=headers)

    def exchange(
        self,
        case: Any,
        caller: str,
        *,
        schema_checks: list[Any],
        raises: Callable[[str, str], bool] = lambda check, what: True,
        report: str | None = None,
    ) -> None:
        """Send ``case`` as ``caller`` and check the answer; a failure raises
        :class:`CheckFailed` when ``raises(check, what)`` says so, or is appended to the
        file ``report`` when one is given."""
        headers = dict(self.headers[caller])

        def fail(check: str, what: str, sent: dict[str, str] = headers) -> None:
            if not raises(check, what):
                return
            curl = case.as_curl_command(headers=sent)
            message = (
                f"{case.method} {case.path} as {caller}, check {check!r}: {what}\n"
                f"Reproduce (as {caller}, on the seed of tests/platform/_fuzz_world.py):\n"
                f"  {curl}"
            )
            if report:
                with open(report, "a", encoding="utf-8") as fh:
                    fh.write(message.replace("\n", " | ") + "\n")
                return
            raise CheckFailed(message)

        if caller == "researcher" and case.method in UNSAFE:
            forged = {**headers, "Origin": "null"}
            response = self.send(case, forged)
            if response.status_code < 300:
                fail("csrf", f"a cookie write with Origin: null got {response.status_code}", forged)

        response = self.send(case, headers)
        status = response.status_code
        text = (response.content or b"")[:500].decode("utf-8", "replace")
        if status >= 500 and status != 503:
            fail("server_error", f"{status}: {text}")
        if status >= 400 and case.path.startswith("/api/v1"):
            try:
                body = response.json()
            except ValueError:
                body = None
            if not (isinstance(body, dict) and set(body) == {"error", "detail"}):
                fail("envelope", f"{status} without the error envelope: {text}")
        sniff = response.headers.get("x-content-type-options") or [""]
        if sniff[0].lower() != "nosniff":
            # A download a browser sniffed as HTML would run in the platform's origin.
            fail("nosniff", f"{status} without X-Content-Type-Options: nosniff")
        if schema_checks:
            try:
                case.validate_response(response, checks=schema_checks, headers=headers)
            except Exception as exc:  # schemathesis' FailureGroup: the failures and a curl
                fail("schema", str(exc))
        security = case.operation.definition.raw.get("security")
        if caller == "anonymous" and status < 300 and security and {} not in security:
            # Clients and the docs page read from the document who may call without a token.
            fail("openapi_security", f"{status} without a token, but the document asks one")
        if case.path == "/api/v1/users/{user_id}" and case.method == "PATCH" and status < 300:
            body = case.body if isinstance(case.body, dict) else {}
            demoted = body.get("role") not in (None, "admin") or body.get("is_active") is False
            if case.path_parameters.get("user_id") == self.users["admin"] and demoted:
                fail("last_admin", f"the only active admin demoted or deactivated: {status}")
        if caller == "admin":
            return
        user_id = self.users[caller]
        for what in self.leaks(user_id, response):
            fail("leak", what)
        if (
            caller in ("anonymous", "readonly")
            and case.method in UNSAFE
            and case.path not in CREDENTIAL_OPERATIONS
            and status < 300
        ):
            fail("write_scope", f"a write without the write scope got {status}")
        if case.method == "POST" and status < 300:
            for what in self.closed_work(case):
                fail("closed_phase_work", what)
        if case.method in UNSAFE and status < 300:
            for container in _containers(case).values():
                for key, value in (container or {}).items():
                    if not isinstance(value, int | str):
                        continue  # a generated list or object names no seeded object
                    owner = self.pools.owner_of.get(key, {}).get(value)
                    if owner is not None and owner != user_id:
                        fail("foreign_write", f"{key}={value} of user {owner}: {status}")
        others = [p for p in self.steered(case).private if p[3] != user_id]
        if others:
            self._oracle(case, headers, response, others, fail)

    def _oracle(
        self,
        case: Any,
        headers: dict[str, str],
        response: Response,
        others: list[tuple[str, str, Any, int]],
        fail: Callable[[str, str], None],
    ) -> None:
        """Someone else's private object must answer as one that does not exist."""
        containers = _containers(case)
        saved = [(where, key, value) for where, key, value, _ in others]
        for where, key, _ in saved:
            containers[where][key] = self.pools.missing[key]  # type: ignore[index]
        try:
            absent = self.send(case, headers)
        finally:
            for where, key, value in saved:
                containers[where][key] = value  # type: ignore[index]
        if _answer(response) != _answer(absent):
            named = ", ".join(f"{k}={v} (user {o})" for _, k, v, o in others)
            fail(
                "oracle",
                f"{named} answers {_answer(response)}, a missing one {_answer(absent)}",
            )

    def closed_work(self, case: Any) -> list[str]:
        """What held-out work of a closed phase ``case`` started (it got a 2xx)."""
        facts = self.facts
        body = case.body if isinstance(case.body, dict) else {}
        if case.path == "/api/v1/evaluations":
            version, slug = body.get("algorithm_version_id"), body.get("dataset")
            if version in facts.closed_versions and slug in facts.held_slugs:
                return [f"a held-out evaluation of version {version} of a closed phase"]
        if case.path.endswith(("/rerun", "/rescore")):
            evaluation = (case.path_parameters or {}).get("evaluation_id")
            if evaluation in facts.closed_evaluations:
                return [f"a re-run or re-score of evaluation {evaluation} of a closed phase"]
        return []

    # -- what must not reach a caller -----------------------------------------------------

    def leaks(self, user_id: int | None, response: Response) -> list[str]:
        """What ``response`` tells user ``user_id`` (None: anonymous) that it must not."""
        facts = self.facts
        body = response.content or b""
        found = [f"held-out fact {m!r}" for m in facts.held_out_markers if m in body]
        for owner, markers in facts.private_markers.items():
            if owner != user_id:
                found += [f"private object of user {owner}: {m!r}" for m in markers if m in body]
        for row in _rows(response):
            found += self._row_leaks(user_id, row)
        return found

    def _row_leaks(self, user_id: int | None, row: dict[str, Any]) -> list[str]:
        facts = self.facts
        found = []
        for key, value in row.items():
            number = _number(value)
            if number is None:
                continue
            if number in facts.held_values.get(key, ()):
                found.append(f"held-out {key}={value}")
            elif number in facts.held_floats:
                found.append(f"held-out per-subject figure {key}={value}")
            for owner, floats in facts.private_floats.items():
                if owner != user_id and number in floats:
                    found.append(f"unpublished result of user {owner}: {key}={value}")
        evaluation = row.get("evaluation_id")
        if evaluation is None and {"id", "kind", "status"} <= row.keys():
            evaluation = row["id"]
        owner = facts.private_evaluations.get(evaluation) if isinstance(evaluation, int) else None
        if owner is not None and owner != user_id:
            found.append(f"evaluation {evaluation} of user {owner} (not visible to others)")
        if "outcome" in row and row.get("recording_id") in facts.held_recordings:
            found.append(f"outcome of held-out recording {row['recording_id']}: {row['outcome']}")
        allowed = facts.earned.get(evaluation) if isinstance(evaluation, int) else None
        if allowed is not None and "event_f1" in row and _number(row["event_f1"]) not in allowed:
            found.append(
                f"evaluation {evaluation} shows event_f1={row['event_f1']} it did not earn"
            )
        return found


def _containers(case: Any) -> dict[str, dict[str, Any] | None]:
    return {
        "path": case.path_parameters,
        "query": case.query,
        "body": case.body if isinstance(case.body, dict) else None,
    }


def _answer(response: Response) -> tuple[int, str]:
    """Status and error, with ids made alike: what tells an object from a missing one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "error" not in body:
        return response.status_code, ""
    detail = re.sub(r"[0-9a-f]{32}", "ID", str(body.get("detail", "")))
    return response.status_code, f"{body['error']}: {re.sub(r'[0-9]+', 'N', detail)}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _rows(response: Response) -> Iterator[dict[str, Any]]:
    """Every JSON object in the answer, or every row of a CSV/TSV answer."""
    media = response.headers.get("content-type", [""])
    media_type = (media[0] if isinstance(media, list) else media).split(";")[0].strip()
    if media_type.endswith("json"):
        try:
            yield from _objects(response.json())
        except ValueError:
            return
    elif media_type in ("text/csv", "text/tab-separated-values"):
        delimiter = "\t" if media_type.endswith("values") else ","
        text = (response.content or b"").decode("utf-8", "replace")
        yield from csv.DictReader(io.StringIO(text), delimiter=delimiter)


def _objects(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from _objects(item)


# -- the seed -----------------------------------------------------------------------------


@contextlib.contextmanager
def open_world(engine: Engine, tmp: Path) -> Iterator[World]:
    """The app on ``engine`` with the seed in a transaction rolled back at the end."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SZBENCH_DATA_DIR", str(tmp / "data"))
        for var in ("SZBENCH_DATABASE_URL", "SZBENCH_BROKER_URL"):
            env.delenv(var, raising=False)
        # As tests/platform/conftest.py: cheap hashes.
        env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
        get_settings.cache_clear()
        db.reset_engine()
        conn = engine.connect()
        outer = conn.begin()
        try:
            world = _seed(conn, tmp)
            yield world
        finally:
            outer.rollback()
            conn.close()
            get_settings.cache_clear()
            db.reset_engine()


def _seed(conn: Connection, tmp: Path) -> World:
    session = Session(bind=conn, join_transaction_mode="create_savepoint", expire_on_commit=False)
    # A fixed tag (everything is rolled back): names in failure messages repeat between runs.
    mark = "zq7f"
    facts = Facts()

    admin = f.user(session, Role.ADMIN, email=f"fuzz-admin-{mark}@example.org")
    researcher = f.user(session, email=f"fuzz-researcher-{mark}@example.org")
    victim = f.user(session, email=f"fuzz-victim-{mark}@example.org")
    private: dict[int, list[bytes]] = {admin.id: [], researcher.id: [], victim.id: []}

    admin_token, admin_secret = f.token(session, admin)
    _, unscoped_secret = f.token(session, admin, ["read", "write"])
    read_token, read_secret = f.token(session, researcher, ["read"])
    cookie_token, cookie_secret = f.token(session, researcher)
    victim_token, _ = auth.create_token(session, victim, name=f"vtoken-{mark}")
    private[victim.id] += [f"vtoken-{mark}".encode(), victim_token.prefix.encode()]
    private[victim.id].append(victim.email.encode())

    open_phase = f.phase(session, slug=f"fuzz-open-{mark}")
    hidden_phase = f.phase(session, slug=f"fuzz-hidden-{mark}", hidden=True)
    # Over: it discloses per-recording results of the held-out set it names (below).
    closed_phase = f.phase(
        session,
        slug=f"fuzz-closed-{mark}",
        is_open=False,
        closes_at=datetime.now(UTC) - timedelta(days=1),
        disclosure=Disclosure.RECORDING,
    )

    held_dir = make_prepared_dataset(tmp / "held", HELD_RECS, seed=EDF_SEED)
    sample_dir = make_prepared_dataset(tmp / "sample", SAMPLE_RECS, seed=1)
    held = create_dataset(session, slug=f"fuzz-held-{mark}", kind=DatasetKind.HELD_OUT)
    sample = create_dataset(
        session, slug=f"fuzz-sample-{mark}", kind=DatasetKind.PUBLIC_SAMPLE, confirm_public=True
    )
    held_dv = register_dataset_version(session, held, version="1", prepared_path=held_dir)
    sample_dv = register_dataset_version(session, sample, version="1", prepared_path=sample_dir)
    closed_phase.dataset_versions = [held_dv]
    # Continuous benchmarking on the same data: the Ladder, for every version evaluated there.
    open_phase.dataset_versions = [held_dv]
    late_dir = make_prepared_dataset(tmp / "late", LATE_RECS, seed=LATE_SEED)
    late = create_dataset(session, slug=f"fuzz-late-{mark}", kind=DatasetKind.HELD_OUT)
    late_dv = register_dataset_version(session, late, version="1", prepared_path=late_dir)
    session.flush()
    held_recs = list(held_dv.recordings)
    late_recs = list(late_dv.recordings)
    facts.held_recordings = {r.id for r in [*held_recs, *late_recs]}
    facts.held_slugs = {held.slug, late.slug}
    for seed, recs in ((EDF_SEED, HELD_RECS), (LATE_SEED, LATE_RECS)):
        for i, rec in enumerate(recs):
            facts.held_out_markers.append(f"seed{seed * 1000 + i}".encode())
            for onset, duration in rec.seizures:
                facts.held_out_markers.append(f"{onset:.1f}\t{duration:.1f}\tsz".encode())

    def algorithm(owner: User, visibility: Visibility, label: str) -> Any:
        row = f.algorithm(
            session,
            owner,
            name=f"{label}-{mark}",
            title=f"{label} title {mark}",
            description=f"{label} description {mark}",
            visibility=visibility,
        )
        if visibility == Visibility.PRIVATE:
            private[owner.id] += [f"{label}-{mark}".encode(), f"{label} title {mark}".encode()]
        return row

    def version(algo: Any, label: str, **kw: Any) -> Any:
        row = f.version(session, algo, version=f"{label}-{mark}", **kw)
        if algo.visibility == Visibility.PRIVATE:
            private[algo.owner_id] += [f"{label}-{mark}".encode(), row.image_digest.encode()]
        return row

    victim_private = algorithm(victim, Visibility.PRIVATE, "vpriv")
    victim_public = algorithm(victim, Visibility.PUBLIC, "vpub")
    mine = algorithm(researcher, Visibility.PRIVATE, "rpriv")
    vp1 = version(victim_private, "vp1", phase_id=open_phase.id)
    vp2 = version(victim_private, "vp2", status=VersionStatus.PENDING)
    vpub = version(victim_public, "vpub1", phase_id=open_phase.id)
    vhid = version(victim_public, "vhid1", phase_id=hidden_phase.id)
    rp1 = version(mine, "rp1", phase_id=open_phase.id)
    rc1 = version(mine, "rc1", phase_id=closed_phase.id)
    facts.closed_versions = {rc1.id}
    # The attacker's other ways onto the Ladder's data: a version in no phase, a renamed
    # copy of its algorithm, and a second account of its team with a team algorithm.
    rn1 = version(mine, "rn1")
    copy = algorithm(researcher, Visibility.PRIVATE, "rcopy")
    rk1 = version(copy, "rk1", phase_id=open_phase.id)
    partner = f.user(session, name=f"partner-{mark}", email=f"partner-{mark}@example.org")
    team = Team(name=f"team-{mark}")
    team.members += [
        TeamMember(user_id=researcher.id, role=TeamRole.OWNER),
        TeamMember(user_id=partner.id, role=TeamRole.MEMBER),
    ]
    session.add(team)
    session.flush()
    mine.team_id = copy.team_id = team.id
    for row in (rp1, rc1, rn1, rk1):
        row.team_id = team.id
    shared = algorithm(partner, Visibility.PUBLIC, "pshared")
    shared.team_id = team.id
    ps1 = version(shared, "ps1", team_id=team.id)

    counter = iter(range(1, 1000))
    held_values: dict[str, set[float]] = {}
    runs: list[tuple[int, int, Owner]] = []  # (evaluation, run, owner when private)
    run_owner: dict[int, int] = {}

    def held_evaluation(
        av: Any, owner: User, *, private_to_owner: bool, dv: Any = held_dv, **kw: Any
    ) -> Any:
        ev = f.evaluation(session, av, dv, **kw)
        if private_to_owner:
            facts.private_evaluations[ev.id] = owner.id
        total_wall_time_s = 0.0
        for rec in dv.recordings:
            i = next(counter)
            values = {
                "exit_code": 100 + i,
                "event_ref_true": 7000 + i,
                "sample_ref_true": 8000 + i,
                "peak_memory_bytes": 987_650_000 + i,
                "wall_time_s": 4321.0 + i / 8,
            }
            for key, value in values.items():
                held_values.setdefault(key, set()).add(float(value))
            message, log, detections = (
                f"{what}-{mark}-{i}" for what in ("LEAKMSG", "LEAKLOG", "LEAKDET")
            )
            facts.held_out_markers += [message.encode(), log.encode(), detections.encode()]
            run = f.run(
                session,
                ev,
                rec,
                submitter_message=message,
                admin_log=log,
                detections_tsv=HEADER
                + f"10.0\t5.0\tsz\tn/a\t{detections}\t2020-01-01 00:00:00\t600.0\n",
                event_tp=0,
                event_fp=1,
                event_fn=values["event_ref_true"],
                sample_tp=0,
                sample_fp=5,
                sample_fn=values["sample_ref_true"],
                num_samples=600,
                exit_code=values["exit_code"],
                event_ref_true=values["event_ref_true"],
                sample_ref_true=values["sample_ref_true"],
                peak_memory_bytes=values["peak_memory_bytes"],
                wall_time_s=values["wall_time_s"],
            )
            runs.append((ev.id, run.id, owner.id if private_to_owner else None))
            run_owner[run.id] = owner.id
            total_wall_time_s += values["wall_time_s"]
            # Per-subject figures: one recording per subject, so its counts are the run's.
            figure = 0.1234567 + i / 1e6
            facts.held_floats.add(figure)
            session.add(
                SubjectResult(
                    evaluation_id=ev.id,
                    subject=rec.subject,
                    recordings=1,
                    counts={k: v for k, v in values.items() if k.endswith("ref_true")},
                    event_f1=figure,
                    event_sensitivity=figure,
                )
            )
        # The provenance's sum is as much the container's choice as each run's time.
        held_values["wall_time_s"].add(total_wall_time_s)
        return ev

    e1 = held_evaluation(vp1, victim, private_to_owner=True)
    e2 = held_evaluation(vpub, victim, private_to_owner=False)
    e3 = held_evaluation(vhid, victim, private_to_owner=True, published=False)
    er = held_evaluation(rp1, researcher, private_to_owner=True)
    # Continuous benchmarking ran the closed phase's version on the data registered later:
    # the phase's per-recording level does not apply there.
    el = held_evaluation(rc1, researcher, private_to_owner=True, dv=late_dv)
    facts.closed_evaluations = {el.id}
    en = held_evaluation(rn1, researcher, private_to_owner=True)
    ek = held_evaluation(rk1, researcher, private_to_owner=True)
    ep = held_evaluation(ps1, partner, private_to_owner=False)
    unpublished = 0.8642097531
    facts.private_floats[victim.id] = {unpublished}
    # In finishing order, each owner's (and the team's) Ladder on the held-out set: the
    # victim's e1 earns 0.51 and e2 (0.51231) nothing; e3 earns 0.86 (unpublished); the
    # researcher's er earns 0.51, and the version in no phase, the renamed copy (exact 0.0,
    # background only) and the partner's team algorithm nothing.
    facts.earned = {
        e1.id: {None, 0.51},
        e2.id: {None},
        e3.id: {None, 0.86},
        er.id: {None, 0.51},
        en.id: {None},
        ek.id: {None},
        ep.id: {None},
    }
    for i, ev in enumerate((e1, e2, e3, er, el, en, ek, ep)):
        ev.finished_at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
        # Exact figures, their std (with two subjects: the subjects' figures) and the
        # pooled counts: all marked, none may reach a non-admin at the aggregate level.
        exact, std, pooled = 0.5123 + i / 1e5 + 1e-7, 0.0612 + i / 1e5 + 1e-7, 9100 + 10 * i
        facts.held_floats |= {exact, std}
        for key in ("tp", "fp", "fn", "ref_true"):
            held_values.setdefault(key, set()).add(float(pooled))
            pooled += 1
        report = {
            "event_results": {"f1": exact, "f1_std": std, "sensitivity_std": std},
            "sample_results": {"f1": exact, "f1_std": std},
            "pooled_counts": {
                "event": {"tp": pooled - 4, "fp": pooled - 3},
                "sample": {"fn": pooled - 2, "ref_true": pooled - 1},
            },
            "subjects": 2,
        }
        f1 = {e3: unpublished, ek: 0.0, en: 0.3012345, ep: 0.5151234}.get(ev, exact)
        # Rounded, the version in no phase would show 0.78 (issue 28.1): marked.
        sensitivity = 0.7771234 if ev is en else None
        session.add(
            DatasetResult(
                evaluation_id=ev.id,
                subjects=2,
                recordings=2,
                event_f1=f1,
                event_sensitivity=sensitivity,
                report=report,
            )
        )
    held_values.setdefault("event_sensitivity", set()).update({0.7771234, 0.78})
    smoke = f.evaluation(session, vpub, sample_dv, kind=EvaluationKind.SMOKE_TEST)
    facts.private_evaluations[smoke.id] = victim.id
    smoke_run = f.run(session, smoke, sample_dv.recordings[0], exit_code=0)
    runs.append((smoke.id, smoke_run.id, victim.id))
    run_owner[smoke_run.id] = victim.id
    session.flush()

    facts.held_values = held_values
    facts.private_markers = private

    # Upload sessions keep their bytes on disk, outside the transaction: those files are
    # written back before each request.
    get_settings.cache_clear()
    victim_upload = uploads.create_upload(
        session, victim, filename=f"vupload-{mark}.tar", size_bytes=10
    )
    my_upload = uploads.create_upload(
        session, researcher, filename=f"rupload-{mark}.tar", size_bytes=10
    )
    private[victim.id].append(f"vupload-{mark}".encode())
    private[researcher.id].append(f"rupload-{mark}".encode())
    kept = {p.name: p.read_bytes() for p in uploads.sessions_dir().iterdir() if p.is_file()}
    session.commit()

    pools = Pools(
        by_name={
            "algorithm_id": [
                (victim_private.id, victim.id),
                (victim_public.id, None),
                (mine.id, researcher.id),
                (copy.id, researcher.id),
                (shared.id, None),
                (MISSING_ID, None),
            ],
            "version_id": [
                (vp1.id, victim.id),
                (vp2.id, victim.id),
                (vpub.id, None),
                (vhid.id, None),
                (rp1.id, researcher.id),
                (rc1.id, researcher.id),
                (rn1.id, researcher.id),
                (rk1.id, researcher.id),
                (ps1.id, None),
                (MISSING_ID, None),
            ],
            "evaluation_id": [
                (e1.id, victim.id),
                (e2.id, None),
                (e3.id, None),
                (er.id, researcher.id),
                (el.id, researcher.id),
                (en.id, researcher.id),
                (ek.id, researcher.id),
                (ep.id, None),
                (smoke.id, victim.id),
                (MISSING_ID, None),
            ],
            "run_id": [(run, owner) for _, run, owner in runs] + [(MISSING_ID, None)],
            "user_id": [
                (admin.id, None),
                (researcher.id, None),
                (victim.id, None),
                (MISSING_ID, None),
            ],
            "token_id": [
                (victim_token.id, victim.id),
                (read_token.id, researcher.id),
                (cookie_token.id, researcher.id),
                (admin_token.id, admin.id),
                (MISSING_ID, None),
            ],
            "upload_id": [
                (victim_upload.id, victim.id),
                (my_upload.id, researcher.id),
                (MISSING_UPLOAD, None),
            ],
            "dataset_slug": [
                (held.slug, None),
                (sample.slug, None),
                (late.slug, None),
                ("no-such-dataset", None),
            ],
            "phase_slug": [
                (open_phase.slug, None),
                (hidden_phase.slug, None),
                (closed_phase.slug, None),
                ("no-such-phase", None),
            ],
            "dataset_version": [("1", None), ("9", None)],
            # Demoting or deactivating the only admin must be refused: worth drawing often.
            "role": [("researcher", None), ("admin", None)],
            "is_active": [(False, None), (True, None)],
            "key": [(r.key, None) for r in [*held_recs, *late_recs, *sample_dv.recordings]]
            + [("sub-99_ses-01_task-szMonitoring_run-00", None)],
        },
        joint={
            ("algorithm_id", "version_id"): [
                (victim_private.id, vp1.id),
                (victim_private.id, vp2.id),
                (victim_public.id, vpub.id),
                (victim_public.id, vhid.id),
                (mine.id, rp1.id),
                (mine.id, rc1.id),
                (mine.id, rn1.id),
                (copy.id, rk1.id),
                (shared.id, ps1.id),
            ],
            ("evaluation_id", "run_id"): [(ev, run) for ev, run, _ in runs],
            ("slug", "version", "key"): [
                (ds.slug, "1", r.key)
                for ds, dv in ((held, held_dv), (sample, sample_dv), (late, late_dv))
                for r in dv.recordings
            ],
        },
        missing={
            "algorithm_id": MISSING_ID,
            "version_id": MISSING_ID,
            "algorithm_version_id": MISSING_ID,
            "evaluation_id": MISSING_ID,
            "run_id": MISSING_ID,
            "token_id": MISSING_ID,
            "upload_id": MISSING_UPLOAD,
        },
    )
    pools.by_name["algorithm_version_id"] = pools.by_name["version_id"]
    versions = {v.id: v.algorithm.owner_id for v in (vp1, vp2, vpub, vhid, rp1, rc1, rn1, rk1, ps1)}
    pools.owner_of = {
        "algorithm_id": {
            a.id: a.owner_id for a in (victim_private, victim_public, mine, copy, shared)
        },
        "version_id": versions,
        "algorithm_version_id": versions,
        "evaluation_id": {
            **{ev.id: victim.id for ev in (e1, e2, e3, smoke)},
            **{ev.id: researcher.id for ev in (er, el, en, ek)},
            ep.id: partner.id,
        },
        "run_id": run_owner,
        "token_id": {
            victim_token.id: victim.id,
            read_token.id: researcher.id,
            cookie_token.id: researcher.id,
            admin_token.id: admin.id,
        },
        "upload_id": {victim_upload.id: victim.id, my_upload.id: researcher.id},
    }

    cookie = StarletteResponse()
    set_session_cookie(cookie, cookie_secret)
    cookie_value = cookie.headers["set-cookie"].split(";", 1)[0]
    headers = {
        "anonymous": {},
        "researcher": {"Cookie": cookie_value, "Origin": ORIGIN},
        "readonly": {"Authorization": f"Bearer {read_secret}"},
        "unscoped": {"Authorization": f"Bearer {unscoped_secret}"},
        "admin": {"Authorization": f"Bearer {admin_secret}"},
    }
    users = {
        "anonymous": None,
        "researcher": researcher.id,
        "readonly": researcher.id,
        "unscoped": admin.id,
        "admin": admin.id,
    }
    session.close()

    app = create_app()
    world = World(
        conn=conn,
        app=app,
        client=ASGIClient(app),
        users=users,
        headers=headers,
        pools=pools,
        facts=facts,
        uploads=kept,
    )

    def session_override() -> Iterator[Session]:
        # One session per request (as tests/platform/conftest.py), inside its savepoint.
        active = world.session
        assert active is not None
        active.commit()
        try:
            yield active
            active.commit()
        except BaseException:
            active.rollback()
            raise

    app.dependency_overrides[get_session] = session_override
    app.dependency_overrides[get_side_session] = session_override
    return world
