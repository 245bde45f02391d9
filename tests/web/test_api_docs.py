"""The interactive API docs (``/api/v1/docs``): this origin only, under the CSP, offline.

Clinical centres run szbench without internet: the page, Swagger UI's files and the script
that starts it all come from the server itself, and a browser that can reach nothing else
still shows (and runs) every operation.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from szbench import db
from szbench.config import get_settings

from .browsing import serve

DOCS = "/api/v1/docs"
JAVASCRIPT = {"text/javascript", "application/javascript"}


class _Refs(HTMLParser):
    """Every URL the page refers to, and its scripts and stylesheets."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[str | None] = []  # None: an inline script
        self.stylesheets: list[str] = []
        self.inline_styles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("src", "href", "action", "data-openapi-url"):
            if values.get(name):
                self.urls.append(str(values[name]))
        if tag == "script":
            self.scripts.append(values.get("src"))
        if tag == "link" and values.get("rel") == "stylesheet":
            self.stylesheets.append(str(values["href"]))
        if tag == "style" or "style" in values:
            self.inline_styles += 1


def refs_of(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    parser.close()
    return parser


def csp_of(header: str) -> dict[str, list[str]]:
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


def media_type(response: Any) -> str:
    return str(response.headers["content-type"]).split(";")[0].strip()


def test_docs_page_refers_to_this_origin_only(client: TestClient) -> None:
    r = client.get(DOCS)
    assert r.status_code == 200
    assert media_type(r) == "text/html"
    refs = refs_of(r.text)
    assert refs.urls, "the page refers to nothing"
    page = str(r.url)
    for url in refs.urls:
        assert urlsplit(urljoin(page, url)).netloc == urlsplit(page).netloc, url
    # No address of another host anywhere in the page either (text, attributes, anything).
    assert "//" not in r.text.replace("http://testserver/", "")


def test_every_script_and_stylesheet_of_the_docs_page_is_served(client: TestClient) -> None:
    refs = refs_of(client.get(DOCS).text)
    assert len(refs.scripts) >= 2  # Swagger UI, and the file that starts it
    assert len(refs.stylesheets) >= 1
    for src in refs.scripts:
        assert src is not None, "an inline script: the CSP would block it"
        r = client.get(src)
        assert r.status_code == 200, src
        assert media_type(r) in JAVASCRIPT, (src, r.headers["content-type"])
        assert r.content, src
    for href in refs.stylesheets:
        r = client.get(href)
        assert r.status_code == 200, href
        assert media_type(r) == "text/css", (href, r.headers["content-type"])
        assert r.content, href


def test_docs_page_is_sent_with_a_csp_that_allows_scripts_from_this_origin_only(
    client: TestClient,
) -> None:
    r = client.get(DOCS)
    csp = csp_of(r.headers["content-security-policy"])
    assert csp["script-src"] == ["'self'"]
    assert csp["default-src"] == ["'self'"]
    assert csp["style-src"] == ["'self'"]
    assert csp["connect-src"] == ["'self'"]  # "Try it out" calls this API and nothing else
    assert r.headers["x-content-type-options"] == "nosniff"
    refs = refs_of(r.text)
    assert None not in refs.scripts
    assert refs.inline_styles == 0


def test_docs_page_names_the_openapi_document_which_stays_where_it_was(
    client: TestClient,
) -> None:
    refs = refs_of(client.get(DOCS).text)
    assert "/api/v1/openapi.json" in refs.urls
    r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert spec["openapi"].startswith("3.1")
    assert "/api/v1/leaderboards" in spec["paths"]
    assert not any(path.startswith(DOCS) for path in spec["paths"])


def test_only_the_files_the_docs_page_loads_are_served_from_the_package(
    client: TestClient,
) -> None:
    # The package ships ReDoc too; ReDoc stays off, and so do its files.
    for path in (
        f"{DOCS}/swagger-ui/redoc.standalone.js",
        f"{DOCS}/swagger-ui/favicon.png",
        f"{DOCS}/swagger-ui/../core.py",
        f"{DOCS}/swagger-ui/",
        "/redoc",
        "/api/v1/redoc",
    ):
        assert client.get(path).status_code == 404, path


# --- in a browser that can reach nothing but the server ----------------------------------

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@pytest.fixture
def docs_server(pg_url: str, settings_env: pytest.MonkeyPatch) -> Iterator[str]:
    """The app under uvicorn on loopback (the API's reads on the test database)."""
    from szbench.app import create_app

    settings_env.setenv("SZBENCH_DATABASE_URL", pg_url)
    get_settings.cache_clear()
    db.reset_engine()
    try:
        with serve(create_app()) as url:
            yield url
    finally:
        db.reset_engine()


@pytest.mark.postgres
@pytest.mark.slow
def test_docs_page_renders_and_runs_operations_offline(docs_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    from szbench.app import create_app

    operation = create_app().openapi()["paths"]["/api/v1/leaderboards"]["get"]
    element_id = f"operations-{operation['tags'][0]}-{operation['operationId']}"

    blocked: list[str] = []
    errors: list[str] = []

    def offline(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname in LOOPBACK:
            route.continue_()
        else:
            blocked.append(url)
            route.abort("internetdisconnected")

    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.route("**/*", offline)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    try:
        page.goto(f"{docs_server}{DOCS}")
        summary = page.locator(f"#{element_id}")
        expect(summary).to_be_visible()
        expect(summary).to_contain_text("List Leaderboards")
        assert page.locator(".opblock").count() > 10
        # Interactive too: "Try it out" calls the API from the page (connect-src 'self').
        summary.locator(".opblock-summary").click()
        summary.get_by_role("button", name="Try it out").click()
        summary.get_by_role("button", name="Execute").click()
        status = summary.locator(".live-responses-table tr.response .response-col_status")
        expect(status).to_have_text("200")
    finally:
        context.close()
    assert blocked == [], blocked
    assert errors == [], errors


def test_docs_page_has_the_site_header_and_a_way_back(client: TestClient) -> None:
    page = client.get(DOCS).text
    assert '<nav aria-label="Main">' in page
    assert '<a class="brand" href="/">szbench</a>' in page
    assert '<a href="/">Back to the leaderboards</a>' in page
    assert '/static/app.css"' in page
    # Without JavaScript the page says so and links the document itself.
    assert "<noscript>" in page
    assert 'href="/api/v1/openapi.json"' in page


@pytest.mark.parametrize(
    "path",
    [f"{DOCS}/swagger-ui/swagger-ui-bundle.js", f"{DOCS}/swagger-ui/swagger-ui.css"]
    + [f"/static/{name}" for name in ("app.css", "app.js", "upload.js", "api-docs.css")],
)
def test_static_files_are_sent_compressed(client: TestClient, path: str) -> None:
    from szbench.web.api_docs import SWAGGER_UI_DIR
    from szbench.web.common import HERE

    name = path.rsplit("/", 1)[1]
    on_disk = (SWAGGER_UI_DIR / name if "swagger-ui/" in path else HERE / "static" / name).stat()
    with client.stream("GET", path, headers={"Accept-Encoding": "gzip"}) as r:
        assert r.status_code == 200
        assert r.headers["content-encoding"] == "gzip"
        assert "accept-encoding" in r.headers["vary"].lower()
        sent = b"".join(r.iter_raw())
    assert len(sent) < on_disk.st_size
    if "bundle" in name:  # the 1.8 MB script: about a third of it goes over the wire
        assert len(sent) < 0.4 * on_disk.st_size
    assert len(gzip.decompress(sent)) == on_disk.st_size
    # A client that accepts no compression gets the file as it is.
    plain = client.get(path, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert int(plain.headers["content-length"]) == on_disk.st_size
