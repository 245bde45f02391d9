"""The web UI in a real browser, end to end, on the real parts.

Debian's chromium driven by Playwright (never Playwright's own browser download), the app
served by uvicorn on loopback, PostgreSQL, Redis and a real ``celery worker`` running the
baseline algorithm in Docker on synthetic EEG:

an admin creates a public-sample and a held-out dataset and registers prepared versions
(dry run, then confirm); a researcher signs up, uploads the baseline's ``docker save``
tarball by the resumable upload (one chunk's connection is cut on purpose and the page
resumes from the server's offset), watches the smoke test and the held-out evaluation
finish live, queues the public sample, finds the entry on the leaderboard, sorts it, opens
the algorithm page and sees the charts and timelines; tokens and the admin pages too.

Every page is checked for console errors and uncaught page errors. Screenshots of the main
pages go to ``artifacts/screenshots/`` (kept by CI).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from szbench import db
from szbench.auth import service as auth
from szbench.db import session_scope
from szbench.models import Role
from szbench.web import account
from tests.redis_urls import redis_url
from tests.worker import _live_services as live
from tests.worker._pipeline_factories import truncate_all

pytestmark = [pytest.mark.docker, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
REDIS_URL = redis_url(14)
BASELINE_TAG = "szbench-test/baseline:web"
ADMIN = ("admin@example.org", "admin-password-1")
RESEARCHER = ("rita@example.org", "rita-password-1")
# Long enough for image load + smoke test + two held-out runs on a slow CI machine.
EVALUATION_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Prepared synthetic datasets: a public sample (1 subject) and a held-out one (2)."""
    from szbench_worker.datasets import prepare_dataset
    from szbench_worker.synth import generate_dataset

    root = tmp_path_factory.mktemp("web-synth")
    out = {}
    for name, subjects, seed in (("public", 1, 3), ("held", 2, 7)):
        generate_dataset(
            root / f"{name}-bids",
            subjects=subjects,
            hours=10 / 60,
            recording_minutes=10,
            seed=seed,
            seizures_per_hour=12,
        )
        prepare_dataset(root / f"{name}-bids", root / f"{name}-prepared")
        out[name] = root / f"{name}-prepared"
    return out


