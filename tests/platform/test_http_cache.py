"""The stamped read caches: freshness window, background re-checks, access on cached facts."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.api import cache as cache_module
from szbench.api.cache import StampedCache
from szbench.config import get_settings
from szbench.models import Disclosure, Role, Visibility
from tests.platform import factories as f
from tests.platform.helpers import in_thread, recorded_statements, until


class FakeFacts:
    """A facts reader over a dict, counting its calls and the subjects asked for."""

    def __init__(self, facts: dict[Any, Any]) -> None:
        self.facts = facts
        self.calls: list[list[Any]] = []

    def __call__(self, session: Any, subjects: list[Any]) -> dict[Any, Any]:
        self.calls.append(sorted(subjects))
        return {s: self.facts[s] for s in subjects if s in self.facts}


def test_answers_are_rebuilt_only_when_the_facts_change() -> None:
    reader = FakeFacts({1: ("done", 1)})
    cache = StampedCache("test", reader)
    assert cache.check(None, 1) == ("done", 1)  # type: ignore[arg-type]
    assert cache.answer(1, ("done", 1), "v", ttl_s=60) is None
    cache.store(1, ("done", 1), "v", b"one")
    assert cache.answer(1, ("done", 1), "v", ttl_s=60) == b"one"
    assert cache.answer(1, ("done", 1), "v", ttl_s=0) is None  # past its time to live
    reader.facts[1] = ("done", 2)
    assert cache.check(None, 1) == ("done", 2)  # type: ignore[arg-type]
    assert cache.answer(1, ("done", 2), "v", ttl_s=60) is None
    del reader.facts[1]
    assert cache.check(None, 1) is None  # type: ignore[arg-type]


def test_window_then_background_recheck_then_check_in_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = FakeFacts({1: "a", 2: "b"})
    clock = [100.0]
    cache = StampedCache("test", reader, clock=lambda: clock[0])
    refreshed: list[list[Any]] = []
    # The background re-check opens its own session: give it none, record what it reads.
    monkeypatch.setattr(cache_module, "get_sessionmaker", lambda: lambda: _NoSession())

    async def main() -> None:
        for subject in (1, 2):
            cache.check(None, subject)  # type: ignore[arg-type]
            cache.store(subject, reader.facts[subject], "v", f"body{subject}".encode())
        assert cache.peek(1, "v", window_s=0) is None  # no window: always check
        assert cache.peek(1, "v", window_s=60) == ("a", b"body1")
        assert cache.peek(1, "other", window_s=60) == ("a", None)
        reader.calls.clear()
        # Past the window (but within the grace period): still served, and both subjects
        # are re-read in the background, in one batch.
        reader.facts[2] = "b2"
        clock[0] += 2
        assert cache.peek(1, "v", window_s=1) == ("a", b"body1")
        assert cache.peek(2, "v", window_s=1) == ("b", b"body2")
        for _ in range(100):
            await anyio.sleep(0.01)
            if reader.calls:
                break
        refreshed.extend(reader.calls)
        # Changed facts: the old answer is gone.
        assert cache.peek(2, "v", window_s=60) == ("b2", None)
        # Past window and grace: the request must check for itself.
        clock[0] += 10 + cache_module.STALE_GRACE_S
        assert cache.peek(1, "v", window_s=1) is None

    anyio.run(main)
    assert refreshed == [[1, 2]]


def test_a_local_write_ends_every_window() -> None:
    reader = FakeFacts({1: "a"})
    cache = StampedCache("test", reader)
    cache.check(None, 1)  # type: ignore[arg-type]
    cache.store(1, "a", "v", b"body")
    assert cache.peek(1, "v", window_s=60) is not None
    cache_module.end_freshness()
    assert cache.peek(1, "v", window_s=60) is None
    cache.check(None, 1)  # type: ignore[arg-type]
    assert cache.peek(1, "v", window_s=60) == ("a", b"body")  # same facts: answer kept


class _NoSession:
    def close(self) -> None:
        pass


@pytest.fixture
def results_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], None]]:
    def set_window(seconds: float) -> None:
        monkeypatch.setenv("SZBENCH_RESULTS_FRESH_S", str(seconds))
        get_settings.cache_clear()

    yield set_window
    get_settings.cache_clear()


def test_cached_results_are_served_without_the_database_and_checked_per_viewer(
    client: TestClient, db_session: Session, results_window: Callable[[float], None]
) -> None:
    results_window(3600)
    s = db_session
    alice, bob = f.user(s, name="Alice"), f.user(s, name="Bob")
    algo = f.algorithm(s, alice, name="alpha")
    # Per-subject figures disclosed, so that the subjects route answers non-admins.
    dv = f.dataset_version(s, f.dataset(s, slug="held", disclosure=Disclosure.SUBJECT), version="1")
    ev = f.evaluation(s, f.version(s, algo), dv, published=False)
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    as_alice, as_bob = f.headers(s, alice), f.headers(s, bob)
    paths = [
        f"/api/v1/evaluations/{ev.id}/result",
        f"/api/v1/evaluations/{ev.id}/subjects",
        f"/api/v1/algorithms/{algo.id}/results",
    ]
    owner_view = [client.get(p, headers=as_alice) for p in paths]
    assert [r.status_code for r in owner_view] == [200, 200, 200]
    assert owner_view[0].json()["event_f1"] == 0.5
    with recorded_statements(s) as statements:
        again = [client.get(p) for p in paths[:2]]  # anonymous, within the window
        # The owner's cached answer is not served to others: access is decided on the
        # cached facts (unpublished), without the database.
        assert [r.status_code for r in again] == [404, 404]
        assert statements == []
    assert client.get(paths[0], headers=as_bob).status_code == 404  # signed in, not owner
    # The algorithm is public: others see it, without the unpublished evaluation.
    assert client.get(paths[2]).json()["total"] == 0
    # Publishing (a write through this app) ends every window: seen on the next read.
    admin = f.user(s, Role.ADMIN)
    r = client.post(f"/api/v1/evaluations/{ev.id}/publish", headers=f.headers(s, admin))
    assert r.status_code == 200, r.text
    assert client.get(paths[0]).status_code == 200
    assert client.get(paths[2]).json()["total"] == 1
    # Hidden behind the app's back (another process): seen once the window ends.
    algo.visibility = Visibility.PRIVATE
    s.flush()
    assert client.get(paths[0]).status_code == 200  # within the window
    results_window(0)
    assert client.get(paths[0]).status_code == 404
    assert client.get(paths[2]).status_code == 404
    assert client.get(paths[0], headers=as_alice).status_code == 200


def test_cached_answers_match_fresh_ones(
    client: TestClient, db_session: Session, results_window: Callable[[float], None]
) -> None:
    s = db_session
    alice = f.user(s, name="Alice")
    algo = f.algorithm(s, alice, name="alpha")
    # Per-subject figures disclosed, so that the subjects route answers non-admins.
    dv = f.dataset_version(s, f.dataset(s, slug="held", disclosure=Disclosure.SUBJECT), version="1")
    ev = f.evaluation(s, f.version(s, algo), dv)
    f.result(s, ev, {f"{i:02d}": {"event_f1": i / 10, "event_sensitivity": 0.5} for i in range(5)})
    paths = [
        f"/api/v1/evaluations/{ev.id}/result",
        f"/api/v1/evaluations/{ev.id}/subjects?limit=2&offset=1",
        f"/api/v1/algorithms/{algo.id}/results",
    ]
    results_window(0)
    fresh = [client.get(p).json() for p in paths]
    results_window(3600)
    cached = [client.get(p).json() for p in paths] + [client.get(p).json() for p in paths]
    assert cached == fresh + fresh
    assert [x["subject"] for x in fresh[1]["items"]] == ["01", "02"]


def test_answers_per_subject_are_bounded() -> None:
    cache = StampedCache("test", FakeFacts({1: "a"}))
    cache.check(None, 1)  # type: ignore[arg-type]
    for viewer in range(cache_module.ANSWERS_PER_SUBJECT + 10):
        cache.store(1, "a", viewer, b"x")
    assert cache.answer(1, "a", 0, ttl_s=60) is None  # the oldest went first
    assert cache.answer(1, "a", cache_module.ANSWERS_PER_SUBJECT + 9, ttl_s=60) == b"x"


# --- Shared reads and builds under concurrency ----------------------------------------------


class GatedFacts(FakeFacts):
    """A facts reader whose every read waits until the test lets one go, so reads overlap."""

    def __init__(self, facts: dict[Any, Any]) -> None:
        super().__init__(facts)
        self.started = 0
        self._go = threading.Semaphore(0)
        self.fail_next = False

    def __call__(self, session: Any, subjects: list[Any]) -> dict[Any, Any]:
        self.started += 1
        assert self._go.acquire(timeout=10), "the test never let the read go"
        if self.fail_next:
            self.fail_next = False
            self.calls.append(sorted(subjects))
            raise RuntimeError("database went away")
        return super().__call__(session, subjects)

    def let_go(self) -> None:
        self._go.release()


def test_concurrent_misses_share_one_read_and_late_ones_wait_for_the_next() -> None:
    reader = GatedFacts({s: f"facts{s}" for s in range(30)})
    cache = StampedCache("test", reader)
    got: dict[int, Any] = {}

    async def ask(subject: int) -> None:
        got[subject] = await cache.facts(subject, None, in_thread)  # type: ignore[arg-type]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 0)  # nobody else waits: it reads at once, alone
            await until(lambda: reader.started == 1)
            for subject in range(1, 20):  # a burst while that read runs: all in the next one
                tg.start_soon(ask, subject)
            await anyio.sleep(0.02)
            reader.let_go()
            await until(lambda: reader.started == 2)
            # Asked while the second read runs, 5 included: not answered by it (it may
            # predate a write this caller made), but by the one after, with the others.
            for subject in (5, 20, 21, 22):
                tg.start_soon(ask, subject)
            await anyio.sleep(0.02)
            reader.let_go()
            await until(lambda: reader.started == 3)
            reader.let_go()

    anyio.run(main)
    assert got == {s: f"facts{s}" for s in range(23)}
    assert reader.calls == [[0], list(range(1, 20)), [5, 20, 21, 22]]


def test_a_failed_shared_read_fails_its_waiters_and_the_next_read_works() -> None:
    reader = GatedFacts({s: "ok" for s in range(10)})
    cache = StampedCache("test", reader)
    outcomes: list[Any] = []

    async def ask(subject: int) -> None:
        try:
            outcomes.append(await cache.facts(subject, None, in_thread))  # type: ignore[arg-type]
        except RuntimeError as exc:
            outcomes.append(str(exc))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, 0)
            await until(lambda: reader.started == 1)
            for subject in range(1, 5):
                tg.start_soon(ask, subject)
            await anyio.sleep(0.02)
            reader.fail_next = True
            reader.let_go()
            await until(lambda: len(outcomes) == 1)
            reader.let_go()
        tg_done = len(outcomes)
        assert tg_done == 5
        reader.let_go()
        await ask(7)

    anyio.run(main)
    assert outcomes == ["database went away"] + ["ok"] * 4 + ["ok"]
    assert reader.calls == [[0], [1, 2, 3, 4], [7]]


def test_when_the_reading_request_is_cancelled_another_reads_for_the_rest() -> None:
    reader = GatedFacts({1: "a", 2: "b"})
    cache = StampedCache("test", reader)
    got: dict[int, Any] = {}

    async def cancellable(work: Callable[[], Any]) -> Any:
        # As a request cancelled before its read is done (e.g. still waiting for a slot).
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)

    async def ask(subject: int) -> None:
        got[subject] = await cache.facts(subject, None, cancellable)  # type: ignore[arg-type]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as leader:
                leader.start_soon(ask, 1)
                await until(lambda: reader.started == 1)
                tg.start_soon(ask, 1)  # the same subject, after the read began
                tg.start_soon(ask, 2)
                await anyio.sleep(0.02)
                leader.cancel_scope.cancel()  # the first caller goes away mid-read
            await until(lambda: reader.started == 2)
            reader.let_go()
            reader.let_go()

    anyio.run(main)
    assert got == {1: "a", 2: "b"}
    assert sorted(map(tuple, reader.calls)) == [(1,), (1, 2)]


def test_an_answer_wanted_by_many_at_once_is_built_once() -> None:
    reader = FakeFacts({1: "a"})
    cache = StampedCache("test", reader)
    cache.check(None, 1)  # type: ignore[arg-type]
    builds = []
    release = anyio.Event()

    async def build() -> bytes:
        builds.append(1)
        await release.wait()
        return b"board"

    async def main() -> list[bytes]:
        bodies: list[bytes] = []

        async def ask() -> None:
            bodies.append(await cache.build_once(1, "a", "v", 60, build))

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(ask)
            await until(lambda: len(builds) == 1)
            await anyio.sleep(0.02)
            release.set()
        bodies.append(await cache.build_once(1, "a", "v", 60, build))  # cached by then
        return bodies

    assert anyio.run(main) == [b"board"] * 51
    assert builds == [1]


def test_single_flight_errors_reach_every_waiter_and_a_cancelled_leader_hands_over() -> None:
    flights: cache_module.SingleFlight[str, str] = cache_module.SingleFlight("test")
    started = []

    async def main() -> None:
        release = anyio.Event()

        async def failing() -> str:
            started.append("fail")
            await release.wait()
            raise ValueError("bad sort key")

        errors: list[str] = []

        async def ask_failing() -> None:
            try:
                await flights.run("k", failing)
            except ValueError as exc:
                errors.append(str(exc))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(ask_failing)
            await until(lambda: bool(started))
            release.set()
        assert errors == ["bad sort key"] * 3
        assert started == ["fail"]

        # The leader is cancelled: a waiter computes instead, and gets a result.
        gate = anyio.Event()

        async def slow() -> str:
            started.append("slow")
            await gate.wait()
            return "done"

        results: list[str] = []
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as leader:
                leader.start_soon(flights.run, "k", slow)
                await until(lambda: started[-1] == "slow")

                async def follower() -> None:
                    results.append(await flights.run("k", slow))

                tg.start_soon(follower)
                await anyio.sleep(0.02)
                leader.cancel_scope.cancel()
            await until(lambda: started.count("slow") == 2)
            gate.set()
        assert results == ["done"]

    anyio.run(main)


def test_a_write_during_a_read_leaves_what_it_read_unchecked() -> None:
    reader = GatedFacts({1: "old"})
    cache = StampedCache("test", reader)

    async def main() -> Any:
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def ask() -> None:
                result.append(await cache.facts(1, None, in_thread))  # type: ignore[arg-type]

            tg.start_soon(ask)
            await until(lambda: reader.started == 1)
            cache_module.end_freshness()  # a write in this process while the row is read
            reader.let_go()
        return result[0]

    assert anyio.run(main) == "old"  # the caller who asked before the write gets it
    # ... but nobody after it is served from it without reading again.
    assert cache.peek(1, "v", window_s=60) is None


def test_background_recheck_does_not_reread_what_its_last_read_covered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = FakeFacts({s: "x" for s in range(10)})
    clock = [100.0]
    cache = StampedCache("test", reader, clock=lambda: clock[0], window_s=lambda: 1.0)
    monkeypatch.setattr(cache_module, "get_sessionmaker", lambda: lambda: _NoSession())
    for subject in range(10):
        cache.check(None, subject)  # type: ignore[arg-type]
    reader.calls.clear()
    gate = threading.Event()
    read = reader.__call__

    def gated(session: Any, subjects: list[Any]) -> dict[Any, Any]:
        assert gate.wait(10)
        return read(session, subjects)

    cache._read_facts = gated  # type: ignore[method-assign]

    async def main() -> None:
        clock[0] += 1.5  # every subject stale: the first peek starts one re-read of all
        for subject in range(10):
            cache.peek(subject, "v", window_s=1)
        await anyio.sleep(0.02)
        # Asked for again while that read runs: queued, but the read covers them.
        for subject in range(10):
            cache.peek(subject, "v", window_s=1)
        gate.set()
        await until(lambda: len(reader.calls) == 1)
        await anyio.sleep(0.05)

    anyio.run(main)
    assert reader.calls == [list(range(10))]


# --- The read front ------------------------------------------------------------------------


@pytest.fixture
def routed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per request whose result route ran its body (not answered in front)."""
    from szbench.results import router as results_router

    calls: list[str] = []
    real_serve = results_router.serve

    async def counting_serve(*args: Any, **kwargs: Any) -> Any:
        calls.append("route")
        return await real_serve(*args, **kwargs)

    monkeypatch.setattr(results_router, "serve", counting_serve)
    return calls


