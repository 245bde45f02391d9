"""The comparison page: chosen entries side by side, paired tests, disclosure notice."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.models import DatasetKind, Disclosure
from tests.platform import factories as f

from .conftest import PASSWORD, sign_in


def _two_entries(session: Session, disclosure: Disclosure) -> tuple[Any, Any, Any]:
    ds = f.dataset(session, DatasetKind.HELD_OUT, disclosure=disclosure)
    dv = f.dataset_version(session, ds)
    evs = []
    for name, values in (("alpha", (0.9, 0.8, 0.7)), ("beta", (0.5, 0.6, 0.2))):
        version = f.version(session, f.algorithm(session, f.user(session), name=name))
        ev = f.evaluation(session, version, dv)
        f.result(session, ev, {f"0{i}": {"event_f1": v} for i, v in enumerate(values, 1)})
        evs.append(ev)
    return ds, evs[0], evs[1]


def test_the_page_shows_both_columns_the_chart_and_the_test(
    client: TestClient, db_session: Session
) -> None:
    ds, a, b = _two_entries(db_session, Disclosure.SUBJECT)
    board = client.get(f"/leaderboards/{ds.slug}")
    assert 'id="compare-link"' in board.text
    chooser = client.get(f"/compare?dataset={ds.slug}")
    assert chooser.status_code == 200
    assert f'name="evaluation" value="{a.id}"' in chooser.text
    page = client.get(f"/compare?evaluation={a.id}&evaluation={b.id}")
    assert page.status_code == 200, page.text
    assert 'id="paired-tests"' in page.text
    # Three subjects, all better under alpha: 2 of 8 sign flips are as extreme.
    assert "0.2500" in page.text
    assert '<td class="num">0.900</td><td class="num">0.500</td>' in page.text
    assert 'class="chart bars grouped"' in page.text
    assert "compare-hidden" not in page.text


def test_aggregate_disclosure_says_so_instead(client: TestClient, db_session: Session) -> None:
    _, a, b = _two_entries(db_session, Disclosure.AGGREGATE)
    f.user(db_session, email="cmp@example.org", password=PASSWORD)
    sign_in(client, "cmp@example.org")
    page = client.get(f"/compare?evaluation={a.id}&evaluation={b.id}")
    assert page.status_code == 200
    assert "discloses aggregate figures only" in page.text
    # Three subjects: no test, and why, with the smallest p three subjects can give.
    assert 'class="test-withheld"' in page.text
    assert "smallest p-value this test can give is 0.25" in page.text
    assert 'id="subject-table"' not in page.text
