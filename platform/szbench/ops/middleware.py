"""Request counts and latency per route template (pure ASGI, so streaming is untouched)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

Scope = dict[str, Any]


class RequestMetrics:
    def __init__(self, app: Any, registry: CollectorRegistry, api_prefix: str = "") -> None:
        self.app = app
        self.api_prefix = api_prefix
        self.requests = Counter(
            "szbench_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "szbench_http_request_duration_seconds",
            "HTTP request latency by method and route template.",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            # The template, not the raw path: ids in paths would explode the label set.
            template = getattr(route, "path", None) or "unmatched"
            # Routes of included routers carry their own path, without the include prefix.
            path = scope.get("path", "")
            if (
                self.api_prefix
                and route is not None
                and path.startswith(self.api_prefix)
                and not template.startswith(self.api_prefix)
            ):
                template = self.api_prefix + template
            method = scope.get("method", "")
            self.requests.labels(method, template, str(status)).inc()
            self.latency.labels(method, template).observe(time.perf_counter() - started)
