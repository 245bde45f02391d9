"""The web UI: server-rendered pages (Jinja2) on the same FastAPI app as the API.

:func:`install` adds the page routers, the static files under ``/static`` and HTML error
pages for page routes (API routes keep the JSON envelope). Pages reuse the API's services,
queries and auth dependencies; see docs/web-ui.md.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.middleware.gzip import GZipMiddleware

from szbench.web.common import HERE, install_error_pages


def compressed(files: StaticFiles) -> GZipMiddleware:
    """Static files gzip-compressed for clients that accept it (Swagger UI's bundle is 1.8 MB).

    Only static files: downloads (image archives, EEG) are large, mostly incompressible and
    sometimes asked for in ranges, so the app as a whole is not wrapped.
    """
    return GZipMiddleware(files, minimum_size=500, compresslevel=6)


def install(app: FastAPI) -> None:
    """Mount the web UI on ``app``."""
    from szbench.web import (
        account,
        admin,
        algorithms,
        compare,
        datasets,
        federation,
        notifications,
        pages,
        snapshots,
        submit_help,
        teams,
    )

    app.include_router(pages.router)
    app.include_router(snapshots.router)
    app.include_router(compare.router)
    app.include_router(algorithms.router)
    app.include_router(account.router)
    app.include_router(notifications.router)
    app.include_router(admin.router)
    app.include_router(datasets.router)
    app.include_router(submit_help.router)
    app.include_router(teams.router)
    app.include_router(federation.router)
    app.mount("/static", compressed(StaticFiles(directory=HERE / "static")), name="static")
    install_error_pages(app)
