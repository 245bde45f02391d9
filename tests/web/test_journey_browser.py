"""Issue 23.6-23.9 in Chromium at 1280 and 390 px against uvicorn on the real PostgreSQL:
form errors by their field, the evaluation page's live progress, the smoke-test page,
the submit page's preflight and bidirectional text.

Each page is watched for console errors (a script or style blocked by the content security
policy is one), checked for sideways scrolling and, where it changes, for axe violations.
"""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import (
    Algorithm,
    DatasetKind,
    Disclosure,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Role,
    RunOutcome,
    VersionStatus,
)
from tests.platform import factories as f

from .browsing import Site, Watched, fits_and_passes_axe, sign_in
from .conftest import DATABASES, PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

WIDTHS = (1280, 390)
ADMIN = "journey-admin@example.org"
ALICE = "journey-alice@example.org"


LONG_AGO = datetime.now(UTC) - timedelta(days=1)


def seed() -> dict[str, int]:
    """The site the tests walk (conftest's ``site`` serves it)."""
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Ada")
        alice = f.user(s, email=ALICE, password=PASSWORD, name="Alice")
        ds = f.dataset(
            s, DatasetKind.HELD_OUT, slug="journey-held", title="Held out",
            disclosure=Disclosure.SUBJECT,
        )  # fmt: skip
        dv = f.dataset_version(s, ds, version="v1")
        # A title with a right-to-left override (U+202E) in it.
        algo = f.algorithm(s, alice, name="journey-algo", title="Journey \u202ereversed")
        version = f.version(s, algo, version="1.0")
        ev = f.evaluation(s, version, dv)
        f.result(s, ev, {f"0{i}": {"event_f1": v} for i, v in enumerate((0.9, 0.8, 0.7), 1)})
        other = f.algorithm(s, alice, name="a-rather-long-algorithm-name-for-phones")
        ev2 = f.evaluation(s, f.version(s, other, version="2.0.0-beta"), dv)
        f.result(s, ev2, {f"0{i}": {"event_f1": v} for i, v in enumerate((0.5, 0.6, 0.2), 1)})
        ids = {"alice": alice.id, "algo": algo.id, "evaluation": ev.id, "evaluation2": ev2.id}
        # Two running evaluations (one per width) with one of four recordings run long ago.
        for width in WIDTHS:
            running = f.evaluation(
                s, version, dv, status=EvaluationStatus.RUNNING, recordings_total=4,
                recordings_done=1, started_at=LONG_AGO,
            )  # fmt: skip
            f.run(s, running, f.recording(s, dv), finished_at=LONG_AGO)
            ids[f"running-{width}"] = running.id
        # A version its smoke test rejected.
        rejected = f.version(
            s, algo, version="1.1", status=VersionStatus.REJECTED,
            status_message="Smoke test failed (crashed): the container exited with code 1",
        )  # fmt: skip
        sample = f.dataset_version(s, f.dataset(s, DatasetKind.PUBLIC_SAMPLE, slug="sample"))
        smoke = f.evaluation(s, rejected, sample, kind=EvaluationKind.SMOKE_TEST,
                             recordings_total=1, recordings_done=1)  # fmt: skip
        f.run(s, smoke, f.recording(s, sample), outcome=RunOutcome.CRASHED)
        ids["smoke"] = smoke.id
        return ids


def _finish_runs(evaluation_id: int) -> None:
    """The worker's part: the other three recordings ran (before the clock's last tick)."""
    with session_scope() as s:
        ev = s.get_one(Evaluation, evaluation_id)
        for _ in range(3):
            f.run(s, ev, f.recording(s, ev.dataset_version), finished_at=LONG_AGO)
        ev.recordings_done = 4


def _finish(evaluation_id: int) -> None:
    with session_scope() as s:
        ev = s.get_one(Evaluation, evaluation_id)
        ev.status, ev.finished_at = EvaluationStatus.DONE, datetime.now(UTC)