def test_anonymous_front_answers_repeats_without_routing_and_only_for_anonymous_callers(
    client: TestClient,
    db_session: Session,
    results_window: Callable[[float], None],
    routed: list[str],
) -> None:
    from szbench.logging import REQUEST_ID_HEADER

    results_window(3600)
    s = db_session
    alice = f.user(s, name="Alice")
    algo = f.algorithm(s, alice, name="alpha")
    ev = f.evaluation(s, f.version(s, algo), f.dataset_version(s, f.dataset(s, slug="held")))
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    path = f"/api/v1/evaluations/{ev.id}/result"

    first = client.get(path)
    assert first.status_code == 200
    assert routed == ["route"]
    with recorded_statements(s) as statements:
        again = client.get(path)
        assert routed == ["route"]  # answered in front of the router ...
        assert statements == []  # ... and without the database
    assert again.content == first.content
    assert again.headers["content-type"] == "application/json"
    assert again.headers[REQUEST_ID_HEADER]  # the outer layers still see it
    assert client.get(path + "?x=1").status_code == 200  # another query string: routed
    assert len(routed) == 2

    # Any credential goes through the route, where it is checked.
    as_alice = f.headers(s, alice)
    assert client.get(path, headers=as_alice).status_code == 200
    assert client.get(path, headers={"Authorization": "Bearer szb_forged"}).status_code == 401
    assert client.get(path, headers={"Cookie": "theme=dark"}).status_code == 200
    assert len(routed) == 4  # the forged token was refused before the route's body

    # Access is decided on the cached facts each time: once the owner's read has seen the
    # algorithm hidden, the front refuses to answer and the route says 404.
    algo.visibility = Visibility.PRIVATE
    s.flush()
    results_window(0)
    assert client.get(path, headers=as_alice).status_code == 200  # reads the new facts
    results_window(3600)
    hidden = client.get(path)
    assert hidden.status_code == 404
    assert hidden.json()["error"] == "NotFound"
    assert len(routed) == 6

    # Requests answered in front are counted under their route's template.
    metrics = client.get("/metrics").text
    label = 'method="GET",route="/api/v1/evaluations/{evaluation_id}/result",status="200"'
    assert f"szbench_http_requests_total{{{label}}} 6.0" in metrics


