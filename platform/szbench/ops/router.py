"""``/healthz``, ``/readyz`` (outside ``/api/v1``, no auth: for probes) and ``/metrics``.

``/metrics`` needs ``SZBENCH_METRICS_TOKEN`` as a bearer token: its run counters and durations,
read on a quiet platform, would tell anyone the outcome and time of each held-out run.
"""

from __future__ import annotations

import hmac

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from szbench.config import get_settings
from szbench.errors import NotFound, Unauthorized
from szbench.ops import service

router = APIRouter(tags=["ops"])


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    checks: dict[str, str]


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness: the process is up and serving."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
def readyz() -> JSONResponse:
    """Readiness: the database answers at the migrations' head and the broker (if any) answers."""
    problems = {"database": service.check_database(), "broker": service.check_broker()}
    checks = {name: problem or "ok" for name, problem in problems.items()}
    ready = not any(problems.values())
    body = Readiness(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


def _check_metrics_token(request: Request) -> None:
    expected = get_settings().metrics_token
    if not expected:
        raise NotFound("metrics are off: set SZBENCH_METRICS_TOKEN and scrape with that token")
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        raise Unauthorized("/metrics needs the metrics token (SZBENCH_METRICS_TOKEN) as a bearer")


@router.get("/metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, queue, runs by outcome, run durations, GPUs in use."""
    _check_metrics_token(request)
    registry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