@pytest.mark.parametrize("width", WIDTHS)
def test_form_errors_sit_by_their_field(watched: Watched, site: Site, width: int) -> None:
    watched.allowed.append("status of 400 (Bad Request)")
    page = watched.page()
    # Sign-up with a password the server refuses: the message is under the password field
    # and the typed name and address stay.
    page.goto(f"{site.url}/signup")
    page.get_by_label("Name").fill("Typed Name")
    page.get_by_label("Email").fill(f"new{width}@example.org")
    page.get_by_label("Password").fill("password1234")
    page.get_by_role("button", name="Create account").click()
    page.wait_for_load_state()
    assert "common" in page.locator("#password-error").inner_text()
    assert page.get_by_label("Password").get_attribute("aria-invalid") == "true"
    assert page.get_by_label("Name").input_value() == "Typed Name"
    assert page.get_by_label("Email").input_value() == f"new{width}@example.org"
    assert "Bad request" not in page.inner_text("main")
    fits_and_passes_axe(page, f"/signup with an error at {width} px")

    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/tokens")
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("Expires after (days, empty: never)").fill("ten")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_load_state()
    assert page.locator("#expires-in-days-error").inner_text().endswith("Give a whole number.")
    assert page.get_by_label("Name").input_value() == "laptop"
    fits_and_passes_axe(page, f"/tokens with an error at {width} px")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_evaluation_page_follows_progress_live(
    watched: Watched, site: Site, width: int
) -> None:
    page = watched.page()
    sign_in(page, site.url, ALICE)
    evaluation_id = site.ids[f"running-{width}"]
    page.goto(f"{site.url}/evaluations/{evaluation_id}")
    count = page.locator('[data-field="count"]')
    assert count.inner_text().startswith("1 of 4 recordings run as of ")
    # Held-out data for its owner: quarters as of the clock's tick, said so on the page.
    assert "in quarters" in page.locator("#coarse-note").inner_text()
    assert page.locator("#eta").is_visible()
    expect(page.locator("#live-note")).to_have_text("Updating at each tick of the progress clock.")
    fits_and_passes_axe(page, f"/evaluations/{evaluation_id} running at {width} px")
    # The page polls the progress answer; a coarse one moves only at a tick (here the runs
    # are dated before the last one), and the page then reloads with the server's words.
    _finish_runs(evaluation_id)
    expect(count).to_contain_text("4 of 4", timeout=20000)
    assert "computing the scores" in count.inner_text()
    assert page.locator("#eval-state").inner_text() == "scoring"
    page.evaluate("window.notReloaded = true")
    # Over: the page reloads once to show the results.
    _finish(evaluation_id)
    expect(page.locator("#eval-state")).to_have_text("done", timeout=20000)
    page.wait_for_load_state()
    assert page.evaluate("window.notReloaded") is None
    assert page.locator("#live-note").count() == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_a_rejected_smoke_test_is_one_clear_page(watched: Watched, site: Site, width: int) -> None:
    page = watched.page()
    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/evaluations/{site.ids['smoke']}")
    box = page.locator("#smoke-rejected")
    assert box.is_visible()
    assert "rejected because the container exited with code 1 (crashed)." in box.inner_text()
    assert "hidden until published" not in page.inner_text("main")
    assert page.locator("#eval-state").inner_text() == "rejected"
    page.get_by_role("link", name="Upload a fixed version").click()
    page.wait_for_load_state()
    assert page.url.startswith(f"{site.url}/submit")
    page.go_back()
    fits_and_passes_axe(page, f"smoke rejection at {width} px")