def test_anonymous_front_is_off_when_anonymous_reads_are(
    client: TestClient,
    db_session: Session,
    results_window: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results_window(3600)
    s = db_session
    algo = f.algorithm(s, f.user(s), name="alpha")
    ev = f.evaluation(s, f.version(s, algo), f.dataset_version(s, f.dataset(s, slug="held")))
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    path = f"/api/v1/evaluations/{ev.id}/result"
    assert client.get(path).status_code == 200
    assert client.get(path).status_code == 200
    monkeypatch.setenv("SZBENCH_ANONYMOUS_READ", "false")
    get_settings.cache_clear()
    assert client.get(path).status_code == 401


def test_leaderboard_facts_for_many_boards_in_one_go(db_session: Session) -> None:
    from szbench.leaderboards import service as leaderboards

    s = db_session
    a, b = f.dataset(s, slug="alpha"), f.dataset(s, slug="beta")
    a1 = f.dataset_version(s, a, version="1")
    a2 = f.dataset_version(s, a, version="2")
    b1 = f.dataset_version(s, b, version="1", is_active=False)
    algo = f.algorithm(s, f.user(s), name="x")
    ev = f.evaluation(s, f.version(s, algo), a2, published=False)
    asked = [("alpha", None), ("alpha", "1"), ("beta", None), ("beta", "1"), ("nope", None)]
    with recorded_statements(s) as statements:
        facts = leaderboards._facts(s, asked)
        assert len(statements) == 2  # whatever the number of boards
    # No version asked for: the newest active one; a named one even when inactive.
    assert {key: value[0] for key, value in facts.items()} == {
        ("alpha", None): a2.id,
        ("alpha", "1"): a1.id,
        ("beta", "1"): b1.id,
    }
    assert facts[("alpha", "1")][1][:5] == (0, None, None, None, None)  # no evaluations
    before = facts[("alpha", None)]
    ev.published = True
    s.flush()
    assert leaderboards._facts(s, [("alpha", None)])[("alpha", None)] != before


def test_read_front_serves_signed_in_callers_known_without_io_each_their_own_answer(
    client: TestClient,
    db_session: Session,
    results_window: Callable[[float], None],
    routed: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SZBENCH_TOKEN_FRESH_S", "3600")
    results_window(3600)
    s = db_session
    alice, bob = f.user(s, name="Alice"), f.user(s, name="Bob")
    algo = f.algorithm(s, alice, name="alpha")
    ev = f.evaluation(
        s, f.version(s, algo), f.dataset_version(s, f.dataset(s, slug="held")), published=False
    )
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    as_alice, as_bob = f.headers(s, alice), f.headers(s, bob)
    write_only = f.headers(s, alice, scopes=["write"])
    result, side_by_side = (
        f"/api/v1/evaluations/{ev.id}/result",
        f"/api/v1/algorithms/{algo.id}/results",
    )

    assert client.get(result, headers=as_alice).status_code == 200
    assert len(routed) == 1
    with recorded_statements(s) as statements:
        again = client.get(result, headers=as_alice)  # a known token: in front, no database
        assert statements == []
    assert again.status_code == 200
    assert len(routed) == 1
    # The same path for callers who may not see it: refused in front, rendered by the route.
    assert client.get(result).status_code == 404
    assert client.get("/api/v1/auth/me", headers=as_bob).status_code == 200  # Bob now known
    assert client.get(result, headers=as_bob).status_code == 404
    assert client.get(result, headers=write_only).status_code == 403  # no read scope
    assert len(routed) == 3  # the write-only token was refused before the route's body

    # Answers that differ per viewer: each gets their own, in front after a first routed one.
    assert client.get(side_by_side, headers=as_alice).json()["total"] == 1
    assert client.get(side_by_side).json()["total"] == 0
    routed.clear()
    assert client.get(side_by_side, headers=as_alice).json()["total"] == 1
    assert client.get(side_by_side).json()["total"] == 0
    assert routed == []
