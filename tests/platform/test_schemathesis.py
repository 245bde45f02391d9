"""Requests generated from the OpenAPI schema, sent as five callers to a seeded database.

Every operation gets ``EXAMPLES`` generated requests; each is sent as an anonymous caller,
a researcher signed in with the web session cookie, a read-only token of that researcher,
an admin's token without the admin scope ("unscoped") and an admin token with it, to the
real app on PostgreSQL. The database holds objects of another user and of the researcher
(:mod:`tests.platform._fuzz_world`): private algorithms with versions, evaluations on
held-out data whose runs carry unique markers, a hidden phase, upload sessions. Generated
ids and names are steered towards those objects, since random values would almost never
name one. Each request runs in a savepoint that is rolled back: every one sees the seed.

Every answer is checked against the schema (status code, content type, headers, body), must
not be a server error (503 is the documented answer when a part is missing) and must use
the error envelope; then the checks of ``World.exchange``: no held-out fact reaches a
non-admin, no private object reaches anyone but its owner and admins, another user's
private object answers as a missing one does, a cookie write with ``Origin: null`` and a
write without the write scope are refused.

A failure names the operation, the caller and the check, and prints a curl command that
repeats the request (the credential is filtered: the caller says which one it was).
``FUZZ_REPORT=file`` lists every failure of a run in that file instead of stopping at the
first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy.engine import Engine

from szbench.app import create_app
from tests.platform._fuzz_world import CALLERS, World, open_world

pytestmark = pytest.mark.slow

JSON, CSV = "application/json", "text/csv"

# Each example is sent five times (once per caller), plus replays for the oracle and
# CSRF checks: 10 examples keep the module within one to three minutes on two shared cores.
EXAMPLES = 10

# The schema is read at collection time from an app built with the default settings; the
# requests go to the app the world builds with the test settings (same routes).
schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", create_app())
# The coverage phase sends dozens of fixed boundary cases per operation (times five callers):
# over the time budget. The schema's own examples and the fuzzing phase remain.
schema.config.phases.update(phases=["examples", "fuzzing"])
# Each caller brings its own credential: a generated bearer header would replace the
# researcher's cookie (the header wins) and make "anonymous" a caller with a bad token.
schema.config.generation.update(with_security_parameters=False)

SCHEMA_CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]

FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: a failing example is printed as sent (with its curl command), and
    # shrinking a request that crosses five callers would cost minutes per failure.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


# The world of the running module; the steering hook reads it at draw time (hooks are
# registered at import, the world exists only once the fixture has run).
_CURRENT: list[World] = []


@pytest.fixture(scope="module")
def world(pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with open_world(pg_engine, tmp_path_factory.mktemp("fuzz")) as opened:
        _CURRENT.append(opened)
        try:
            yield opened
        finally:
            _CURRENT.remove(opened)


@schema.hook
def flatmap_case(context: schemathesis.HookContext, case: Any) -> st.SearchStrategy[Any]:
    """Steer generated ids and names towards the seeded objects, as drawn choices."""
    if not _CURRENT:
        return st.just(case)
    world = _CURRENT[-1]

    @st.composite
    def steered(draw: st.DrawFn) -> Any:
        world.steer(case, draw)
        return case

    return steered()


@schema.parametrize()
@FUZZ_SETTINGS
def test_fuzz(case, world: World) -> None:  # type: ignore[no-untyped-def]
    """Each generated request, as each caller, passes every check."""
    for caller in CALLERS:
        world.exchange(
            case,
            caller,
            schema_checks=SCHEMA_CHECKS,
            # Lists every failure of a run in that file instead of stopping at the first.
            report=os.environ.get("FUZZ_REPORT"),
        )


def _answer(body: bytes, media_type: str) -> Response:
    request = requests.Request("GET", "http://testserver/api/v1/x").prepare()
    return Response(200, {"content-type": [media_type]}, body, request, 0.0, True)


def test_the_checks_see_each_kind_of_leak(world: World) -> None:
    """The leak checks can fail: each kind of fact, planted in an answer, is reported to
    whoever may not see it, and only to them."""
    facts = world.facts
    researcher, admin = world.users["researcher"], world.users["admin"]
    victim = next(u for u in facts.private_markers if u not in (researcher, admin))
    exit_code = int(min(facts.held_values["exit_code"]))
    ref_true = int(min(facts.held_values["event_ref_true"]))
    evaluation = next(e for e, owner in facts.private_evaluations.items() if owner == victim)
    planted = {
        "held-out marker": _answer(b"x" + facts.held_out_markers[0] + b"x", "text/plain"),
        "exit code": _answer(json.dumps({"items": [{"exit_code": exit_code}]}).encode(), JSON),
        "reference count (CSV)": _answer(f"id,event_ref_true\n1,{ref_true}\n".encode(), CSV),
        "per-subject figure": _answer(
            json.dumps({"event_f1": min(facts.held_floats)}).encode(), JSON
        ),
        # Issue 28: a rounded figure of a version in no phase on the Ladder's data, and an
        # entry showing a Ladder score another evaluation earned.
        "rounded figure off the Ladder": _answer(
            json.dumps({"event_sensitivity": 0.78}).encode(), JSON
        ),
        "figure not earned": _answer(
            json.dumps(
                {"items": [{"evaluation_id": e, "event_f1": 0.51} for e in facts.earned]}
            ).encode(),
            JSON,
        ),
    }
    for kind, response in planted.items():
        assert world.leaks(researcher, response), kind
        assert world.leaks(victim, response), f"{kind}: held-out facts reach no owner either"
    private = {
        "name": _answer(facts.private_markers[victim][0], "text/plain"),
        "evaluation": _answer(json.dumps({"evaluation_id": evaluation}).encode(), JSON),
        "unpublished figure": _answer(
            json.dumps({"event_f1": min(facts.private_floats[victim])}).encode(), JSON
        ),
    }
    for kind, response in private.items():
        assert world.leaks(researcher, response), kind
        assert world.leaks(None, response), kind
        assert not world.leaks(victim, response), f"{kind}: its owner may see it"
    assert not world.leaks(None, _answer(b'{"items": [], "total": 0}', JSON))
    # Held-out work of a closed phase's version is seen, on held-out data only.
    version, evaluation = min(facts.closed_versions), min(facts.closed_evaluations)
    for slug in facts.held_slugs:
        body = {"algorithm_version_id": version, "dataset": slug}
        assert world.closed_work(SimpleNamespace(path="/api/v1/evaluations", body=body))
    public = {"algorithm_version_id": version, "dataset": "public-sample"}
    assert not world.closed_work(SimpleNamespace(path="/api/v1/evaluations", body=public))
    rerun = SimpleNamespace(
        path="/api/v1/evaluations/{evaluation_id}/rerun",
        body=None,
        path_parameters={"evaluation_id": evaluation},
    )
    assert world.closed_work(rerun)
