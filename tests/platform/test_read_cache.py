"""The stamped read caches: freshness window, background re-checks, access on cached facts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session

from szbench.api import cache as cache_module
from szbench.api.cache import StampedCache
from szbench.config import get_settings
from szbench.models import Role, Visibility
from tests.platform import factories as f


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


def _statements(db_session: Session) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "SAVEPOINT" not in statement:
            statements.append(statement)

    engine = db_session.get_bind()
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_cached_results_are_served_without_the_database_and_checked_per_viewer(
    client: TestClient, db_session: Session, results_window: Callable[[float], None]
) -> None:
    results_window(3600)
    s = db_session
    alice, bob = f.user(s, name="Alice"), f.user(s, name="Bob")
    algo = f.algorithm(s, alice, name="alpha")
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
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
    for statements in _statements(s):
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
    dv = f.dataset_version(s, f.dataset(s, slug="held"), version="1")
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
