"""The FastAPI application: ``create_app()`` for tests and embedding, ``app`` for uvicorn.

``uvicorn szbench.app:app`` (or ``szbench serve``) serves the REST API under ``/api/v1``
(interactive docs, which work offline, at ``/api/v1/docs``), the probes ``/healthz`` and
``/readyz``, and ``/metrics``. The web UI registers its page routers on the same app through
:data:`EXTRA_ROUTERS` hooks (see :func:`create_app`).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Depends, FastAPI
from prometheus_client import CollectorRegistry

from szbench import __version__
from szbench.algorithms.router import router as algorithms_router
from szbench.api.errors import install_error_handlers
from szbench.api.headers import SzbenchFastAPI
from szbench.api.proxies import install as install_proxies
from szbench.auth.csrf import refuse_cross_site_writes
from szbench.auth.router import router as auth_router
from szbench.compare.router import router as compare_router
from szbench.config import check_serving, get_settings
from szbench.datasets.router import router as datasets_router
from szbench.evaluations.router import router as evaluations_router
from szbench.federation.router import router as federation_router
from szbench.leaderboards.router import router as leaderboards_router
from szbench.logging import RequestIdMiddleware, configure_logging
from szbench.notifications.router import router as notifications_router
from szbench.ops.middleware import RequestMetrics
from szbench.ops.router import router as ops_router
from szbench.ops.service import DatabaseCollector
from szbench.phases.router import router as phases_router
from szbench.results.router import router as results_router
from szbench.teams.router import router as teams_router
from szbench.uploads.router import router as uploads_router
from szbench.uploads.sweeper import install_upload_sweeper
from szbench.users.router import router as users_router
from szbench.web import install as install_web
from szbench.web.api_docs import install as install_api_docs
from szbench.workers.router import router as workers_router

API_PREFIX = "/api/v1"

API_ROUTERS: tuple[APIRouter, ...] = (
    auth_router,
    users_router,
    teams_router,
    notifications_router,
    uploads_router,
    algorithms_router,
    phases_router,
    datasets_router,
    evaluations_router,
    results_router,
    leaderboards_router,
    compare_router,
    workers_router,
    federation_router,
)

# Callables that add more routes (the web UI's pages) to a fresh app; appended by those
# modules at import time or passed to create_app().
EXTRA_ROUTERS: list[Callable[[FastAPI], None]] = []

DESCRIPTION = """\
Open benchmarking of EEG seizure-detection algorithms with SzCORE scoring.

Authenticate with `Authorization: Bearer <token>` (from `POST /api/v1/auth/login` or
`POST /api/v1/tokens`). Every error is `{"error": "<Name>", "detail": "..."}`; every list
takes `limit` and `offset` and returns `total`. See docs/api.md.
"""


def create_app(*, extra: list[Callable[[FastAPI], None]] | None = None) -> FastAPI:
    """A new application with its own metrics registry (so tests can build many).

    Refuses settings that cannot serve safely together (:func:`check_serving`)."""
    check_serving()
    app = SzbenchFastAPI(
        title="szbench",
        version=__version__,
        description=DESCRIPTION,
        openapi_url=f"{API_PREFIX}/openapi.json",
        # FastAPI's docs page loads Swagger UI from a CDN with an inline script: ours
        # (install_api_docs below) serves it from an installed package, under the CSP.
        docs_url=None,
        redoc_url=None,
        # Every route, API and pages: state changes from another site are refused.
        dependencies=[Depends(refuse_cross_site_writes)],
    )
    install_error_handlers(app)
    for router in API_ROUTERS:
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(ops_router)
    install_web(app)
    install_api_docs(app, f"{API_PREFIX}/docs")
    for hook in [*EXTRA_ROUTERS, *(extra or [])]:
        hook(app)

    registry = CollectorRegistry(auto_describe=True)
    registry.register(DatabaseCollector())
    app.state.metrics_registry = registry
    app.add_middleware(RequestMetrics, registry=registry, api_prefix=API_PREFIX)
    app.add_middleware(RequestIdMiddleware)
    # Outermost: the client address is settled before anything (logs, throttles) reads it.
    install_proxies(app)
    return app


def create_production_app() -> FastAPI:
    """The served application: structured logs as the settings say, then :func:`create_app`.

    uvicorn configures its own logging before it calls this factory, so ours replaces it.
    Tests build apps with :func:`create_app` and keep pytest's log capture.
    """
    configure_logging()
    app = create_app()
    install_upload_sweeper(app, get_settings().upload_sweep_interval_s)
    return app


app = create_app()
