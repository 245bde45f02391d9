"""Workers on other hosts: the worker scope and the recording fetch (issue 22).

A worker token holds the ``worker`` scope alone, is minted by the operator's CLI for an
admin's account, fetches a recording by checksum (whole or by Range, rate-limited and
logged) and is refused by every other route of the app: walked over the route table, it
gets nothing an anonymous caller would not.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.auth import service as auth
from szbench.config import get_settings
from szbench.errors import BadRequest, Forbidden
from szbench.models import Role
from tests.platform import factories as f

FETCH = "/api/v1/worker/recordings/{checksum}"


def _held_out_file(s: Session, tmp_path: Path) -> tuple[str, bytes]:
    data = bytes(range(256)) * 64
    root = tmp_path / "held"
    (root / "eeg").mkdir(parents=True)
    (root / "eeg" / "sub-01_run-00.edf").write_bytes(data)
    dv = f.dataset_version(s, f.dataset(s, slug="held"), path=str(root))
    checksum = "sha256:" + hashlib.sha256(data).hexdigest()
    f.recording(s, dv, checksum=checksum, eeg_path="eeg/sub-01_run-00.edf")
    return checksum, data


def _worker_headers(s: Session) -> dict[str, str]:
    admin = f.user(s, Role.ADMIN)
    _, secret = auth.create_token(s, admin, name="gpu-host-1", scopes=["worker"])
    return {"Authorization": f"Bearer {secret}"}


def test_the_worker_scope_stands_alone_and_only_the_cli_mints_it(db_session: Session) -> None:
    s = db_session
    admin, researcher = f.user(s, Role.ADMIN), f.user(s)
    token, _ = auth.create_token(s, admin, scopes=["worker"])
    assert token.scopes == ["worker"]
    with pytest.raises(BadRequest, match="stands alone"):
        auth.create_token(s, admin, scopes=["worker", "read"])
    with pytest.raises(Forbidden, match="researcher cannot hold the 'worker'"):
        auth.create_token(s, researcher, scopes=["worker"])
    # A login or a token by default never carries it; a token cannot mint one (API, web).
    assert "worker" not in auth.issue_login_token(s, admin, name="login")[0].scopes
    assert "worker" not in auth.create_token(s, admin)[0].scopes
    with pytest.raises(Forbidden, match="lacks 'worker'"):
        auth.create_token(s, admin, scopes=["worker"], within=frozenset({"read", "write", "admin"}))


def test_a_worker_fetches_a_recording_whole_and_by_range(
    client: TestClient, db_session: Session, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = db_session
    checksum, data = _held_out_file(s, tmp_path)
    headers = _worker_headers(s)
    with caplog.at_level(logging.INFO, logger="szbench.workers.service"):
        whole = client.get(FETCH.format(checksum=checksum), headers=headers)
        assert whole.status_code == 200, whole.text
        assert whole.content == data
        assert whole.headers["x-szbench-checksum"] == checksum
        assert whole.headers["accept-ranges"] == "bytes"
        hex_only = checksum.removeprefix("sha256:")
        tail = client.get(
            FETCH.format(checksum=hex_only), headers={**headers, "Range": "bytes=1000-"}
        )
        assert tail.status_code == 206
        assert tail.content == data[1000:]
    fetches = [r for r in caplog.records if r.getMessage().startswith("worker fetch")]
    assert len(fetches) == 2
    assert "range bytes=1000-" in fetches[1].getMessage()
    assert str(tmp_path) not in whole.text

    missing = client.get(FETCH.format(checksum="0" * 64), headers=headers)
    assert missing.status_code == 404
    bad = client.get(FETCH.format(checksum="not-a-digest"), headers=headers)
    assert bad.status_code == 400
    assert "checksum" in bad.json()["detail"]


def test_only_worker_tokens_fetch(client: TestClient, db_session: Session, tmp_path: Path) -> None:
    s = db_session
    checksum, _ = _held_out_file(s, tmp_path)
    url = FETCH.format(checksum=checksum)
    assert client.get(url).status_code == 401
    admin = f.user(s, Role.ADMIN)
    for scopes in (["read", "write", "admin"], ["read"]):
        answer = client.get(url, headers=f.headers(s, admin, scopes))
        assert answer.status_code == 403, scopes
        assert "worker tokens only" in answer.json()["detail"]
    # A worker token whose account stopped being an admin's stops working.
    worker_admin = f.user(s, Role.ADMIN)
    _, secret = auth.create_token(s, worker_admin, scopes=["worker"])
    worker_admin.role = Role.RESEARCHER
    s.flush()
    demoted = client.get(url, headers={"Authorization": f"Bearer {secret}"})
    assert demoted.status_code == 403


def test_fetches_are_rate_limited_per_token(
    client: TestClient, db_session: Session, tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_WORKER_FETCHES_PER_MINUTE", "2")
    get_settings.cache_clear()
    s = db_session
    checksum, _ = _held_out_file(s, tmp_path)
    headers, other = _worker_headers(s), _worker_headers(s)
    url = FETCH.format(checksum=checksum)
    assert [client.get(url, headers=headers).status_code for _ in range(2)] == [200, 200]
    refused = client.get(url, headers=headers)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert client.get(url, headers=other).status_code == 200  # another token, its own count


_PER_REQUEST = re.compile(
    rb'nonce="[^"]*"|nonce-[A-Za-z0-9+/=_-]+|value="[A-Za-z0-9_.-]{20,}"'
    rb'|<header class="site">.*?</header>',
    re.DOTALL,
)


def _same_page(a: bytes, b: bytes) -> bool:
    """Equal but for what each request makes anew (CSP nonces, form tokens) and the site's
    navigation (links for a signed-in caller: the page's content is what counts)."""
    return _PER_REQUEST.sub(b"", a) == _PER_REQUEST.sub(b"", b)


def _routes(routes: list[Any]) -> Iterator[tuple[str, set[str]]]:
    """``(path, methods)`` of every endpoint, included routers walked into (FastAPI keeps an
    included router as one entry whose effective routes carry the prefixed paths)."""
    for route in routes:
        nested = getattr(route, "effective_candidates", None)
        if nested is not None:
            yield from _routes(nested())
        elif getattr(route, "methods", None) and getattr(route, "path", None):
            yield route.path, set(route.methods)


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}:]+(:path)?\}", "1", path)


@pytest.mark.slow
def test_a_worker_token_is_refused_by_every_other_route(
    app: FastAPI, client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    """Every route and method of the app, called with a worker token, answers 401/403 or
    exactly what an anonymous caller gets (public pages and health checks)."""
    s = db_session
    _held_out_file(s, tmp_path)
    headers = _worker_headers(s)
    checked = 0
    table = list(_routes(app.routes))
    assert FETCH in {path for path, _ in table}  # the walk sees the API's routes
    for path, methods in table:
        if path == FETCH:
            continue
        for method in sorted(methods - {"HEAD", "OPTIONS"}):
            url = _concrete(path)
            as_worker = client.request(method, url, headers=headers)
            checked += 1
            if as_worker.status_code in (401, 403):
                continue
            anonymous = client.request(method, url)
            assert as_worker.status_code == anonymous.status_code, (method, path)
            if as_worker.status_code < 300:
                assert _same_page(as_worker.content, anonymous.content), (method, path)
    assert checked > 100