@pytest.fixture(scope="module")
def baseline_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled baseline built offline and written by ``docker save``."""
    from szbench_worker.docker_runner import build_image, connect, inspect_image
    from szbench_worker.runner import ImageError

    client = connect()
    try:
        try:
            inspect_image("szbench/python-numpy:bookworm", client)
        except ImageError:
            subprocess.run([str(REPO / "scripts" / "build-base-images.sh")], check=True)
        build_image(REPO / "examples" / "baseline", BASELINE_TAG, client)
    finally:
        client.close()
    tar = tmp_path_factory.mktemp("web-image") / "baseline.tar"
    subprocess.run(["docker", "save", "-o", str(tar), BASELINE_TAG], check=True)
    return tar


@dataclass
class Server:
    url: str
    tmp: Path
    worker_log: Path
    host: str


@pytest.fixture
def server(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Server]:
    """uvicorn on loopback and one celery worker, sharing PostgreSQL, Redis and uploads."""
    import uvicorn

    host = f"web-test-{uuid.uuid4().hex[:8]}"
    values = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_BROKER_URL": REDIS_URL,
        "SZBENCH_RUNNER_BACKEND": "docker",
        "SZBENCH_RUNNER_WORK_DIR": str(tmp_path / "runs"),
        "SZBENCH_PIPELINE_WORK_DIR": str(tmp_path / "work"),
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
        "SZBENCH_RUNNER_MEMORY_BYTES": str(1024**3),
        "SZBENCH_RUNNER_TIMEOUT_S": "300",
        "SZBENCH_WORKER_HOST": host,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "web-test-secret-key",
        "SZBENCH_SMOKE_TEST_DATASET": "public-sample",
        "SZBENCH_ALLOW_SIGNUP": "true",
        "SZBENCH_LEADERBOARD_CACHE_S": "0",
    }
    live.use_settings(settings_env, values)
    broker = live.empty_broker(REDIS_URL)
    with session_scope() as session:
        truncate_all(session)
        auth.create_user(session, email=ADMIN[0], password=ADMIN[1], name="Ada", role=Role.ADMIN)

    worker_log = tmp_path / "worker.log"
    cmd = [sys.executable, "-m", "celery", "-A", "szbench_worker.celery_app", "worker"]
    cmd += ["--pool", "solo", "--concurrency", "1", "-Q", "cpu", "-n", f"{host}@%h"]
    cmd += ["--without-mingle", "--without-gossip", "--loglevel", "INFO"]
    worker = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=live.child_env(),
        stdout=open(worker_log, "wb"),  # noqa: SIM115 (closed with the process)
        stderr=subprocess.STDOUT,
    )

    from szbench.app import create_app

    port = live.free_port()
    uv = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.05)
    deadline = time.monotonic() + 60
    while "ready." not in worker_log.read_text(errors="replace"):
        assert worker.poll() is None, worker_log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the celery worker did not start"
        time.sleep(0.2)
    try:
        yield Server(f"http://127.0.0.1:{port}", tmp_path, worker_log, host)
    finally:
        uv.should_exit = True
        thread.join(15)
        live.stop_processes([worker])
        live.release_broker(broker)
        from szbench_worker.docker_runner import connect

        client = connect()
        live.remove_leftovers(client, host)
        client.close()
        db.reset_engine()


@dataclass
class Console:
    """Console errors and uncaught page errors, with the few the test causes on purpose."""

    errors: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    # Substrings of errors the next steps cause on purpose (e.g. a 403 page on /admin).
    allowed: list[str] = field(default_factory=list)

    def watch(self, page: Any) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    def _console(self, msg: Any) -> None:
        if msg.type != "error":
            return
        text = f"console: {msg.text} ({msg.location.get('url', '')})"
        # The chunk requests the test cuts on purpose to exercise the resume.
        cut = ("ERR_CONNECTION_RESET", "ERR_INTERNET_DISCONNECTED", "ERR_FAILED")
        if "/api/v1/uploads/" in text and any(c in msg.text for c in cut):
            self.expected.append(text)
            return
        if any(a in text for a in self.allowed):
            return
        self.errors.append(text)


# A small accessibility audit run on every page the test photographs: one main landmark
# and one h1, a label for every form control, an accessible name for every chart, link and
# button, and no duplicate ids (labels and aria references rely on them).
AUDIT = """() => {
  const problems = [];
  if (document.querySelectorAll("main").length !== 1) problems.push("main landmarks != 1");
  if (document.querySelectorAll("h1").length !== 1) problems.push("h1 count != 1");
  if (!document.documentElement.lang) problems.push("no lang on html");
  for (const el of document.querySelectorAll("input, select, textarea")) {
    if (el.type === "hidden") continue;
    const labelled = (el.labels && el.labels.length) || el.getAttribute("aria-label") ||
      el.getAttribute("aria-labelledby");
    if (!labelled) problems.push("unlabelled control #" + (el.id || el.name));
  }
  for (const svg of document.querySelectorAll("svg[role=img]")) {
    const ids = (svg.getAttribute("aria-labelledby") || "").split(" ").filter(Boolean);
    if (!svg.querySelector(":scope > title") || !ids.every((i) => document.getElementById(i)))
      problems.push("chart without an accessible name");
  }
  for (const el of document.querySelectorAll("a, button")) {
    if (!(el.getAttribute("aria-label") || el.textContent.trim()))
      problems.push("unnamed " + el.outerHTML.slice(0, 60));
  }
  const seen = new Set();
  for (const el of document.querySelectorAll("[id]")) {
    if (seen.has(el.id)) problems.push("duplicate id " + el.id);
    seen.add(el.id);
  }
  return problems;
}"""


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    if name != "failure":
        assert page.evaluate(AUDIT) == [], (name, page.url)


def sign_in(page: Any, base: str, email: str, password: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    assert page.get_by_role("button", name="Sign out").is_visible()


def register_dataset(page: Any, base: str, slug: str, kind: str, prepared: Path) -> None:
    page.goto(f"{base}/admin/datasets")
    page.get_by_label("Slug").fill(slug)
    page.get_by_label("Title").fill(slug.replace("-", " ").title())
    page.get_by_label("Kind").select_option(kind)
    if kind == "public_sample":  # making data public is confirmed by typing its slug
        page.get_by_label("Public sample only: type the short name again to confirm").fill(slug)
    page.get_by_role("button", name="Create dataset").click()
    page.wait_for_load_state()
    assert f"Dataset {slug} created" in page.inner_text(".flash")
    row = page.locator("tr", has=page.get_by_text(slug, exact=True))
    row.get_by_label("Version").fill("v1")
    row.get_by_label("Prepared folder on the server").fill(str(prepared))
    row.get_by_role("button", name="Check (dry run)").click()
    page.wait_for_load_state()
    assert f"Dry run: {slug} v1" in page.inner_text("#check-h")
    page.get_by_role("button", name="Register and queue").click()
    page.wait_for_load_state()
    assert f"{slug} v1 registered" in page.inner_text(".flash")


def test_browser_end_to_end(
    server: Server, browser: Any, synthetic: dict[str, Path], baseline_tarball: Path
) -> None:
    base = server.url
    console = Console()
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    console.watch(page)
    try:
        _flow(page, base, console, synthetic, baseline_tarball)
    except Exception:
        shot(page, "failure")
        print(server.worker_log.read_text(errors="replace")[-6000:])
        raise
    finally:
        context.close()
    assert console.errors == [], console.errors


def _flow(
    page: Any, base: str, console: Console, synthetic: dict[str, Path], tarball: Path
) -> None:
    from playwright.sync_api import expect

    # --- the admin sets up the datasets -------------------------------------------------
    page.goto(base)
    shot(page, "01-home-empty")
    sign_in(page, base, *ADMIN)
    register_dataset(page, base, "public-sample", "public_sample", synthetic["public"])
    register_dataset(page, base, "held-out", "held_out", synthetic["held"])
    shot(page, "02-admin-datasets")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()

    # --- a researcher signs up -----------------------------------------------------------
    page.goto(f"{base}/signup")
    page.get_by_label("Name").fill("Rita Researcher")
    page.get_by_label("Email").fill(RESEARCHER[0])
    page.get_by_label("Password").fill(RESEARCHER[1])
    page.get_by_role("button", name="Create account").click()
    page.wait_for_url(f"{base}/submissions*")
    assert "Welcome" in page.inner_text(".flash")

    # --- upload the baseline's image tarball (resumable; one chunk is cut) --------------
    page.goto(f"{base}/submit")
    page.get_by_label("Short name").fill("baseline")
    page.get_by_label("Title").fill("Baseline detector")
    page.get_by_label("Authors").fill("szbench maintainers")
    page.get_by_label("Licence").fill("Apache-2.0")
    page.get_by_label("Description").fill("Line length and rhythmic power, robust z-scores.")
    page.get_by_label("Version label").fill("1.0")
    # Drag and drop: a small file dropped on the zone is picked up...
    page.evaluate(
        """() => {
        const dt = new DataTransfer();
        dt.items.add(new File(["x"], "dropped.tar", {type: "application/x-tar"}));
        const zone = document.getElementById("drop-zone");
        zone.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true}));
        zone.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true}));
    }"""
    )
    expect(page.locator("#file-name")).to_contain_text("dropped.tar")
    # A file that is no image archive is refused on this computer (issue 23.6: before any
    # byte is sent), in the server's words.
    bad = tarball.parent / "not-an-image.tar"
    bad.write_bytes(b"this is not a tar archive\n" * 40)
    page.set_input_files("#file", str(bad))
    page.get_by_role("button", name="Submit").click()
    # Under the archive's field (issue 30.5), the box above the form pointing to it.
    expect(page.locator("#file-error")).to_contain_text(
        "not-an-image.tar: not a tar archive", timeout=30_000
    )
    expect(page.locator("#form-error")).to_have_text("Please correct the field marked below.")
    shot(page, "03a-submit-refused")
    # Nothing was made: the algorithm is created only with its first accepted version.
    expect(page.get_by_label("Algorithm", exact=True)).to_have_value("")
    # ... and the real archive replaces it (through the file chooser's input).
    page.set_input_files("#file", str(tarball))
    expect(page.locator("#file-name")).to_contain_text("baseline.tar")
    shot(page, "03-submit")

    # The network, as the upload sees it: the second chunk's connection is cut once (the
    # page resumes from the server's offset by itself); after four chunks the link goes
    # down for good, the page is reloaded and the same file chosen again: the upload must
    # go on from the server's offset, never from byte 0.
    chunk = account.UPLOAD_CHUNK_BYTES
    net = {"mode": "cut-once", "puts": [], "after_reload": []}

    def network(route: Any) -> None:
        request = route.request
        if request.method != "PUT" or "offset=" not in request.url:
            route.continue_()
            return
        offset = int(request.url.rsplit("offset=", 1)[1])
        net["puts"].append(offset)
        if net["mode"] == "reloaded":
            net["after_reload"].append(offset)
        elif net["mode"] == "cut-once" and offset > 0:
            net["mode"] = "up"
            route.abort("connectionreset")
            return
        elif net["mode"] == "up" and offset >= 4 * chunk:
            net["mode"] = "down"
        if net["mode"] == "down":
            route.abort("internetdisconnected")
            return
        route.continue_()

    page.route("**/api/v1/uploads/*", network)
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#progress-text")).to_contain_text("MiB", timeout=30_000)
    shot(page, "03b-upload-progress")
    deadline = time.monotonic() + 60
    while net["mode"] != "down":  # Playwright serves the route handler while it waits
        assert time.monotonic() < deadline, net
        page.wait_for_timeout(100)
    expect(page.locator("#progress-text")).to_contain_text("connection lost", timeout=30_000)
    assert net["puts"][:3] == [0, chunk, chunk], net["puts"]  # cut once, resumed in place

    page.reload()
    net["mode"] = "reloaded"
    # The cut upload made no algorithm either (it is created once the archive is on the
    # server): the new one is described again.
    page.get_by_label("Short name").fill("baseline")
    page.get_by_label("Title").fill("Baseline detector")
    page.get_by_label("Version label").fill("1.0")
    page.set_input_files("#file", str(tarball))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(f"{base}/submissions*", timeout=120_000)
    page.unroute("**/api/v1/uploads/*")
    assert net["after_reload"][0] == 4 * chunk, net["after_reload"]  # the server's offset
    assert 0 not in net["after_reload"]
    assert "submitted" in page.inner_text(".flash")

    # --- watch the smoke test and the held-out evaluation live --------------------------
    status = page.locator("[data-field=version-status]").first
    expect(status).to_have_text("active", timeout=EVALUATION_TIMEOUT_MS)
    expect(page.locator("[data-field=version-message]").first).to_have_text("Smoke test passed.")
    held_row = page.locator("tr[data-evaluation-id]", has_text="held-out")
    expect(held_row).to_have_count(1, timeout=30_000)
    shot(page, "04-submissions-running")
    expect(held_row.locator("[data-field=status]")).to_have_text(
        "done", timeout=EVALUATION_TIMEOUT_MS
    )
    expect(held_row.locator("[data-field=progress-text]")).to_have_text("2 / 2")
    expect(held_row.locator("[data-field=outcomes]")).to_have_text("ok: 2")

    # Queue the public sample too (for its timeline), from the page.
    page.get_by_label("Evaluate on").select_option("public-sample")
    page.get_by_role("button", name="Queue").click()
    page.wait_for_load_state()
    public_row = page.locator("tr[data-evaluation-id]", has_text="public-sample v1").filter(
        has_text="full"
    )
    expect(public_row.locator("[data-field=status]")).to_have_text(
        "done", timeout=EVALUATION_TIMEOUT_MS
    )
    shot(page, "05-submissions-done")

    # --- the evaluation page: submitter-safe messages only ------------------------------
    held_row.get_by_role("link").first.click()
    page.wait_for_load_state()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Evaluation")
    assert "Admin log" not in page.content()
    shot(page, "06-evaluation")

    # --- leaderboard: find the entry, sort, filter --------------------------------------
    page.goto(base)
    page.get_by_role("link", name="Held Out").click()
    page.wait_for_load_state()
    table = page.locator("table.leaderboard")
    expect(table).to_contain_text("Baseline detector")
    assert page.locator("table.leaderboard svg.ci").count() == 4
    page.locator("summary", has_text="What do these metrics mean?").click()
    expect(page.locator("details.defs-popover dl")).to_be_visible()
    shot(page, "07-leaderboard")
    page.get_by_role("link", name="Event FP/day").click()
    page.wait_for_load_state()
    expect(page.locator("th[aria-sort]")).to_contain_text("Event FP/day")
    page.get_by_label("Search").fill("no-such-algorithm")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()
    expect(page.locator("main")).to_contain_text("No entries match.")
    page.get_by_label("Search").fill("baseline")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()

    # --- the algorithm page: per-subject charts, rank stability, timelines ---------------
    page.get_by_role("link", name="Baseline detector").click()
    page.wait_for_load_state()
    # Per-subject charts, timelines and (over so few subjects) the rank distribution of
    # held-out data are not disclosed to non-admins at the default level (docs/security.md).
    assert page.locator("#charts svg.chart").count() == 0
    expect(page.locator("main")).to_contain_text("Rank stability is not available (not disclosed")
    expect(page.locator("#charts")).to_contain_text("Per-subject results are not disclosed")
    expect(page.locator("#charts")).to_contain_text("Timelines are not disclosed")
    shot(page, "08-algorithm-held-out")
    page.locator("tr", has_text="public-sample").get_by_role("link", name="charts").click()
    page.wait_for_load_state()
    timeline = page.locator("svg.timeline").first
    expect(timeline).to_be_visible()
    desc = timeline.locator("desc").text_content() or ""
    assert "Reference seizures:" in desc
    assert "not shown" not in desc  # the owner sees reference and own detections
    shot(page, "09-algorithm-timeline")

    # --- API tokens ------------------------------------------------------------------------
    page.goto(f"{base}/tokens")
    page.get_by_label("Name").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_load_state()
    secret = page.get_by_label("Your new token").input_value()
    assert secret.startswith("szb_")
    shot(page, "10-tokens")
    page.get_by_role("button", name="Revoke token laptop").click()
    page.wait_for_load_state()
    assert "revoked" in page.inner_text(".flash")
    page.goto(f"{base}/definitions")
    shot(page, "11-definitions")

    # A researcher gets no admin pages (the browser logs the 403 document as an error).
    console.allowed.append(f"status of 403 (Forbidden) ({base}/admin)")
    page.goto(f"{base}/admin")
    expect(page.locator("main")).to_contain_text("Admins only.")
    console.allowed.clear()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()

    # --- admin pages ------------------------------------------------------------------------
    sign_in(page, base, *ADMIN)
    page.goto(f"{base}/admin/queue")
    expect(page.locator("main")).to_contain_text("Per worker")
    expect(page.locator("main")).to_contain_text("Celery workers")
    shot(page, "12-admin-queue")
    page.goto(f"{base}/admin/users")
    expect(page.locator("main")).to_contain_text(RESEARCHER[0])
    shot(page, "13-admin-users")
    page.goto(f"{base}/admin/publishing")
    shot(page, "14-admin-publishing")
    page.goto(f"{base}/admin")
    expect(page.locator("main")).to_contain_text("Evaluations by status")
    shot(page, "16-admin-overview")
    page.goto(f"{base}/admin/datasets/held-out/versions/v1/benchmark")
    expect(page.locator("main")).to_contain_text("none: nothing to queue")  # all evaluated
    shot(page, "17-admin-benchmark-plan")
    page.goto(f"{base}/")
    shot(page, "15-home")
    # Keyboard: the skip link is the first stop and moves focus to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
