"""A Python client for Stint's HTTP API: ``Client`` (blocking) and ``AsyncClient``.

Sessions, turns (with idempotency keys made for you and kept across retries),
answers, cancel, interrupt, signals, schedules, webhook endpoints and their
delivery logs, and ``follow()``: a session's events, each once and in order,
across disconnects, until the turn's end. Answers are typed models; refusals
raise ``ApiError`` subclasses carrying the problem+json.

It needs the ``client`` extra (``pip install 'stint[client]'``: httpx and
httpx-sse) and nothing of the server side: importing it loads no database
driver, no web framework and none of Stint's store, worker or API modules.
"""

from __future__ import annotations

from stint.client.errors import ClientUnavailable

try:
    import httpx as _httpx  # noqa: F401
    import httpx_sse as _httpx_sse  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the wheel test
    raise ClientUnavailable(
        f"stint.client needs the client extra: pip install 'stint[client]' ({exc.name} is missing)"
    ) from exc

from stint.client.aio import AsyncClient, AsyncFollower
from stint.client.errors import (
    ApiError,
    ClientError,
    Conflict,
    EventsPruned,
    Forbidden,
    InvalidRequest,
    NotFound,
    ProtocolError,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from stint.client.models import (
    TERMINAL_KINDS,
    AnswerResult,
    BatchTurnCreate,
    BusyStrategy,
    Child,
    ChildPage,
    ControlResult,
    Delivery,
    DeliveryPage,
    DeliveryStatus,
    Event,
    EventKind,
    EventPage,
    Schedule,
    SchedulePage,
    Session,
    SessionPage,
    SessionStatus,
    SignalResult,
    Status,
    Tick,
    TickOutcome,
    Turn,
    TurnBatchQueued,
    TurnPage,
    TurnQueued,
    TurnStatus,
    Webhook,
    WebhookCreated,
    WebhookPage,
)
from stint.client.retry import FollowPolicy, RetryPolicy
from stint.client.sync import Client, Follower

__all__ = [
    "TERMINAL_KINDS",
    "AnswerResult",
    "ApiError",
    "AsyncClient",
    "AsyncFollower",
    "BatchTurnCreate",
    "BusyStrategy",
    "Child",
    "ChildPage",
    "Client",
    "ClientError",
    "ClientUnavailable",
    "Conflict",
    "ControlResult",
    "Delivery",
    "DeliveryPage",
    "DeliveryStatus",
    "Event",
    "EventKind",
    "EventPage",
    "EventsPruned",
    "FollowPolicy",
    "Follower",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "ProtocolError",
    "RateLimited",
    "RetryPolicy",
    "Schedule",
    "SchedulePage",
    "ServerError",
    "Session",
    "SessionPage",
    "SessionStatus",
    "SignalResult",
    "Status",
    "Tick",
    "TickOutcome",
    "Turn",
    "TurnBatchQueued",
    "TurnPage",
    "TurnQueued",
    "TurnStatus",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "Webhook",
    "WebhookCreated",
    "WebhookPage",
]
