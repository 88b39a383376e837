"""The API's Prometheus metrics: requests by route template, and /metrics.

Labels never carry a tenant, a key or an id: a route is its template
(``/v1/sessions/{session_id}``), never the path a client sent. /metrics needs
an operator key (``Authorization: Bearer``) unless ``STINT_API_METRICS_PUBLIC``
opens it to scrapers that hold no key, which is safe to do because of that
rule: the page describes the API process, not any tenant's data.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Request, Security
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stint.api.auth import bearer_scheme
from stint.api.problems import ApiProblem
from stint.api.services import services
from stint.telemetry.metrics import CONTENT_TYPE, ApiMetrics, render

__all__ = ["RequestMetrics", "router"]

router = APIRouter()


class RequestMetrics:
    """Pure ASGI: counts each answered request by method, route template and
    status, and times it to its response head (a stream's body may last hours)."""

    def __init__(self, app: ASGIApp, *, metrics: ApiMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                method = str(scope["method"])
                status = str(message["status"])
                self._metrics.requests.labels(method, template, status).inc()
                self._metrics.request_seconds.labels(method, template).observe(
                    time.perf_counter() - started
                )
            await send(message)

        await self._app(scope, receive, counted)


@router.get("/metrics", include_in_schema=False)
async def metrics(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)],
) -> Response:
    svc = services(request)
    if not svc.settings.api_metrics_public:
        if credentials is None:
            raise ApiProblem(401, "send an operator API key as Authorization: Bearer <key>")
        caller = await svc.keys.keys_verify(token=credentials.credentials)
        if caller is None:
            raise ApiProblem(401, "the API key is not valid (unknown, revoked or mistyped)")
        if not caller.operator:
            raise ApiProblem(403, "/metrics needs an operator key (stint keys create --operator)")
    registry = request.app.state.metrics.registry
    return Response(
        render(registry), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"}
    )
