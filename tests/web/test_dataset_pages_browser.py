"""Issue 16 points 4-6 in Chromium at 1280 and 390 px without Docker or a worker: How to
submit (limits from the settings, the starter), dataset pages (held-out totals only, the
public sample's subjects and download) and the owner's run log on a public sample but not on
held-out data. tests/web/test_demo.py walks the same pages after a real upload (Docker).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from szbench.datasets import service as dataset_service
from szbench.db import session_scope
from szbench.models import DatasetKind, EvaluationKind, RunOutcome
from tests.platform import factories as f

from .browsing import Site, Watched, browser_site, fits, sign_in
from .conftest import PASSWORD
from .test_dataset_pages import _prepared

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
OWNER = "owner@example.org"
LOG = "loading weights\nbaseline: 2 seizure event(s) in 1800 s\n"


def _seed(tmp_path: Path) -> dict[str, int]:
    with session_scope() as s:
        owner = f.user(s, email=OWNER, password=PASSWORD, name="Owner")
        av = f.version(s, f.algorithm(s, owner, name="mine"))
        ids = {}
        for slug, kind in (
            ("public-sample", DatasetKind.PUBLIC_SAMPLE),
            ("held", DatasetKind.HELD_OUT),
        ):
            ds = dataset_service.create_dataset(
                s,
                slug=slug,
                kind=kind,
                licence="CC-BY-4.0",
                citation=f"Cite {slug}.",
                confirm_public=True,
            )
            dv = dataset_service.register_dataset_version(
                s,
                ds,
                version="v1",
                prepared_path=_prepared(tmp_path / slug, {"07": [2], "08": [1]}),
            )
            ev = f.evaluation(
                s,
                av,
                dv,
                kind=EvaluationKind.SMOKE_TEST if slug == "public-sample" else EvaluationKind.FULL,
            )
            s.refresh(dv, ["recordings"])
            f.run(
                s,
                ev,
                dv.recordings[0],
                RunOutcome.CRASHED,
                submitter_message="The algorithm exited with code 1.",
                admin_log="host: worker-9 /srv/hidden/path\n--- container log (tail) ---\n" + LOG,
            )
            ids[slug] = ev.id
        return ids


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Site]:
    # An unusual time limit, so that How to submit visibly quotes the settings.
    with browser_site(
        settings_env, pg_url, lambda: _seed(tmp_path), SZBENCH_RUNNER_TIMEOUT_S="777"
    ) as running:
        yield running


@pytest.mark.parametrize("width", WIDTHS)
def test_how_to_submit(watched: Watched, site: Site) -> None:
    page = watched.page()
    page.goto(f"{site.url}/how-to-submit")
    fits(page)
    main = page.inner_text("main")
    assert "/data/$INPUT" in main
    assert "777 s" in page.inner_text("#limits")
    with page.expect_download() as download:
        page.click("#starter-link")
    data = Path(download.value.path()).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        assert "szbench-starter/Dockerfile" in archive.getnames()
    page.click("#sample-link")
    page.wait_for_url(f"{site.url}/datasets/public-sample")


@pytest.mark.parametrize("width", WIDTHS)
def test_dataset_pages(watched: Watched, site: Site) -> None:
    page = watched.page()
    page.goto(f"{site.url}/datasets")
    fits(page)
    page.get_by_role("link", name="Held").click()
    page.wait_for_url(f"{site.url}/datasets/held")
    fits(page)
    assert page.inner_text("#licence") == "CC-BY-4.0"
    assert page.locator("#subjects").count() == 0
    assert "counted only in total" in page.inner_text("#subjects-hidden")
    # 2 subjects, 2 recordings, 1.0 h, 3 seizures.
    cells = page.locator("#versions tbody td").all_inner_texts()
    assert cells[2:6] == ["2", "2", "1.0", "3"]
    sign_in(page, site.url, OWNER)
    page.goto(f"{site.url}/datasets/public-sample")
    fits(page)
    rows = page.locator("#subjects tbody tr").all_inner_texts()
    assert [r.split("\t")[0] for r in rows] == ["07", "08"]
    with page.expect_download() as download:
        page.click("#download-sample")
    assert download.value.suggested_filename == "public-sample-v1.tar.gz"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_owner_reads_the_log_of_a_public_sample_run_only(watched: Watched, site: Site) -> None:
    page = watched.page()
    sign_in(page, site.url, OWNER)
    page.goto(f"{site.url}/evaluations/{site.ids['public-sample']}")
    fits(page)
    page.click("details.run-log summary")
    assert page.inner_text("details.run-log pre").strip() == LOG.strip()
    assert "/srv/hidden/path" not in page.content()
    page.goto(f"{site.url}/evaluations/{site.ids['held']}")
    fits(page)
    assert page.locator("details.run-log").count() == 0
    assert "seizure event" not in page.content()
