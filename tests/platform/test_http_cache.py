"""The stamped read caches and their HTTP face: rebuilt when the facts change, access decided
per viewer on every read, ETag, Cache-Control, Vary and 304."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench import stamped_cache
from szbench.models import Disclosure, Role, Visibility
from szbench.stamped_cache import StampedCache
from tests.platform import factories as f


class Builds:
    """A build function that counts its calls."""

    def __init__(self, body: bytes = b"{}") -> None:
        self.body = body
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        return self.body


def _cache(facts: dict[Any, Any], **kw: Any) -> StampedCache[Any, Any]:
    return StampedCache("test", lambda session, subject: facts.get(subject), **kw)


def test_answers_are_rebuilt_only_when_the_facts_change() -> None:
    facts = {1: ("done", 1)}
    now = [0.0]
    cache = _cache(facts, ttl_s=lambda: 60.0, clock=lambda: now[0])
    build = Builds(b"one")
    first = cache.answer(1, cache.facts(None, 1), "v", build)  # type: ignore[arg-type]
    again = cache.answer(1, cache.facts(None, 1), "v", build)  # type: ignore[arg-type]
    assert (first, build.calls) == (again, 1)
    facts[1] = ("done", 2)
    changed = cache.answer(1, cache.facts(None, 1), "v", build)  # type: ignore[arg-type]
    assert build.calls == 2
    # Same bytes, same tag: the facts (counters any user's activity moves) are not in it.
    assert changed.etag == first.etag
    build.body = b"two"
    facts[1] = ("done", 3)
    assert cache.answer(1, cache.facts(None, 1), "v", build).etag != first.etag  # type: ignore[arg-type]
    build.body = b"one"
    now[0] = 61.0  # past its time to live: built again
    cache.answer(1, facts[1], "v", build)
    assert build.calls == 4
    del facts[1]
    assert cache.facts(None, 1) is None  # type: ignore[arg-type]


def test_etags_differ_per_variant_and_bytes_and_agree_across_processes() -> None:
    cache = _cache({1: "a"})
    a = cache.answer(1, "a", "admin", Builds(b"x"))
    b = cache.answer(1, "a", "others", Builds(b"x"))
    assert a.etag != b.etag
    # Another cache of the same name (another server process) gives the same tag.
    assert _cache({1: "a"}).answer(1, "a", "admin", Builds(b"x")).etag == a.etag
    assert _cache({1: "a"}).answer(1, "a", "admin", Builds(b"y")).etag != a.etag
    assert a.etag.startswith('"')
    assert a.etag.endswith('"')


def test_answers_per_subject_are_bounded() -> None:
    cache = _cache({1: "a"})
    for viewer in range(stamped_cache.ANSWERS_PER_SUBJECT + 10):
        cache.answer(1, "a", viewer, Builds())
    oldest, newest = Builds(), Builds()
    cache.answer(1, "a", 0, oldest)
    cache.answer(1, "a", stamped_cache.ANSWERS_PER_SUBJECT + 9, newest)
    assert (oldest.calls, newest.calls) == (1, 0)  # the oldest went first


def _world(s: Session) -> tuple[Any, Any, Any]:
    alice = f.user(s, name="Alice")
    algo = f.algorithm(s, alice, name="alpha")
    # Per-subject figures disclosed, so that the subjects route answers non-admins.
    dv = f.dataset_version(s, f.dataset(s, slug="held", disclosure=Disclosure.SUBJECT), version="1")
    ev = f.evaluation(s, f.version(s, algo), dv, published=False)
    f.result(s, ev, {"01": {"event_f1": 0.5, "event_sensitivity": 0.5}})
    return alice, algo, ev


def test_access_is_decided_per_viewer_on_every_read(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    alice, algo, ev = _world(s)
    bob = f.user(s, name="Bob")
    as_alice, as_bob = f.headers(s, alice), f.headers(s, bob)
    paths = [
        f"/api/v1/evaluations/{ev.id}/result",
        f"/api/v1/evaluations/{ev.id}/subjects",
        f"/api/v1/algorithms/{algo.id}/results",
    ]
    owner_view = [client.get(p, headers=as_alice) for p in paths]
    assert [r.status_code for r in owner_view] == [200, 200, 200]
    assert owner_view[0].json()["event_f1"] == 0.5
    # The owner's cached answer is not served to others, not even as a 304 to a client
    # that sends the owner's tag.
    for path, owned in zip(paths[:2], owner_view, strict=False):
        tag = {"If-None-Match": owned.headers["etag"]}
        assert client.get(path, headers=tag).status_code == 404
        assert client.get(path, headers={**as_bob, **tag}).status_code == 404
    # The algorithm is public: others see it, without the unpublished evaluation.
    assert client.get(paths[2]).json()["total"] == 0
    # Published, then hidden behind the app's back (another process): seen on the next read.
    admin = f.user(s, Role.ADMIN)
    r = client.post(f"/api/v1/evaluations/{ev.id}/publish", headers=f.headers(s, admin))
    assert r.status_code == 200, r.text
    assert client.get(paths[0]).status_code == 200
    assert client.get(paths[2]).json()["total"] == 1
    algo.visibility = Visibility.PRIVATE
    s.flush()
    assert client.get(paths[0]).status_code == 404
    assert client.get(paths[2]).status_code == 404
    assert client.get(paths[0], headers=as_alice).status_code == 200


def test_cached_answers_carry_validators_and_answer_304(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    alice, algo, ev = _world(s)
    ev.published = True
    s.flush()
    path = f"/api/v1/evaluations/{ev.id}/result"
    anonymous = client.get(path)
    assert anonymous.status_code == 200
    assert anonymous.headers["vary"] == "Cookie, Authorization"
    assert anonymous.headers["cache-control"] == "public, max-age=10"
    tag = anonymous.headers["etag"]
    again = client.get(path, headers={"If-None-Match": tag})
    assert again.status_code == 304
    assert again.content == b""
    assert (again.headers["etag"], again.headers["vary"]) == (tag, "Cookie, Authorization")
    assert tag.startswith('W/"')
    # Weak comparison: with or without W/, in a list.
    assert client.get(path, headers={"If-None-Match": f'"other", {tag[2:]}'}).status_code == 304
    assert client.get(path, headers={"If-None-Match": '"other"'}).status_code == 200
    signed_in = client.get(path, headers=f.headers(s, alice))
    assert signed_in.headers["cache-control"] == "private, no-cache"
    assert signed_in.headers["vary"] == "Cookie, Authorization"
    for route in (f"/api/v1/algorithms/{algo.id}/results", "/api/v1/leaderboards/held"):
        first = client.get(route)
        assert first.status_code == 200, first.text
        tag = {"If-None-Match": first.headers["etag"]}
        assert client.get(route, headers=tag).status_code == 304


def test_a_changed_result_changes_the_etag_and_a_write_is_read_fresh(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    alice, _, ev = _world(s)
    as_alice = f.headers(s, alice)
    path = f"/api/v1/evaluations/{ev.id}/result"
    before = client.get(path, headers=as_alice)
    # Published through the API: seen at once.
    admin = f.user(s, Role.ADMIN)
    r = client.post(f"/api/v1/evaluations/{ev.id}/publish", headers=f.headers(s, admin))
    assert r.status_code == 200, r.text
    # The owner's answer is the same bytes: the same tag, so their copy is current (304).
    again = client.get(path, headers={**as_alice, "If-None-Match": before.headers["etag"]})
    assert again.status_code == 304
    assert again.headers["etag"] == before.headers["etag"]
    # Anyone else now sees it: a new answer for them, read fresh.
    assert client.get(path).status_code == 200
    board = client.get("/api/v1/leaderboards/held")
    newcomer = f.evaluation(s, f.version(s, f.algorithm(s, alice, name="beta")), ev.dataset_version)
    f.result(s, newcomer, {"01": {"event_f1": 0.9, "event_sensitivity": 0.9}})
    tag = {"If-None-Match": board.headers["etag"]}
    newer = client.get("/api/v1/leaderboards/held", headers=tag)
    assert newer.status_code == 200
    assert newer.headers["etag"] != board.headers["etag"]


def test_admins_owners_and_others_get_their_own_answers_and_tags(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    alice, _, ev = _world(s)
    ev.published = True
    s.flush()
    path = f"/api/v1/evaluations/{ev.id}/result"
    admin = f.user(s, Role.ADMIN)
    tags = {
        "admin": client.get(path, headers=f.headers(s, admin)).headers["etag"],
        "owner": client.get(path, headers=f.headers(s, alice)).headers["etag"],
        "anonymous": client.get(path).headers["etag"],
        "other": client.get(path, headers=f.headers(s, f.user(s, name="Bob"))).headers["etag"],
    }
    assert len({tags["admin"], tags["owner"], tags["anonymous"]}) == 3
    # Non-admins who do not own it see the same answer under the disclosure rules.
    assert tags["other"] == tags["anonymous"]
