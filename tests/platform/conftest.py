"""The API under test: the real app on the real PostgreSQL, each test rolled back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.api.deps import get_session, get_side_session
from szbench.app import create_app
from szbench.config import get_settings
from szbench.leaderboards import service as leaderboards
from szbench.leaderboards import statistics
from szbench.results import service as results


@pytest.fixture
def app(db_session: Session, settings_env: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    # Cheap password hashes keep the suite fast; the cost is a setting.
    settings_env.setenv("SZBENCH_PASSWORD_SCRYPT_N", "1024")
    get_settings.cache_clear()
    application = create_app()

    def session_override() -> Iterator[Session]:
        # Keep what the test set up (release its savepoint) so that a request that fails
        # and rolls back loses only its own changes, as with a real per-request session.
        db_session.commit()
        try:
            yield db_session
            db_session.commit()  # releases a savepoint; the test's outer transaction stays
        except BaseException:
            db_session.rollback()
            raise

    application.dependency_overrides[get_session] = session_override
    application.dependency_overrides[get_side_session] = session_override
    statistics.clear_cache()
    leaderboards.clear_cache()
    results.clear_cache()
    yield application
    statistics.clear_cache()
    leaderboards.clear_cache()
    results.clear_cache()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
