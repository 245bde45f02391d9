"""Issue 23 point 3: leaderboard snapshots (the public view frozen, immutable, at stable
addresses) and "Cite this" as BibTeX and CITATION.cff for snapshots, entries, datasets."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from szbench import changes, migrate
from szbench.config import get_settings
from szbench.disclosure import decision
from szbench.formats import bibtex
from szbench.formats.text import plain
from szbench.leaderboards import snapshots
from szbench.models import (
    Dataset,
    DatasetKind,
    LeaderboardSnapshot,
    ReleaseRule,
    Role,
)
from szbench.phases import lifecycle
from tests.platform import factories as f
from tests.platform.citation_parsers import strict_entries

EXACT = 0.5123457  # as computed; every non-admin gets it rounded to 0.51
HOSTILE = (
    "Evil} , author = {Mallory}, note = {x\n@misc{pwn, title = {y % not a comment "
    "\\input{/etc/passwd} ~^&$#_ \u00e9t\u00e9 \u65e5\u672c \u202eevil"
)


def _board(s: Session, *, title: str = "Alpha", authors: str = "Ada Lovelace, Alan Turing"):  # type: ignore[no-untyped-def]
    owner = f.user(s, name="Owner")
    dataset = f.dataset(s, slug="held", title="Held {out} set", citation="Smith et al. 2025")
    dv = f.dataset_version(s, dataset, version="1", manifest_checksum="sha256:abc")
    algorithm = f.algorithm(s, owner, name="alpha", title=title, authors=authors)
    evaluation = f.evaluation(s, f.version(s, algorithm), dv)
    figures = {"event_f1": EXACT, "event_sensitivity": EXACT, "event_precision": EXACT}
    f.result(s, evaluation, {"01": figures, "02": figures})
    # The owner's unpublished entry: on their board and an admin's, never on a snapshot.
    hidden = f.evaluation(s, f.version(s, f.algorithm(s, owner, name="beta")), dv, published=False)
    f.result(s, hidden, {"01": figures, "02": figures})
    return owner, dv, evaluation, hidden


def _take(client: TestClient, s: Session, **kw: Any) -> Any:
    admin = f.user(s, Role.ADMIN)
    return client.post("/api/v1/leaderboards/held/snapshots?version=1", headers=f.headers(s, admin))


def test_a_snapshot_freezes_what_an_anonymous_visitor_sees(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    _owner, dv, evaluation, hidden = _board(s)
    admin = f.user(s, Role.ADMIN)
    admin_board = client.get(
        "/api/v1/leaderboards/held?version=1", headers=f.headers(s, admin)
    ).json()
    assert {e["evaluation_id"] for e in admin_board["items"]} == {evaluation.id, hidden.id}
    assert admin_board["items"][0]["event_f1"] == EXACT  # admins see exact figures

    r = client.post("/api/v1/leaderboards/held/snapshots?version=1", headers=f.headers(s, admin))
    assert r.status_code == 201, r.text
    taken = r.json()
    assert str(EXACT) not in r.text
    board = taken["board"]
    public = client.get("/api/v1/leaderboards/held?version=1&unranked=true").json()
    assert board["items"] == public["items"]
    assert [e["evaluation_id"] for e in board["items"]] == [evaluation.id]
    entry = board["items"][0]
    assert entry["event_f1"] == 0.51
    assert entry["release"] == "rounded"
    assert entry["provenance"]["image_digest"] == evaluation.image_digest
    assert board["scorer_versions"] == ["0.1.0"]
    assert board["dataset_version"] == "1"
    assert board["manifest_checksum"] == "sha256:abc"
    assert board["release"]["decimals"] == decision.RELEASED_DECIMALS
    assert board["disclosure"] == "aggregate"
    assert board["authors"] == {
        str(evaluation.algorithm_version.algorithm_id): "Ada Lovelace, Alan Turing"
    }
    # The hash is of the canonical JSON of the board as answered: anyone can check it.
    digest = hashlib.sha256(snapshots.canonical_json(board)).hexdigest()
    assert taken["content_sha256"] == digest
    assert taken["url"].endswith(f"/leaderboards/held/snapshots/{taken['id']}")

    # Its page and JSON, for anyone, hold the same frozen figures.
    again = client.get(f"/api/v1/leaderboards/held/snapshots/{taken['id']}").json()
    assert again == taken
    page = client.get(f"/leaderboards/held/snapshots/{taken['id']}")
    assert page.status_code == 200
    assert digest in page.text
    assert evaluation.image_digest in page.text
    assert str(EXACT) not in page.text
    assert "beta" not in page.text
    # Another dataset's address names no snapshot.
    f.dataset(s, slug="other")
    assert client.get(f"/api/v1/leaderboards/other/snapshots/{taken['id']}").status_code == 404

    # Unchanged board: the same snapshot (200). A new result: a new one; the old one stays.
    assert (
        client.post(
            "/api/v1/leaderboards/held/snapshots?version=1", headers=f.headers(s, admin)
        ).json()["id"]
        == taken["id"]
    )
    rival = f.evaluation(s, f.version(s, f.algorithm(s, f.user(s), name="gamma")), dv)
    f.result(s, rival, {"01": {"event_f1": 0.9}, "02": {"event_f1": 0.9}})
    r = client.post("/api/v1/leaderboards/held/snapshots?version=1", headers=f.headers(s, admin))
    assert r.status_code == 201
    assert r.json()["id"] != taken["id"]
    assert client.get(f"/api/v1/leaderboards/held/snapshots/{taken['id']}").json() == taken
    listed = client.get("/api/v1/leaderboards/held/snapshots").json()
    assert [x["id"] for x in listed] == [r.json()["id"], taken["id"]]


def test_only_admins_take_snapshots_and_none_is_changed(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    owner, *_ = _board(s)
    url = "/api/v1/leaderboards/held/snapshots"
    assert client.post(url).status_code == 401
    assert client.post(url, headers=f.headers(s, owner)).status_code == 403
    snapshot_id = _take(client, s).json()["id"]
    for method in ("PUT", "PATCH", "DELETE"):
        answer = client.request(method, f"{url}/{snapshot_id}", headers=f.headers(s, owner))
        assert answer.status_code == 405, method


def test_the_database_refuses_to_change_or_remove_a_snapshot(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    _board(s)
    snapshot_id = _take(client, s).json()["id"]
    for statement in (
        update(LeaderboardSnapshot)
        .where(LeaderboardSnapshot.id == snapshot_id)
        .values(board={"items": []}),
        delete(LeaderboardSnapshot).where(LeaderboardSnapshot.id == snapshot_id),
    ):
        with (
            pytest.raises(DBAPIError, match="leaderboard snapshots are immutable"),
            s.begin_nested(),
        ):
            s.execute(statement)
    assert s.get_one(LeaderboardSnapshot, snapshot_id).board["items"]


def test_sqlite_refuses_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'snap.sqlite3'}"
    migrate.upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO datasets (id, slug, title, description, licence, citation, kind, "
                "run_limits, disclosure, failed_recordings, created_at) VALUES (1, 'd', '', '', "
                "'', '', 'held_out', '{}', 'aggregate', 'unranked', '2026-01-01')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO dataset_versions (id, dataset_id, version, path, manifest_checksum, "
                "is_active, created_at, revision) VALUES (1, 1, '1', '/x', '', 1, '2026-01-01', 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO leaderboard_snapshots (id, dataset_version_id, dataset, "
                "dataset_version, content_sha256, board, reason, created_at) VALUES "
                "(1, 1, 'd', '1', 'x', '{}', 'admin', '2026-01-01')"
            )
        )
    for statement in (
        "UPDATE leaderboard_snapshots SET board = '[]'",
        "DELETE FROM leaderboard_snapshots",
    ):
        with pytest.raises(DBAPIError, match="immutable"), engine.begin() as conn:
            conn.execute(text(statement))
    engine.dispose()


def test_a_closing_phase_snapshots_the_boards_it_names(
    client: TestClient, db_session: Session
) -> None:
    s = db_session
    _, dv, evaluation, _ = _board(s)
    phase = f.phase(s, slug="final", release_rule=ReleaseRule.LADDER)
    phase.dataset_versions = [dv]
    evaluation.algorithm_version.phase_id = phase.id
    s.flush()
    lifecycle.check(s)  # first look: open, nothing to tell
    assert snapshots.list_snapshots(s, "held") == []
    phase.is_open = False
    s.flush()
    assert len(lifecycle.check(s)) == 1
    (taken,) = snapshots.list_snapshots(s, "held")
    assert (taken.reason, taken.phase, taken.created_by_id) == ("phase_closed", "final", None)
    # The board as anyone sees it once the phase closed.
    public = client.get("/api/v1/leaderboards/held?version=1&unranked=true").json()
    assert taken.board["items"] == public["items"]
    assert taken.board["release"]["phases"][0]["closed"] is True


# --- citations ---------------------------------------------------------------------------------

_ESCAPED = {
    r"\textbackslash{}": "\\",
    r"\textasciitilde{}": "~",
    r"\textasciicircum{}": "^",
    r"\textbraceleft{}": "{",
    r"\textbraceright{}": "}",
    r"{\char64}": "@",
}
_UNESCAPE = re.compile("|".join(re.escape(e) for e in _ESCAPED) + r"|\\(.)")


def _unescape(value: str) -> str:
    """What a TeX reader prints for an escaped field (the inverse of formats.bibtex)."""
    return _UNESCAPE.sub(lambda m: _ESCAPED.get(m.group(0)) or m.group(1), value)


def parse_bibtex(text_: str) -> tuple[str, dict[str, str]]:
    """One entry as BibTeX reads it: pybtex in strict mode finds exactly one entry, and its
    fields are split as BibTeX does (braces nest, a backslash escapes nothing)."""
    assert len(strict_entries(text_)) == 1
    head = re.match(r"@misc\{([^,{}\s]+),\n", text_)
    assert head, text_[:80]
    fields: dict[str, str] = {}
    i = head.end()
    while True:
        m = re.compile(r"\s*(?:(\w+) = \{|\})").match(text_, i)
        assert m, text_[i : i + 80]
        if m.group(1) is None:
            assert text_[m.end() :] == "\n", "text after the entry"
            return head.group(1), fields
        depth, j = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text_[j], 0)
            j += 1
        fields[m.group(1)] = text_[m.end() : j - 1]
        assert text_[j] == ",", text_[j : j + 40]
        i = j + 1


def test_bibtex_keeps_a_hostile_title_inside_its_field() -> None:
    escaped = bibtex.escape(HOSTILE)
    assert "\n" not in escaped
    assert "\u202e" not in escaped
    assert re.search(r"(?<!\\)%", escaped) is None  # no comment starts
    assert "\\input" not in escaped
    assert _unescape(escaped) == plain(HOSTILE)
    assert "\u00e9t\u00e9 \u65e5\u672c" in escaped  # other characters kept as written


def test_cite_an_entry_with_a_hostile_title(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    get_settings.cache_clear()
    s = db_session
    _, _dv, evaluation, _ = _board(s, title=HOSTILE, authors="Mallory {Evil}; Eve & Bob")
    snapshot_id = _take(client, s).json()["id"]
    base = f"/api/v1/leaderboards/held/snapshots/{snapshot_id}"
    r = client.get(
        f"{base}/entries/{evaluation.id}/citation?format=bibtex",
        headers={"Host": "evil.example"},
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-bibtex")
    key, fields = parse_bibtex(r.text)
    assert key == f"szbench-held-snapshot-{snapshot_id}-evaluation-{evaluation.id}"
    assert set(fields) >= {"title", "author", "year", "url", "note", "version"}
    assert _unescape(fields["title"][1:-1]) == plain(HOSTILE)
    assert fields["author"] == (
        r"{Mallory \textbraceleft{}Evil\textbraceright{}} and {Eve} and {Bob}"
    )
    page = f"https://bench.example.org/leaderboards/held/snapshots/{snapshot_id}"
    assert fields["url"] == f"{page}?entry={evaluation.id}"
    assert evaluation.image_digest in fields["note"]
    assert "0.51" in fields["note"]
    assert "evil.example" not in r.text

    r = client.get(f"{base}/entries/{evaluation.id}/citation?format=cff")
    assert r.headers["content-disposition"] == 'inline; filename="CITATION.cff"'
    cff = yaml.safe_load(r.text)
    assert cff["cff-version"] == "1.2.0"
    assert cff["type"] == "software"
    assert cff["title"] == plain(HOSTILE)
    assert cff["authors"] == [{"name": "Mallory {Evil}"}, {"name": "Eve"}, {"name": "Bob"}]
    assert cff["url"] == f"{page}?entry={evaluation.id}"
    assert isinstance(cff["message"], str)
    assert str(cff["date-released"])[:4].isdigit()
    assert client.get(f"{base}/entries/999999/citation").status_code == 404

    # The snapshot itself.
    key, fields = parse_bibtex(client.get(f"{base}/citation").text)
    assert fields["url"] == page
    assert fields["title"] == (
        f"{{Leaderboard of Held \\textbraceleft{{}}out\\textbraceright{{}} set 1 "
        f"(snapshot {snapshot_id})}}"
    )
    digest = client.get(base).json()["content_sha256"]
    assert digest in fields["note"]
    cff = yaml.safe_load(client.get(f"{base}/citation?format=cff").text)
    assert cff["type"] == "dataset"
    assert cff["authors"] == [{"name": "szbench"}]
    assert cff["url"] == page
    assert cff["version"] == f"snapshot {snapshot_id}"


def test_cite_a_dataset_version(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    settings_env.setenv("SZBENCH_CITATION_PUBLISHER", "Bench & Co {EEG}")
    get_settings.cache_clear()
    s = db_session
    _board(s)
    base = "/api/v1/datasets/held/versions/1/citation"
    key, fields = parse_bibtex(client.get(base).text)
    assert key == "szbench-dataset-held-1"
    assert fields["url"] == "https://bench.example.org/datasets/held?version=1"
    assert fields["publisher"] == r"Bench \& Co \textbraceleft{}EEG\textbraceright{}"
    assert "sha256:abc" in fields["note"]
    assert "Smith et al. 2025" in fields["note"]
    cff = yaml.safe_load(client.get(f"{base}?format=cff").text)
    assert cff["title"] == "Held {out} set"
    assert cff["version"] == "1"
    assert cff["authors"] == [{"name": "Bench & Co {EEG}"}]
    assert client.get("/api/v1/datasets/held/versions/9/citation").status_code == 404
    # A version whose name needs encoding in a query: BibTeX's \url gets its % escaped.
    f.dataset_version(s, s.query(Dataset).filter_by(slug="held").one(), version="2+b")
    _, fields = parse_bibtex(client.get("/api/v1/datasets/held/versions/2+b/citation").text)
    assert fields["url"] == "https://bench.example.org/datasets/held?version=2%2Bb"
    assert fields["howpublished"] == r"\url{https://bench.example.org/datasets/held?version=2\%2Bb}"
    assert client.get(f"{base}?format=ris").status_code == 422
    # The dataset page offers it.
    page = client.get("/datasets/held").text
    assert f"{base}?format=bibtex" in page
    assert f"{base}?format=cff" in page


def test_a_snapshot_keeps_the_figures_released_then(
    client: TestClient, db_session: Session
) -> None:
    """A later change of the board's rules (here: the data made a public sample, so its
    figures are shown exact) leaves the snapshot's figures as released when it was taken."""
    s = db_session
    _board(s)
    taken = _take(client, s).json()
    dataset = s.query(Dataset).filter_by(slug="held").one()
    dataset.kind = DatasetKind.PUBLIC_SAMPLE
    changes.dataset_changed(s, dataset.id)
    s.flush()
    live = client.get("/api/v1/leaderboards/held?version=1").json()
    assert live["items"][0]["event_f1"] == EXACT
    again = client.get(f"/api/v1/leaderboards/held/snapshots/{taken['id']}").json()
    assert again == taken
    assert again["board"]["kind"] == "held_out"
    assert again["board"]["items"][0]["event_f1"] == 0.51


