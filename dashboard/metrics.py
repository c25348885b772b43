"""Prometheus metrics of the dashboard, served at its own ``/metrics`` (open, like
``/healthz``: counts and timings only).

Labels are bounded: the tenant, the route *pattern* (``/api/sessions/{session_id}``,
never the session id in the path), the method and the status; unmatched paths are
``unmatched``. Never a session id, a token or content.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Why the token check refused a request (dashboard.auth).
AUTH_REASONS = ("missing_token", "unknown_token", "other_tenant", "token_in_url")
#: Routes whose response is a long-lived stream: counted, not timed (a duration there is
#: how long a browser stayed, not latency).
STREAMING_ROUTES = ("/api/events",)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DashboardMetrics:
    """One dashboard's collectors, in their own registry."""

    def __init__(self, tenant: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.tenant = tenant
        r = self.registry
        self.requests = Counter("sessionstream_dashboard_requests_total",
                                "HTTP requests answered, by route pattern, method and status",
                                ["tenant", "route", "method", "status"], registry=r)
        self.latency = Histogram("sessionstream_dashboard_request_duration_seconds",
                                 "Time to answer a request (live event streams excluded)",
                                 ["tenant", "route"], registry=r)
        self._auth = Counter("sessionstream_dashboard_auth_failures_total",
                             "Requests the token check refused, by reason",
                             ["tenant", "reason"], registry=r)
        for reason in AUTH_REASONS:
            self._auth.labels(tenant, reason)
        self.streams = Gauge("sessionstream_dashboard_event_streams",
                             "Live event streams (SSE) open now",
                             ["tenant"], registry=r).labels(tenant)

    def auth_failure(self, reason: str) -> None:
        self._auth.labels(self.tenant, reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """Counts and times every request (outermost: it sees refusals and errors too)."""

        @web.middleware
        async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
            route = _route(request)
            streaming = route in STREAMING_ROUTES
            began = time.monotonic()
            status = 500
            if streaming:
                self.streams.inc()
            try:
                resp = await handler(request)
                status = resp.status
                return resp
            except web.HTTPException as exc:
                status = exc.status
                raise
            finally:
                if streaming:
                    self.streams.dec()
                else:
                    self.latency.labels(self.tenant, route).observe(time.monotonic() - began)
                self.requests.labels(self.tenant, route, request.method, str(status)).inc()

        return observe

    async def view(self, _: web.Request) -> web.Response:
        return web.Response(body=self.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _route(request: web.Request) -> str:
    """The matched route's pattern (bounded), never the path itself."""
    resource = request.match_info.route.resource
    if resource is None:
        return "unmatched"
    canonical = resource.canonical
    return canonical if canonical else "unmatched"
