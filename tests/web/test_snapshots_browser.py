"""Issue 23 point 3 in Chromium at 1280 and 390 px: an admin takes a snapshot from the
leaderboard page, anyone reads it at its stable address with its hash and image digests,
and "Cite this" gives BibTeX and CITATION.cff for the snapshot, an entry and a dataset
version, with addresses built from SZBENCH_PUBLIC_URL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from szbench.db import session_scope
from szbench.models import Role
from tests.platform import factories as f

from .browsing import Site, Watched, browser_site, fits, fits_and_passes_axe, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
ADMIN = "admin@example.org"
PUBLIC_URL = "https://bench.example.org"
EXACT = 0.5123457
TITLE = "Deep {seizure} net: 100% \\recall"


def _seed() -> dict[str, Any]:
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Admin")
        owner = f.user(s, name="Owner")
        dataset = f.dataset(s, slug="held", title="Held-out EEG", citation="Smith 2025.")
        dv = f.dataset_version(s, dataset, version="v1", manifest_checksum="sha256:feed")
        algorithm = f.algorithm(s, owner, name="deep", title=TITLE, authors="Ada Lovelace")
        version = f.version(s, algorithm)
        evaluation = f.evaluation(s, version, dv)
        figures = {"event_f1": EXACT, "event_sensitivity": EXACT, "event_precision": EXACT}
        f.result(s, evaluation, {"01": figures, "02": figures})
        return {
            "evaluation": evaluation.id,
            "digest": version.image_digest,
            "algorithm": algorithm.id,
        }


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch) -> Iterator[Site]:
    with browser_site(settings_env, pg_url, _seed, SZBENCH_PUBLIC_URL=PUBLIC_URL) as running:
        yield running


@pytest.mark.parametrize("width", WIDTHS)
def test_an_admin_takes_a_snapshot_and_anyone_cites_it(
    watched: Watched, site: Site, width: int
) -> None:
    page = watched.page()
    page.goto(f"{site.url}/leaderboards/held")
    fits(page)
    assert page.locator("#no-snapshots").is_visible()
    assert page.locator("#take-snapshot").count() == 0  # not for visitors

    sign_in(page, site.url, ADMIN)
    page.goto(f"{site.url}/leaderboards/held")
    page.get_by_role("button", name="Take a snapshot").click()
    page.wait_for_url(re.compile(r"/leaderboards/held/snapshots/\d+"))
    snapshot_id = int(page.url.split("/snapshots/")[1].split("?")[0])
    fits(page)
    assert page.inner_text(".flash") == f"Snapshot {snapshot_id} taken."
    stable = f"{PUBLIC_URL}/leaderboards/held/snapshots/{snapshot_id}"
    assert page.inner_text("#stable-url") == stable
    assert re.fullmatch(r"[0-9a-f]{64}", page.inner_text("#content-hash"))
    row = page.locator(f"#entry-{site.ids['evaluation']}")
    assert site.ids["digest"] in row.inner_text()
    # The figures as an anonymous visitor sees them (rounded), not the admin's exact ones.
    assert "0.51" in row.inner_text()
    assert str(EXACT) not in page.content()
    assert "@misc{szbench-held-v1-snapshot-" in page.inner_text("#bibtex")

    # Again, unchanged: the same snapshot.
    page.goto(f"{site.url}/leaderboards/held")
    page.get_by_role("button", name="Take a snapshot").click()
    page.wait_for_url(re.compile(rf"/snapshots/{snapshot_id}\b"))
    assert "has not changed since snapshot" in page.inner_text(".flash")

    # Anyone: listed under the board, the page, the entry's citation.
    visitor = watched.context.browser.new_context(viewport={"width": width, "height": 900})
    other = visitor.new_page()
    other.goto(f"{site.url}/leaderboards/held")
    other.get_by_role("link", name=f"Snapshot {snapshot_id}").click()
    other.wait_for_url(f"{site.url}/leaderboards/held/snapshots/{snapshot_id}")
    fits_and_passes_axe(other, f"the snapshot page at {width} px")
    bib_link = other.get_by_role("link", name=re.compile(r"^BibTeX for Deep"))
    bib = other.request.get(site.url + bib_link.get_attribute("href")).text()
    assert bib.startswith(f"@misc{{szbench-held-snapshot-{snapshot_id}-evaluation-")
    assert r"Deep \textbraceleft{}seizure\textbraceright{} net: 100\% \textbackslash{}recall" in bib
    assert f"{stable}?entry={site.ids['evaluation']}" in bib
    cff_href = other.get_by_role("link", name=re.compile(r"^CITATION.cff for Deep")).get_attribute(
        "href"
    )
    cff = yaml.safe_load(other.request.get(site.url + cff_href).text())
    assert cff["cff-version"] == "1.2.0"
    assert cff["title"] == TITLE
    assert cff["authors"] == [{"name": "Ada Lovelace"}]
    snapshot_cff = yaml.safe_load(
        other.request.get(site.url + other.get_attribute("#cite-cff", "href")).text()
    )
    assert snapshot_cff["url"] == stable
    # The cited entry is marked when its address is opened.
    other.goto(f"{stable.replace(PUBLIC_URL, site.url)}?entry={site.ids['evaluation']}")
    assert other.get_attribute(f"#entry-{site.ids['evaluation']}", "aria-current") == "true"
    visitor.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_dataset_version_offers_cite_this(watched: Watched, site: Site, width: int) -> None:
    page = watched.page()
    page.goto(f"{site.url}/datasets/held")
    assert page.locator("#cite-this").is_visible()
    fits_and_passes_axe(page, f"the dataset page at {width} px")
    bib = page.request.get(
        site.url + page.get_by_role("link", name="BibTeX for version v1").get_attribute("href")
    ).text()
    assert bib.startswith("@misc{szbench-dataset-held-v1,")
    assert f"{PUBLIC_URL}/datasets/held?version=v1" in bib
    assert "sha256:feed" in bib
    cff = yaml.safe_load(
        page.request.get(
            site.url
            + page.get_by_role("link", name="CITATION.cff for version v1").get_attribute("href")
        ).text()
    )
    assert cff["type"] == "dataset"
    assert cff["version"] == "v1"
    assert cff["title"] == "Held-out EEG"
    # An entry of the live board, from its algorithm page: what ran, no figures.
    page.goto(f"{site.url}/algorithms/{site.ids['algorithm']}?evaluation={site.ids['evaluation']}")
    fits(page)
    href = page.locator("#cite-evaluation").get_by_role("link", name="BibTeX").get_attribute("href")
    bib = page.request.get(site.url + href).text()
    assert bib.startswith(f"@misc{{szbench-evaluation-{site.ids['evaluation']},")
    assert site.ids["digest"] in bib
    assert "0.51" not in bib