def test_a_board_that_cannot_be_frozen_does_not_hold_up_the_phase_news(
    db_session: Session, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = db_session
    _, dv, _, _ = _board(s)
    phase = f.phase(s, slug="final")
    phase.dataset_versions = [dv]
    s.flush()
    lifecycle.check(s)

    def broken(session: Session, phase: Any) -> list[LeaderboardSnapshot]:
        raise RuntimeError("statistics unavailable")

    monkeypatch.setattr(snapshots, "take_for_phase", broken)
    phase.is_open = False
    s.flush()
    assert len(lifecycle.check(s)) == 1
    assert "could not snapshot the boards of phase final" in caplog.text
    assert snapshots.list_snapshots(s, "held") == []


def test_cite_an_entry_of_the_live_board(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    """What ran, without figures (they move until a snapshot freezes them); only for those
    who may see the evaluation."""
    settings_env.setenv("SZBENCH_PUBLIC_URL", "https://bench.example.org")
    get_settings.cache_clear()
    s = db_session
    owner, _dv, evaluation, hidden = _board(s, title=HOSTILE)
    url = f"/api/v1/evaluations/{evaluation.id}/citation"
    key, fields = parse_bibtex(client.get(url).text)
    assert key == f"szbench-evaluation-{evaluation.id}"
    assert _unescape(fields["title"][1:-1]) == plain(HOSTILE)
    algorithm_id = evaluation.algorithm_version.algorithm_id
    assert (
        fields["url"]
        == f"https://bench.example.org/algorithms/{algorithm_id}?evaluation={evaluation.id}"
    )
    assert evaluation.image_digest in fields["note"]
    assert "dataset held version 1" in fields["note"]
    assert "0.51" not in fields["note"]
    assert str(EXACT) not in fields["note"]
    cff = yaml.safe_load(client.get(f"{url}?format=cff").text)
    assert cff["authors"] == [{"name": "Ada Lovelace"}, {"name": "Alan Turing"}]
    # An unpublished entry: its owner may cite it, nobody else learns it exists.
    hidden_url = f"/api/v1/evaluations/{hidden.id}/citation"
    assert client.get(hidden_url).status_code == 404
    assert client.get(hidden_url, headers=f.headers(s, f.user(s))).status_code == 404
    assert client.get(hidden_url, headers=f.headers(s, owner)).status_code == 200
    page = client.get(f"/algorithms/{algorithm_id}?evaluation={evaluation.id}").text
    assert f"{url}?format=bibtex" in page
