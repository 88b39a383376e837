"""The API's routes as this client calls them: one ``Route`` per operation (checked
against ``docs/openapi.json`` by the drift test) and one function per call that
builds its ``Call``, shared by the sync and async clients.

Idempotency keys are made here, once per call, so every retry of that call
sends the same key and the API answers it with the same turn (or signal).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote
from uuid import UUID

from pydantic import BaseModel

from stint.client.exchange import Call
from stint.client.models import (
    AnswerCreate,
    AnswerResult,
    BatchTurnCreate,
    BusyStrategy,
    ChildPage,
    ControlCreate,
    ControlResult,
    DeliveryPage,
    DeliveryStatus,
    EventPage,
    Schedule,
    ScheduleCreate,
    SchedulePage,
    Session,
    SessionCreate,
    SessionPage,
    SessionStatus,
    SignalCreate,
    SignalResult,
    Status,
    Turn,
    TurnBatchCreate,
    TurnBatchQueued,
    TurnCreate,
    TurnPage,
    TurnQueued,
    Webhook,
    WebhookCreate,
    WebhookCreated,
    WebhookPage,
)

__all__ = ["ROUTES", "Route", "new_idempotency_key"]

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Route:
    """An operation: method, path template as OpenAPI spells it, the query
    parameters this client sends, its body and answer models, its success status."""

    name: str
    method: str
    template: str
    result: type[BaseModel]
    body: type[BaseModel] | None = None
    query: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    status: int = 200

    def path(self, **values: object) -> str:
        """The path with each ``{name}`` filled in, escaped as one segment."""
        return self.template.format(**{k: quote(str(v), safe="") for k, v in values.items()})


_S = "/v1/sessions"
_ONE = f"{_S}/{{session_id}}"
_CONTROL_QUERY = ("wait", "wait_seconds")
_LIST_SESSIONS = Route(
    "list_sessions", "GET", _S, SessionPage, None, ("status", "pin", "limit", "cursor")
)
_CREATE_SESSION = Route("create_session", "POST", _S, Session, SessionCreate, status=201)
_GET_SESSION = Route("get_session", "GET", _ONE, Session)
_ENQUEUE = Route(
    "enqueue",
    "POST",
    f"{_ONE}/turns",
    TurnQueued,
    TurnCreate,
    headers=("Idempotency-Key", "traceparent"),
    status=201,
)
_ENQUEUE_BATCH = Route(
    "enqueue_batch",
    "POST",
    "/v1/turns/batch",
    TurnBatchQueued,
    TurnBatchCreate,
    headers=("traceparent",),
    status=201,
)
_LIST_TURNS = Route("list_turns", "GET", f"{_ONE}/turns", TurnPage, None, ("after_seq", "limit"))
_GET_TURN = Route("get_turn", "GET", f"{_ONE}/turns/{{turn_id}}", Turn)
_CANCEL = Route("cancel", "POST", f"{_ONE}/cancel", ControlResult, ControlCreate, _CONTROL_QUERY)
_INTERRUPT = Route(
    "interrupt", "POST", f"{_ONE}/interrupt", ControlResult, ControlCreate, _CONTROL_QUERY
)
_ANSWER = Route("answer", "POST", f"{_ONE}/answers", AnswerResult, AnswerCreate)
_EVENTS = Route(
    "events",
    "GET",
    f"{_ONE}/events",
    EventPage,
    None,
    ("after", "limit", "until", "format"),
    ("Last-Event-ID",),
)
_STATUS = Route("status", "GET", "/v1/status", Status)
_CHILDREN = Route("children", "GET", f"{_ONE}/children", ChildPage)
_SIGNAL = Route(
    "signal",
    "POST",
    f"{_ONE}/signals/{{name}}",
    SignalResult,
    SignalCreate,
    headers=("Idempotency-Key",),
    status=201,
)

# Schedules and webhooks
_SCHEDULES = "/v1/schedules"
_SCHEDULE = f"{_SCHEDULES}/{{schedule_id}}"
_WEBHOOKS = "/v1/webhooks"
_WEBHOOK = f"{_WEBHOOKS}/{{webhook_id}}"
_LIST_SCHEDULES = Route("list_schedules", "GET", _SCHEDULES, SchedulePage)
_CREATE_SCHEDULE = Route(
    "create_schedule", "POST", _SCHEDULES, Schedule, ScheduleCreate, status=201
)
_GET_SCHEDULE = Route("get_schedule", "GET", _SCHEDULE, Schedule)
_DELETE_SCHEDULE = Route("delete_schedule", "DELETE", _SCHEDULE, Schedule)
_PAUSE_SCHEDULE = Route("pause_schedule", "POST", f"{_SCHEDULE}/pause", Schedule)
_RESUME_SCHEDULE = Route("resume_schedule", "POST", f"{_SCHEDULE}/resume", Schedule)
_LIST_WEBHOOKS = Route("list_webhooks", "GET", _WEBHOOKS, WebhookPage)
_CREATE_WEBHOOK = Route(
    "create_webhook", "POST", _WEBHOOKS, WebhookCreated, WebhookCreate, status=201
)
_GET_WEBHOOK = Route("get_webhook", "GET", _WEBHOOK, Webhook)
_DELETE_WEBHOOK = Route("delete_webhook", "DELETE", _WEBHOOK, Webhook)
_ENABLE_WEBHOOK = Route("enable_webhook", "POST", f"{_WEBHOOK}/enable", Webhook)
_LIST_DELIVERIES = Route(
    "list_deliveries", "GET", f"{_WEBHOOK}/deliveries", DeliveryPage, None, ("status", "limit")
)
_AUTOMATION = (
    _LIST_SCHEDULES,
    _CREATE_SCHEDULE,
    _GET_SCHEDULE,
    _DELETE_SCHEDULE,
    _PAUSE_SCHEDULE,
    _RESUME_SCHEDULE,
    _LIST_WEBHOOKS,
    _CREATE_WEBHOOK,
    _GET_WEBHOOK,
    _DELETE_WEBHOOK,
    _ENABLE_WEBHOOK,
    _LIST_DELIVERIES,
)

ROUTES: tuple[Route, ...] = (
    _LIST_SESSIONS,
    _CREATE_SESSION,
    _GET_SESSION,
    _ENQUEUE,
    _ENQUEUE_BATCH,
    _LIST_TURNS,
    _GET_TURN,
    _CANCEL,
    _INTERRUPT,
    _ANSWER,
    _EVENTS,
    _STATUS,
    _SIGNAL,
    _CHILDREN,
    *_AUTOMATION,
)
"""Every operation the client calls; ``events`` also serves ``follow()`` (as SSE)."""

EVENTS = _EVENTS


def new_idempotency_key() -> str:
    """A fresh key for a call that was given none (printable ASCII, as the API asks)."""
    return f"stint-client-{uuid.uuid4()}"


def _params(**values: object) -> list[tuple[str, str]]:
    """Query parameters: None left out, lists repeated, booleans as true/false."""
    found: list[tuple[str, str]] = []
    for name, value in values.items():
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if item is None:
                continue
            found.append((name, str(item).lower() if isinstance(item, bool) else str(item)))
    return found


def create_session(*, pin: str | None) -> Call[Session]:
    # Not replay-safe: a second POST after a lost answer would create a second session.
    return Call("POST", _CREATE_SESSION.path(), Session, body=SessionCreate(pin=pin))


def get_session(session_id: UUID | str) -> Call[Session]:
    return Call("GET", _GET_SESSION.path(session_id=session_id), Session, replay_safe=True)


def list_sessions(
    *,
    status: Iterable[SessionStatus | str] | None,
    pin: str | None,
    limit: int | None,
    cursor: str | None,
) -> Call[SessionPage]:
    params = _params(status=[str(s) for s in status or ()], pin=pin, limit=limit, cursor=cursor)
    return Call("GET", _LIST_SESSIONS.path(), SessionPage, params=params, replay_safe=True)


def enqueue(
    session_id: UUID | str,
    turn_input: Mapping[str, Any],
    *,
    idempotency_key: str | None,
    busy: BusyStrategy | str,
    timeout_seconds: float | None,
    traceparent: str | None,
) -> Call[TurnQueued]:
    headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
    if traceparent is not None:
        headers["traceparent"] = traceparent
    body = TurnCreate(
        input=dict(turn_input), busy=BusyStrategy(busy), timeout_seconds=timeout_seconds
    )
    return Call(
        "POST",
        _ENQUEUE.path(session_id=session_id),
        TurnQueued,
        body=body,
        headers=headers,
        replay_safe=True,
        retry_refused=body.busy is not BusyStrategy.REJECT,
    )


def enqueue_batch(
    turns: Iterable[BatchTurnCreate], *, traceparent: str | None
) -> Call[TurnBatchQueued]:
    """Every turn keyed (a key made here for a turn without one), so a retry of
    the call queues nothing twice."""
    keyed = [
        t if t.idempotency_key else t.model_copy(update={"idempotency_key": new_idempotency_key()})
        for t in turns
    ]
    headers = {} if traceparent is None else {"traceparent": traceparent}
    return Call(
        "POST",
        _ENQUEUE_BATCH.path(),
        TurnBatchQueued,
        body=TurnBatchCreate(turns=keyed),
        headers=headers,
        replay_safe=True,
        retry_refused=all(t.busy is not BusyStrategy.REJECT for t in keyed),
    )


def list_turns(session_id: UUID | str, *, after_seq: int, limit: int | None) -> Call[TurnPage]:
    return Call(
        "GET",
        _LIST_TURNS.path(session_id=session_id),
        TurnPage,
        params=_params(after_seq=after_seq, limit=limit),
        replay_safe=True,
    )


def get_turn(session_id: UUID | str, turn_id: UUID | str) -> Call[Turn]:
    path = _GET_TURN.path(session_id=session_id, turn_id=turn_id)
    return Call("GET", path, Turn, replay_safe=True)


def control(
    action: str,
    session_id: UUID | str,
    *,
    turn_id: UUID | str | None,
    reason: str | None,
    wait: bool,
    wait_seconds: float | None,
) -> Call[ControlResult]:
    """A cancel or interrupt. Replay-safe only when it names its turn: without one,
    a second cancel would also cancel a turn queued after the first."""
    route = _CANCEL if action == "cancel" else _INTERRUPT
    body = ControlCreate(turn_id=UUID(str(turn_id)) if turn_id else None, reason=reason or "api")
    return Call(
        "POST",
        route.path(session_id=session_id),
        ControlResult,
        params=_params(wait=wait or None, wait_seconds=wait_seconds if wait else None),
        body=body,
        replay_safe=turn_id is not None,
    )


def answer(session_id: UUID | str, *, step_key: str, value: Any) -> Call[AnswerResult]:
    # Replay-safe: the same answer again is accepted without writing.
    body = AnswerCreate(step_key=step_key, answer=value)
    path = _ANSWER.path(session_id=session_id)
    return Call("POST", path, AnswerResult, body=body, replay_safe=True)


def events_page(session_id: UUID | str, *, after: int, limit: int | None) -> Call[EventPage]:
    return Call(
        "GET",
        _EVENTS.path(session_id=session_id),
        EventPage,
        params=_params(format="json", after=after, limit=limit),
        replay_safe=True,
    )


def status() -> Call[Status]:
    return Call("GET", _STATUS.path(), Status, replay_safe=True)


def children(session_id: UUID | str) -> Call[ChildPage]:
    return Call("GET", _CHILDREN.path(session_id=session_id), ChildPage, replay_safe=True)


def signal(
    session_id: UUID | str, name: str, *, payload: Any, idempotency_key: str | None
) -> Call[SignalResult]:
    headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
    return Call(
        "POST",
        _SIGNAL.path(session_id=session_id, name=name),
        SignalResult,
        body=SignalCreate(payload=payload),
        headers=headers,
        replay_safe=True,
    )


# Schedules and webhooks. Pause, resume and enable are replay-safe: doing one again
# changes nothing. Creates and deletes are not: a create sent again is a second
# webhook, or a 409 for the schedule's name; a delete sent again is a 404 that would
# hide that the first one deleted.


def create_schedule(
    name: str,
    turn_input: Mapping[str, Any],
    *,
    cron: str | None,
    every_seconds: float | None,
    timezone: str,
    session_id: UUID | str | None,
    pin: str | None,
    catch_up: int,
    busy: BusyStrategy | str,
    timeout_seconds: float | None,
) -> Call[Schedule]:
    body = ScheduleCreate(
        name=name,
        input=dict(turn_input),
        cron=cron,
        every_seconds=every_seconds,
        timezone=timezone,
        session_id=UUID(str(session_id)) if session_id is not None else None,
        pin=pin,
        catch_up=catch_up,
        busy=BusyStrategy(busy),
        timeout_seconds=timeout_seconds,
    )
    return Call("POST", _CREATE_SCHEDULE.path(), Schedule, body=body)


def list_schedules() -> Call[SchedulePage]:
    return Call("GET", _LIST_SCHEDULES.path(), SchedulePage, replay_safe=True)


def get_schedule(schedule_id: UUID | str) -> Call[Schedule]:
    return Call("GET", _GET_SCHEDULE.path(schedule_id=schedule_id), Schedule, replay_safe=True)


def pause_schedule(schedule_id: UUID | str) -> Call[Schedule]:
    path = _PAUSE_SCHEDULE.path(schedule_id=schedule_id)
    return Call("POST", path, Schedule, replay_safe=True)


def resume_schedule(schedule_id: UUID | str) -> Call[Schedule]:
    path = _RESUME_SCHEDULE.path(schedule_id=schedule_id)
    return Call("POST", path, Schedule, replay_safe=True)


def delete_schedule(schedule_id: UUID | str) -> Call[Schedule]:
    return Call("DELETE", _DELETE_SCHEDULE.path(schedule_id=schedule_id), Schedule)


def create_webhook(
    *, url: str, events: Iterable[str], description: str | None
) -> Call[WebhookCreated]:
    body = WebhookCreate(url=url, events=[str(e) for e in events], description=description)
    return Call("POST", _CREATE_WEBHOOK.path(), WebhookCreated, body=body)


def list_webhooks() -> Call[WebhookPage]:
    return Call("GET", _LIST_WEBHOOKS.path(), WebhookPage, replay_safe=True)


def get_webhook(webhook_id: UUID | str) -> Call[Webhook]:
    return Call("GET", _GET_WEBHOOK.path(webhook_id=webhook_id), Webhook, replay_safe=True)


def enable_webhook(webhook_id: UUID | str) -> Call[Webhook]:
    path = _ENABLE_WEBHOOK.path(webhook_id=webhook_id)
    return Call("POST", path, Webhook, replay_safe=True)


def delete_webhook(webhook_id: UUID | str) -> Call[Webhook]:
    return Call("DELETE", _DELETE_WEBHOOK.path(webhook_id=webhook_id), Webhook)


def list_deliveries(
    webhook_id: UUID | str, *, status: DeliveryStatus | str | None, limit: int | None
) -> Call[DeliveryPage]:
    return Call(
        "GET",
        _LIST_DELIVERIES.path(webhook_id=webhook_id),
        DeliveryPage,
        params=_params(status=None if status is None else str(status), limit=limit),
        replay_safe=True,
    )
