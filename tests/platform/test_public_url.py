"""Links into the site come from SZBENCH_PUBLIC_URL only, never from the request's Host
header; with e-mail on and no public URL the server does not start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from szbench import config
from szbench.app import create_app
from szbench.cli.main import app as cli
from szbench.config import Settings, get_settings
from szbench.models import Role
from tests.platform import factories as f
from tests.platform.smtp_sink import Sink, smtp_sink

FORGED = {"Host": "evil.example"}
SITE = "https://bench.example.org"


@pytest.fixture
def sink(settings_env: pytest.MonkeyPatch) -> Iterator[Sink]:
    with smtp_sink() as server:
        settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
        settings_env.setenv("SZBENCH_SMTP_PORT", str(server.port))
        settings_env.setenv("SZBENCH_SMTP_STARTTLS", "false")
        settings_env.setenv("SZBENCH_PUBLIC_URL", SITE + "/")
        get_settings.cache_clear()
        yield server


def test_mailed_links_use_the_public_url_whatever_host_the_request_names(
    client: TestClient, db_session: Session, sink: Sink
) -> None:
    f.user(db_session, email="victim@example.org", password="old-password-17")
    r = client.post(
        "/api/v1/auth/password-reset/request", json={"email": "victim@example.org"}, headers=FORGED
    )
    assert r.status_code == 202
    signup = client.post(
        "/api/v1/auth/signup",
        json={"email": "fresh@example.org", "password": "signup-secret-81"},
        headers=FORGED,
    )
    assert signup.status_code == 201, signup.text
    (reset,) = sink.links("/password/reset")
    (verify,) = sink.links("/verify")
    assert reset.startswith(f"{SITE}/password/reset?token=")
    assert verify.startswith(f"{SITE}/verify?token=")
    assert all("evil.example" not in str(m) for m in sink.messages)


def test_without_a_public_url_an_admin_link_is_a_path_never_the_host(
    client: TestClient, db_session: Session
) -> None:
    user = f.user(db_session, password="old-password-17")
    admin_h = {**f.headers(db_session, f.user(db_session, role=Role.ADMIN)), **FORGED}
    r = client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=admin_h)
    assert r.status_code == 200, r.text
    assert r.json()["url"].startswith("/password/reset?token=")


def test_with_a_public_url_an_admin_link_is_under_it(
    client: TestClient, db_session: Session, settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_PUBLIC_URL", SITE)
    get_settings.cache_clear()
    user = f.user(db_session, password="old-password-17")
    admin_h = {**f.headers(db_session, f.user(db_session, role=Role.ADMIN)), **FORGED}
    r = client.post(f"/api/v1/users/{user.id}/password-reset", json={}, headers=admin_h)
    assert r.json()["url"].startswith(f"{SITE}/password/reset?token=")


def test_with_mail_on_and_no_public_url_the_app_does_not_start(
    settings_env: pytest.MonkeyPatch,
) -> None:
    settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
    get_settings.cache_clear()
    with pytest.raises(config.ConfigError, match="SZBENCH_PUBLIC_URL is not set"):
        create_app()
    settings_env.setenv("SZBENCH_PUBLIC_URL", SITE)
    get_settings.cache_clear()
    create_app()


def test_with_mail_on_and_no_public_url_szbench_serve_refuses(
    settings_env: pytest.MonkeyPatch,
) -> None:
    served: list[Any] = []
    settings_env.setattr(uvicorn, "run", lambda *a, **kw: served.append((a, kw)))
    settings_env.setenv("SZBENCH_SMTP_HOST", "127.0.0.1")
    get_settings.cache_clear()
    result = CliRunner().invoke(cli, ["serve", "--no-worker"])
    assert result.exit_code == 2, result.output
    assert "SZBENCH_PUBLIC_URL is not set" in result.output
    assert served == []


@pytest.mark.parametrize(
    ("value", "because"),
    [
        ("bench.example.org", "is not an http(s) link"),
        ("javascript:alert(1)", "is not an http(s) link"),
        ("https://user:pw@bench.example.org", "user name or password"),
        ("https://bench.example.org/x", "without a path, query or fragment"),
        ("https://bench.example.org/?next=x", "without a path, query or fragment"),
        ("https://bench.example.org#x", "without a path, query or fragment"),
        ("https://bench.example.org\u2028", "U+2028"),
    ],
)
def test_the_public_url_is_the_sites_address_alone(value: str, because: str) -> None:
    with pytest.raises(ValidationError, match="SZBENCH_PUBLIC_URL") as info:
        Settings(public_url=value)
    assert because in str(info.value)


def test_a_trailing_slash_is_dropped() -> None:
    assert Settings(public_url="https://bench.example.org:8443/").public_url == (
        "https://bench.example.org:8443"
    )
