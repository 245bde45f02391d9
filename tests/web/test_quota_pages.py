"""The web pages under the held-out quota: the refusal is shown, with the limit named."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import DatasetKind, Evaluation
from tests.platform import factories as f

from .conftest import PASSWORD, post_form, sign_in


@pytest.mark.slow
def test_a_rerun_past_the_held_out_limit_is_refused_on_the_page(
    client: TestClient, db_session: Session, sent: list[Any], settings_env: pytest.MonkeyPatch
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    owner = f.user(db_session, email="quota-owner@example.org", password=PASSWORD)
    version = f.version(db_session, f.algorithm(db_session, owner))  # uses the only one
    dv = f.dataset_version(db_session, f.dataset(db_session, DatasetKind.HELD_OUT))
    f.recording(db_session, dv)
    done = f.evaluation(db_session, version, dv)
    sign_in(client, "quota-owner@example.org")
    page = client.get("/submit")
    assert "<strong>0 of 1</strong> left in the last 24 hours" in page.text
    before = db_session.scalar(select(func.count(Evaluation.id)))

    r = post_form(client, "/submissions", f"/evaluations/{done.id}/rerun")

    assert r.status_code == 429
    assert "Held-out evaluations: you have used all 1 of the last 24 hours" in r.text
    assert db_session.scalar(select(func.count(Evaluation.id))) == before
    assert sent == []
