"""``/healthz``, ``/readyz`` and ``/metrics`` (outside ``/api/v1``, no auth: for probes)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

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


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, queue, runs by outcome, run durations, GPUs in use."""
    registry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