def _image_tar(path: Path) -> Path:
    """A small archive shaped as `docker save` writes it (a manifest naming one image)."""
    manifest = json.dumps([{"Config": "c.json", "RepoTags": ["x:1"], "Layers": []}]).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in (("c.json", b"{}"), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("width", WIDTHS)
def test_the_submit_page_checks_before_sending_a_byte(
    watched: Watched, site: Site, width: int, tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    page = watched.page()
    sign_in(page, site.url, ALICE)
    sent: list[str] = []
    page.on(
        "request", lambda r: sent.append(r.method + " " + r.url) if "/uploads" in r.url else None
    )
    page.goto(f"{site.url}/submit")
    page.get_by_label("Short name").fill(f"new-{width}")
    page.get_by_label("Version label").fill("1.0")
    # Not an image archive: refused here, in the server's words.
    bad = tmp_path / "not-an-image.tar"
    bad.write_bytes(b"plain text, no tar header\n" * 40)
    page.set_input_files("#file", str(bad))
    page.get_by_role("button", name="Submit").click()
    alert = page.locator("#form-error")
    # Under the archive's field (the drop zone stands for the hidden file input).
    expect(page.locator("#file-error")).to_contain_text("not-an-image.tar: not a tar archive")
    expect(alert).to_have_text("Please correct the field marked below.")
    assert page.locator("#drop-zone").get_attribute("aria-invalid") == "true"
    # Two images in one archive: the manifest is read here too.
    two = tmp_path / "two.tar"
    with tarfile.open(two, "w") as tar:
        data = json.dumps([{"Config": "a"}, {"Config": "b"}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    page.set_input_files("#file", str(two))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#file-error")).to_contain_text("holds 2 images; submit exactly one")
    # A good archive, but the day's submissions are used up: refused before the upload.
    settings_env.setenv("SZBENCH_SUBMISSIONS_PER_DAY", "0")
    get_settings.cache_clear()
    watched.allowed.append("status of 429")
    page.set_input_files("#file", str(_image_tar(tmp_path / "good.tar")))
    page.get_by_role("button", name="Submit").click()
    expect(alert).to_contain_text("you have used all 0 submissions")
    assert page.locator("#file-error").count() == 0  # a quota is no field's fault
    assert sent == []  # no upload session opened, no byte sent
    with session_scope() as s:
        assert s.scalar(select(Algorithm.id).where(Algorithm.name == f"new-{width}")) is None
    fits_and_passes_axe(page, f"/submit refused at {width} px")


@pytest.mark.parametrize("width", WIDTHS)
def test_bidi_text_404_and_the_phone_comparison(watched: Watched, site: Site, width: int) -> None:
    page = watched.page()
    sign_in(page, site.url, ALICE)
    # The override in the title stays inside it: what follows it is not reordered.
    page.goto(f"{site.url}/algorithms/{site.ids['algo']}")
    title = page.locator("h1 bdi").bounding_box()
    name = page.locator("h1 .muted").bounding_box()
    assert title is not None
    assert name is not None
    assert name["x"] > title["x"] or name["y"] > title["y"]
    assert "\u2068" in page.locator("h1 bdi").inner_text()  # the isolate around the title
    # A page that does not exist, for a signed-in user: the navigation stays signed in.
    watched.allowed.append("status of 404")
    page.goto(f"{site.url}/no/such/page")
    assert page.locator("h1").inner_text() == "Not found"
    assert page.locator("form[action='/logout']").count() == 1
    assert page.locator("a[href^='/login']").count() == 0
    watched.allowed.clear()
    # The comparison on a phone: the difference and the p-value are on screen.
    first, second = site.ids["evaluation"], site.ids["evaluation2"]
    page.goto(f"{site.url}/compare?evaluation={first}&evaluation={second}")
    row = page.locator("#paired-tests tbody tr").first
    viewport = page.viewport_size
    assert viewport is not None
    for label in ("Mean difference", "p-value"):
        cell = row.locator(f"td[data-label='{label}']")
        box = cell.bounding_box()
        assert box is not None
        assert box["x"] + box["width"] <= viewport["width"], (label, box)
    assert row.locator("td[data-label='Mean difference']").inner_text().strip() == "0.367"
    fits_and_passes_axe(page, f"/compare at {width} px")


#: What a validator or a program says, never a person (tests/web/test_every_form.py walks
#: the other forms with the same list).
VALIDATOR_WORDS = ("String should", "Input should", "Field required", "body.", "pattern")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_submit_page_says_what_is_wrong_under_each_field(
    watched: Watched, site: Site, width: int, tmp_path: Path
) -> None:
    """Issue 30.5: the submit page's refusals sit under their field in the page's words,
    whether the page finds them (a name not in the short-name form, no version) or the
    server does (a title too long for it: a 422 in the validator's wording; a version label
    that is taken), and only what belongs to no field (a quota) goes in the box above."""
    page = watched.page()
    sign_in(page, site.url, ALICE)
    page.goto(f"{site.url}/submit")
    page.get_by_label("Short name").fill("Not A Short Name!")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#form-error")).to_have_text("Please correct the fields marked below.")
    assert "lower-case letters, digits" in page.locator("#name-error").inner_text()
    assert page.locator("#version-error").inner_text() == "Required."
    assert "Choose or drop an image archive" in page.locator("#file-error").inner_text()
    name = page.get_by_label("Short name")
    assert name.get_attribute("aria-invalid") == "true"
    assert "name-error" in (name.get_attribute("aria-describedby") or "")
    fits_and_passes_axe(page, f"/submit with field errors at {width} px")

    # The server's refusals: a title longer than it takes (the page has no check of its
    # own for a value set by a script) comes back as a 422 in the validator's words.
    watched.allowed.append("status of 422")
    watched.allowed.append("status of 409")
    name.fill(f"titled-{width}")
    page.get_by_label("Version label").fill("1.0")
    page.evaluate("document.getElementById('title').value = 'T'.repeat(201)")
    page.set_input_files("#file", str(_good_archive(tmp_path)))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#title-error")).to_have_text("At most 200 characters.", timeout=20_000)
    assert page.locator("#name-error").count() == 0  # the earlier errors are gone
    # A taken version label of an existing algorithm: under the version field.
    page.get_by_label("Algorithm", exact=True).select_option(str(site.ids["algo"]))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#version-error")).to_contain_text("already has a version '1.0'")
    main = page.inner_text("main")
    for words in VALIDATOR_WORDS:
        assert words not in main, words
    fits_and_passes_axe(page, f"/submit with a server's field error at {width} px")


def _good_archive(tmp_path: Path) -> Path:
    from tests.platform.images import docker_save

    archive = tmp_path / "good-image.tar"
    docker_save(archive)
    return archive
