"""What every request handler reaches: the stores over the API's pools, and the hub.

Built once by the app's lifespan and kept on ``app.state``; handlers get it
through the ``services`` dependency, never from a global.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from stint.api.hub import EventHub
from stint.api.stream import StreamLimits
from stint.config.settings import Settings
from stint.store.children import ChildStore
from stint.store.client import ClientStore
from stint.store.config import StoreConfig
from stint.store.controls import ControlStore
from stint.store.dashboard import DashboardStore
from stint.store.dashboard_sessions import DashboardSessionStore
from stint.store.keys import KeyStore
from stint.store.pool import Pool
from stint.store.schedules import ScheduleStore
from stint.store.sealed import WebhookKey
from stint.store.stats import StatsStore
from stint.store.webhooks import WebhookStore

__all__ = ["Services", "services"]


@dataclass(frozen=True)
class Services:
    """Request handlers use ``client``, ``controls`` and ``keys`` (one pool);
    event followers read through ``follow_client`` (a second, small pool), so
    a crowd of streams can never starve request handlers of connections."""

    settings: Settings
    config: StoreConfig
    pool: Pool
    client: ClientStore
    controls: ControlStore
    children: ChildStore
    keys: KeyStore
    follow_client: ClientStore
    hub: EventHub
    dashboard: DashboardStore
    stats: StatsStore
    stream_limits: StreamLimits
    dashboard_sessions: DashboardSessionStore
    schedules: ScheduleStore
    webhooks: WebhookStore
    webhook_key: WebhookKey | None  # None: STINT_WEBHOOK_KEY unset, no endpoint can be made


def services(request: Request) -> Services:
    found = request.app.state.services
    assert isinstance(found, Services)
    return found
