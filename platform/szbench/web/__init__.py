"""The web UI: server-rendered pages (Jinja2) on the same FastAPI app as the API.

:func:`install` adds the page routers, the static files under ``/static`` and HTML error
pages for page routes (API routes keep the JSON envelope). Pages reuse the API's services,
queries and auth dependencies; see docs/web-ui.md.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from szbench.web.common import HERE, install_error_pages


def install(app: FastAPI) -> None:
    """Mount the web UI on ``app``."""
    from szbench.web import account, admin, pages

    app.include_router(pages.router)
    app.include_router(account.router)
    app.include_router(admin.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    install_error_pages(app)
