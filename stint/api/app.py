"""The FastAPI application: routes, refusals as problem+json, body limits, and a
lifespan that opens the API's two pools and its one LISTEN connection.

``create_app`` connects to nothing; the lifespan does, when the server starts.
So the OpenAPI spec can be produced (and compared with the committed one)
without a database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version as package_version
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi

from stint.api import events, health, metrics, schedules, sessions, turn_batches, waits, webhooks
from stint.api.budget import ByteBudget
from stint.api.busy import RequestLimit
from stint.api.dashboard.pages import install_dashboard
from stint.api.gate import AuthGate
from stint.api.hub import EventHub
from stint.api.limits import BodyLimits
from stint.api.metrics import RequestMetrics
from stint.api.problems import Problem, install_problem_handlers
from stint.api.query import documented_query
from stint.api.services import Services
from stint.api.stream import StreamLimits
from stint.config.settings import Settings
from stint.store.children import ChildStore
from stint.store.client import ClientStore
from stint.store.config import ROLE_API, ROLE_API_FOLLOW, StoreConfig
from stint.store.controls import ControlStore
from stint.store.dashboard import DashboardStore
from stint.store.dashboard_sessions import DashboardSessionStore
from stint.store.keys import KeyStore
from stint.store.pool import open_pool
from stint.store.schedules import ScheduleStore
from stint.store.sealed import WebhookKey
from stint.store.stats import StatsStore
from stint.store.webhooks import WebhookStore
from stint.telemetry.metrics import ApiMetrics, ApiState

__all__ = ["create_app"]

_DESCRIPTION = (
    "Stint's HTTP API: create sessions, queue turns, control and answer them, and follow "
    "each session's event log as a resumable Server-Sent Events stream (the SSE id is the "
    "event's seq; reconnect with Last-Event-ID). Every /v1 route needs an API key from "
    "`stint keys create --tenant T` as `Authorization: Bearer <key>`, and sees only its "
    "tenant's sessions. Refusals are application/problem+json."
)


def _lifespan(settings: Settings, config: StoreConfig) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await open_pool(config, ROLE_API, min_size=1, max_size=settings.api_pool_size)
        follow_pool = None
        hub = EventHub(config)
        try:
            follow_pool = await open_pool(
                config, ROLE_API_FOLLOW, min_size=1, max_size=settings.api_follow_pool_size
            )
            hub.start()
            app.state.services = Services(
                settings=settings,
                config=config,
                pool=pool,
                client=ClientStore(config, pool),
                controls=ControlStore(config, pool),
                children=ChildStore(config, pool, None),
                keys=KeyStore(config, pool),
                follow_client=ClientStore(config, follow_pool),
                hub=hub,
                dashboard=DashboardStore(config, pool),
                stats=StatsStore(config, pool),
                stream_limits=StreamLimits(
                    keepalive_seconds=settings.api_keepalive_seconds,
                    page_bytes=settings.api_stream_page_bytes,
                    budget=ByteBudget(settings.api_stream_budget_bytes),
                ),
                dashboard_sessions=DashboardSessionStore(config, pool),
                schedules=ScheduleStore(config, pool),
                webhooks=WebhookStore(config, pool),
                webhook_key=_webhook_key(settings),
            )
            yield
        finally:
            await hub.stop()
            if follow_pool is not None:
                await follow_pool.close()
            await pool.close()

    return lifespan


def _webhook_key(settings: Settings) -> WebhookKey | None:
    encoded = settings.webhook_key.get_secret_value()
    return WebhookKey(encoded) if encoded else None


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's spec plus the Problem schema every refusal refers to."""
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        spec.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
            Problem.model_json_schema()
        )
        app.openapi_schema = spec
    return app.openapi_schema


def _api_state(app: FastAPI) -> ApiState | None:
    found = getattr(app.state, "services", None)
    if not isinstance(found, Services):
        return None  # not started (or already stopped): nothing to report
    hub = found.hub
    return ApiState(
        event_streams=hub.followers,
        hub_notifications=hub.notifications,
        hub_reconnects=hub.reconnects,
    )


def create_app(settings: Settings, config: StoreConfig) -> FastAPI:
    app = FastAPI(
        title="Stint",
        version=package_version("stint"),
        description=_DESCRIPTION,
        lifespan=_lifespan(settings, config),
        docs_url=None,  # no interactive docs: their script came from a CDN (issue 22)
        redoc_url=None,
    )
    strict = [Depends(documented_query)]
    app.include_router(health.router, tags=["health"])
    app.include_router(sessions.router, tags=["sessions"], dependencies=strict)
    app.include_router(turn_batches.router, tags=["sessions"], dependencies=strict)
    app.include_router(events.router, tags=["events"], dependencies=strict)
    app.include_router(waits.router, tags=["sessions"], dependencies=strict)
    app.include_router(schedules.router, tags=["schedules"], dependencies=strict)
    app.include_router(webhooks.router, tags=["webhooks"], dependencies=strict)
    app.include_router(metrics.router)
    install_dashboard(app)
    # No redirect to the same path with a slash added: Starlette builds that
    # Location from the request's Host header (issue 22: Host reflection).
    app.router.redirect_slashes = False
    install_problem_handlers(app, retry_after=settings.api_retry_after_seconds)
    app.add_middleware(
        BodyLimits,
        max_bytes=settings.api_max_body_bytes,
        max_depth=settings.max_input_depth + 1,
        form_prefix="/dashboard/",
    )
    app.add_middleware(AuthGate)
    app.add_middleware(
        RequestLimit,
        max_requests=settings.api_max_requests,
        retry_after=settings.api_retry_after_seconds,
    )
    app.state.metrics = ApiMetrics(lambda: _api_state(app))
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
