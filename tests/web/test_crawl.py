"""Every page, as each kind of visitor reaches it, in Chromium at desktop and phone widths.

The app runs under uvicorn on loopback on a seeded site (the real PostgreSQL, no worker):
an admin, two researchers, a held-out and a public-sample dataset with results, a queued
evaluation, a phase. For an anonymous visitor, a signed-in researcher and an admin, the
crawl starts from a few entry points (the error pages among them) and follows every link
of every page it reaches, so pages added later are checked without being listed here.

On every page: no axe-core violation at 1280 px and at 390 px, no sideways scrolling of
the page at 390 px and 360 px, and no console error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest

from szbench.db import session_scope
from szbench.leaderboards import snapshots
from szbench.models import DatasetKind, EvaluationStatus, Role, VersionStatus
from tests.platform import factories as f

from .axe import assert_no_axe_violations, describe, violations
from .browsing import seeded_site, sign_in
from .conftest import PASSWORD

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DESKTOP, PHONE, SMALL_PHONE = 1280, 390, 360
# Phone-width screenshots of every crawled page (CI keeps artifacts/).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots" / "crawl"
ADMIN = "ada@example.org"
RESEARCHER = "alice@example.org"
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
# A late seizure: on a phone, a timeline cut at the screen's edge would hide it.
PUBLIC_SEIZURES = ((300.0, 60.0), (3300.0, 90.0))
# Links the crawl does not follow: files, the API's JSON, and the scripts' endpoints.
SKIP = re.compile(
    r"^/(api/(?!v1/docs$)|static/|healthz|readyz|metrics)|\.(json|csv|tsv|tar|gz|zip)$"
)
# Pages of one shape (same path with ids as N, same query names) visited at most this often.
PER_SHAPE = 2
MAX_PAGES = 80


def tsv(duration_s: float, events: tuple[tuple[float, float], ...]) -> str:
    rows = [f"{o}\t{d}\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t{duration_s}\n" for o, d in events]
    return HEADER + "".join(rows)


def seed(root: Path) -> None:
    """The site the crawl walks through (committed; the fixture empties it afterwards)."""
    with session_scope() as s:
        f.user(s, Role.ADMIN, email=ADMIN, password=PASSWORD, name="Ada Admin")
        alice = f.user(s, email=RESEARCHER, password=PASSWORD, name="Alice Researcher")
        bob = f.user(s, email="bob@example.org", password=PASSWORD, name="Bob")
        versions = {}
        for slug, kind, subjects, duration, seizures in (
            ("held-out", DatasetKind.HELD_OUT, ("01", "02", "03"), 3600.0, ((1234.0, 66.0),)),
            ("public-sample", DatasetKind.PUBLIC_SAMPLE, ("09",), 3600.0, PUBLIC_SEIZURES),
        ):
            folder = root / slug
            (folder / "annotations").mkdir(parents=True)
            ds = f.dataset(s, kind, slug=slug, title=slug.replace("-", " ").title())
            dv = f.dataset_version(s, ds, path=str(folder), version="v1")
            for subject in subjects:
                key = f"sub-{subject}_ses-01_task-szMonitoring_run-00"
                (folder / "annotations" / f"{key}_events.tsv").write_text(tsv(duration, seizures))
                f.recording(s, dv, subject=subject, key=key, duration_s=duration)
            versions[slug] = dv
        held, public = versions["held-out"], versions["public-sample"]
        phase = f.phase(s, slug="final", title="Final phase")
        for owner, name, title, shift in (
            (alice, "alpha", "Alpha detector with a rather long title", 0.0),
            (bob, "beta", "Beta", 0.1),
        ):
            algo = f.algorithm(s, owner, name=name, title=title, authors="A. Lice, B. Ob")
            v1 = f.version(s, algo, version="1.0", status_message="Smoke test passed.")
            ev = f.evaluation(s, v1, held, recordings_total=3, recordings_done=3)
            for rec in held.recordings:
                f.run(s, ev, rec, event_tp=1)
            f.result(
                s,
                ev,
                {
                    sub: {
                        "event_f1": 0.5 + shift + i / 10,
                        "event_sensitivity": 0.6 + shift,
                        "event_precision": 0.4 + i / 10,
                        "event_fp_rate": 3.0 - i,
                    }
                    for i, sub in enumerate(("01", "02", "03"))
                },
            )
            pub = f.evaluation(s, v1, public, recordings_total=1, recordings_done=1)
            f.run(
                s,
                pub,
                public.recordings[0],
                detections_tsv=tsv(3600.0, ((310.0, 40.0), (3310.0, 60.0), (1800.0, 20.0))),
            )
            f.result(
                s,
                pub,
                {
                    "09": {
                        "event_f1": 0.8,
                        "event_sensitivity": 1.0,
                        "event_precision": 0.67,
                        "event_fp_rate": 24.0,
                    }
                },
            )
        v2 = f.version(
            s, algo, version="2.0-rc", status=VersionStatus.SMOKE_TESTING, phase_id=phase.id
        )
        f.evaluation(s, v2, held, status=EvaluationStatus.QUEUED)
        # A frozen board (issue 23): its page is reached from the leaderboard's list.
        snapshots.take(s, "held-out", "v1")


@dataclass
class Site:
    url: str


@pytest.fixture
def site(pg_url: str, settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Site]:
    env = {
        "SZBENCH_DATABASE_URL": pg_url,
        "SZBENCH_PASSWORD_SCRYPT_N": "1024",
        "SZBENCH_SECRET_KEY": "crawl-test-secret-key",
        "SZBENCH_ALLOW_SIGNUP": "true",
        "SZBENCH_LEADERBOARD_CACHE_S": "0",
        "SZBENCH_UPLOADS_DIR": str(tmp_path / "uploads"),
    }
    with seeded_site(settings_env, env, lambda: seed(tmp_path / "datasets")) as (url, _):
        yield Site(url)


def shape(path_and_query: str) -> str:
    parts = urlsplit(path_and_query)
    names = sorted({name for name, _ in parse_qsl(parts.query, keep_blank_values=True)})
    return re.sub(r"/\d+", "/N", parts.path) + "?" + "&".join(names)


def links_of(page: Any, base: str) -> list[str]:
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    found = []
    for href in hrefs:
        url = urlsplit(urljoin(page.url, href))
        if url.netloc != urlsplit(base).netloc:
            continue
        target = url.path + (f"?{url.query}" if url.query else "")
        if not SKIP.search(url.path):
            found.append(target)
    return found


@dataclass
class Problems:
    items: list[str]

    def add(self, where: str, what: str) -> None:
        self.items.append(f"{where}: {what}")


def overflow(page: Any) -> str | None:
    """What sticks out sideways when the page scrolls horizontally (None when nothing)."""
    return page.evaluate(
        """() => {
      const doc = document.documentElement;
      if (doc.scrollWidth <= window.innerWidth) return null;
      const wide = [...document.querySelectorAll("body *")]
        .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5)
        .filter((el) => !el.closest(".table-wrap, pre, .swagger-ui .opblock-body"))
        .slice(0, 5)
        .map((el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
             (el.className && typeof el.className === "string" ? "." + el.className : "") +
             " right=" + Math.round(el.getBoundingClientRect().right));
      return `scrollWidth ${doc.scrollWidth} > ${window.innerWidth}: ${wide.join(", ")}`;
    }"""
    )


def resize(page: Any, width: int, height: int = 900) -> None:
    page.set_viewport_size({"width": width, "height": height})
    # Two frames: the layout and the page's resize handler (static/app.js) have run.
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def check_page(page: Any, where: str, problems: Problems) -> None:
    # Swagger UI draws the docs page after load; wait for its operations.
    if urlsplit(page.url).path == "/api/v1/docs":
        page.wait_for_selector(".opblock", timeout=30_000)
    # Opened, so that what they hold (the phone menu, definitions, tables) is checked too:
    # axe-core skips the content of a closed <details>.
    page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    for width in (DESKTOP, PHONE):
        resize(page, width)
        found = violations(page)
        if found:
            problems.add(f"{where} at {width} px", "axe-core:\n" + describe(found))
    for width in (PHONE, SMALL_PHONE):
        resize(page, width, 800)
        wide = overflow(page)
        if wide:
            problems.add(f"{where} at {width} px", wide)
        if width == PHONE:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9]+", "-", where).strip("-")[:80]
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}.png"), full_page=True)
    resize(page, DESKTOP)


def crawl(page: Any, base: str, role: str, starts: list[str], problems: Problems) -> list[str]:
    """Visit ``starts`` and everything linked from them; returns the pages visited."""
    queue_: list[str] = list(starts)
    seen: set[str] = set()
    per_shape: dict[str, int] = {}
    visited: list[str] = []
    while queue_ and len(visited) < MAX_PAGES:
        target = queue_.pop(0)
        key = shape(target)
        if target in seen or (target not in starts and per_shape.get(key, 0) >= PER_SHAPE):
            continue
        seen.add(target)
        per_shape[key] = per_shape.get(key, 0) + 1
        page.goto(base + target)
        page.wait_for_load_state()
        visited.append(target)
        check_page(page, f"[{role}] {target}", problems)
        queue_.extend(link for link in links_of(page, base) if link not in seen)
    left = [t for t in queue_ if t not in seen and per_shape.get(shape(t), 0) < PER_SHAPE]
    if left:
        # Never a silent cut: pages past the cap would go unchecked.
        problems.add(f"[{role}]", f"the crawl stopped at MAX_PAGES={MAX_PAGES}; raise it")
    return visited


def test_every_page_is_accessible_and_fits_a_phone(site: Site, browser: Any) -> None:
    base = site.url
    problems = Problems([])
    console: list[str] = []
    # Error pages are entry points: nothing links to them. A bad query, an unknown page.
    errors = ["/no-such-page", "/leaderboards/held-out?sort=nonsense", "/algorithms/999999"]
    visited: dict[str, list[str]] = {}
    for role, email in (("anonymous", None), ("researcher", RESEARCHER), ("admin", ADMIN)):
        context = browser.new_context(viewport={"width": DESKTOP, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.on(
            "console",
            lambda msg, role=role: (
                msg.type == "error"
                and not re.search(r"status of 40[034]", msg.text)
                and console.append(f"[{role}] {msg.text}")
            ),
        )
        page.on("pageerror", lambda exc, role=role: console.append(f"[{role}] {exc}"))
        try:
            if email:
                sign_in(page, base, email)
            starts = ["/", "/login", "/definitions", "/api/v1/docs", *errors]
            if email:
                starts += ["/submit", "/submissions", "/tokens"]
            if role == "researcher":
                starts.append("/admin")  # not allowed: the 403 page
            visited[role] = crawl(page, base, role, starts, problems)
        finally:
            context.close()
    # The crawl really went through the site (its links, not only the entry points).
    assert any(p.startswith("/algorithms/") for p in visited["anonymous"]), visited
    assert any(p.startswith("/leaderboards/") for p in visited["anonymous"]), visited
    assert any("/snapshots/" in p for p in visited["anonymous"]), visited
    assert any(p.startswith("/admin/") for p in visited["admin"]), visited
    assert any(p.startswith("/evaluations/") for p in visited["researcher"]), visited
    assert not problems.items, "\n\n".join(problems.items)
    assert console == [], console


def test_axe_helper_reports_a_violation(browser: Any) -> None:
    # The helper fails on a page with a known violation (an image without a text alternative),
    # so a crawl without findings means the engine ran, not that it was absent.
    context = browser.new_context()
    page = context.new_page()
    try:
        page.set_content('<html lang="en"><body><main><h1>x</h1><img src="a.png"></main></body>')
        with pytest.raises(AssertionError, match="image-alt"):
            assert_no_axe_violations(page, "a test page")
    finally:
        context.close()


# --- point by point, at phone width ---------------------------------------------------------


def test_navigation_collapses_on_a_phone_and_opens_without_javascript(
    site: Site, browser: Any
) -> None:
    context = browser.new_context(
        viewport={"width": PHONE, "height": 800}, java_script_enabled=False
    )
    page = context.new_page()
    try:
        sign_in(page, site.url, RESEARCHER)
        nav = page.get_by_role("navigation", name="Main")
        menu = nav.locator("summary", has_text="Menu")
        submit = nav.get_by_role("link", name="Submit", exact=True)
        assert menu.is_visible()
        assert not submit.is_visible()
        assert not page.get_by_role("button", name="Sign out").is_visible()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "menu-closed-390.png"))
        menu.click()
        page.screenshot(path=str(SCREENSHOTS / "menu-open-390.png"))
        assert submit.is_visible()
        assert page.get_by_role("button", name="Sign out").is_visible()
        submit.click()
        page.wait_for_load_state()
        assert urlsplit(page.url).path == "/submit"
        # On a wide screen the same markup is a plain row of links, no button (no frame to
        # wait for here: with JavaScript off, the page runs no callbacks).
        page.set_viewport_size({"width": DESKTOP, "height": 800})
        assert not page.get_by_role("navigation", name="Main").locator("summary").is_visible()
        assert (
            page.get_by_role("navigation", name="Main")
            .get_by_role("link", name="My submissions")
            .is_visible()
        )
    finally:
        context.close()


def test_timeline_shows_the_whole_recording_on_a_phone(site: Site, browser: Any) -> None:
    context = browser.new_context(viewport={"width": PHONE, "height": 800})
    page = context.new_page()
    try:
        sign_in(page, site.url, RESEARCHER)
        page.goto(f"{site.url}/leaderboards/public-sample")
        page.get_by_role("link", name=re.compile("Alpha detector")).first.click()
        page.wait_for_load_state()
        page.locator("tr", has_text="public-sample").get_by_role("link", name="charts").click()
        page.wait_for_load_state()
        timeline = page.locator("svg.timeline").first
        timeline.scroll_into_view_if_needed()
        box = timeline.bounding_box()
        assert box is not None
        assert box["x"] >= 0
        assert box["x"] + box["width"] <= PHONE
        # The reference seizure at 55-56.5 min of 60 is drawn, inside the screen, near the end.
        last = timeline.locator("rect.ref").last
        assert last.is_visible()
        seizure = last.bounding_box()
        assert seizure is not None
        assert box["x"] + 0.85 * box["width"] < seizure["x"]
        assert seizure["x"] + seizure["width"] <= box["x"] + box["width"] + 0.5
        ticks = timeline.locator("text.tick").all_text_contents()
        assert ticks[-1] == "60 min"
    finally:
        context.close()


def test_submit_page_without_javascript_says_that_it_needs_it(site: Site, browser: Any) -> None:
    for javascript in (False, True):
        context = browser.new_context(
            viewport={"width": PHONE, "height": 800}, java_script_enabled=javascript
        )
        page = context.new_page()
        try:
            sign_in(page, site.url, RESEARCHER)
            page.goto(f"{site.url}/submit")
            notice = page.get_by_text("This form needs JavaScript")
            button = page.get_by_role("button", name="Submit")
            if javascript:
                assert not notice.is_visible()
                assert button.is_visible()
            else:
                # Plainly said, with the ways that work without it; no form that does nothing.
                assert notice.is_visible()
                assert page.get_by_text("szbench algorithm submit").is_visible()
                assert not button.is_visible()
        finally:
            context.close()


def test_api_docs_with_an_operation_open_is_accessible(site: Site, browser: Any) -> None:
    # The crawl sees the docs page as it loads (every operation closed); opened, with its
    # parameters, "Try it out" and a response, it is a different page for axe-core.
    from szbench.app import create_app

    operation = create_app().openapi()["paths"]["/api/v1/leaderboards"]["get"]
    element_id = f"operations-{operation['tags'][0]}-{operation['operationId']}"
    for width in (DESKTOP, PHONE):
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            page.goto(f"{site.url}/api/v1/docs")
            block = page.locator(f"#{element_id}")
            block.locator(".opblock-summary").click()
            block.get_by_role("button", name="Try it out").click()
            block.get_by_role("button", name="Execute").click()
            block.locator(".live-responses-table").wait_for()
            assert_no_axe_violations(page, f"/api/v1/docs, one operation run, at {width} px")
            assert overflow(page) is None
        finally:
            context.close()
