"""``AsyncClient``: the asyncio twin of ``Client``; each method does what the
``Client`` method of the same name says, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

import httpx
from httpx_sse import EventSource
from pydantic import BaseModel

from stint.client import routes
from stint.client.connection import http_options
from stint.client.exchange import Call, describe
from stint.client.follow import FollowState, Until
from stint.client.models import (
    AnswerResult,
    BatchTurnCreate,
    BusyStrategy,
    ChildPage,
    ControlResult,
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
    Turn,
    TurnBatchQueued,
    TurnPage,
    TurnQueued,
    Webhook,
    WebhookCreated,
    WebhookPage,
)
from stint.client.retry import FollowPolicy, RetryPolicy

__all__ = ["AsyncClient", "AsyncFollower"]

T = TypeVar("T", bound=BaseModel)


class AsyncClient:
    """Stint's HTTP API for one key, on asyncio::

    async with AsyncClient("http://127.0.0.1:8000", api_key) as stint:
        session = await stint.create_session()
        turn = await stint.enqueue(session.id, {"message": "hello"})
        async with stint.follow(session.id, turn_id=turn.turn_id) as events:
            async for event in events:
                print(event.seq, event.kind)
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        follow: FollowPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base_url = base_url
        self._retry = retry or RetryPolicy()
        self._follow = follow or FollowPolicy()
        options = http_options(base_url, api_key, timeout)
        self._http = httpx.AsyncClient(**options, transport=transport)

    def __repr__(self) -> str:
        return f"AsyncClient({self._base_url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempts = call.attempts(self._retry)
        while True:
            try:
                response = await self._http.request(**call.request())
            except httpx.TransportError as exc:
                await asyncio.sleep(attempts.after_transport_error(exc))
                continue
            delay = attempts.after_answer(response)
            if delay is None:
                return call.read(response)
            await asyncio.sleep(delay)

    async def create_session(self, *, pin: str | None = None) -> Session:
        return await self._send(routes.create_session(pin=pin))

    async def get_session(self, session_id: UUID | str) -> Session:
        return await self._send(routes.get_session(session_id))

    async def list_sessions(
        self,
        *,
        status: Iterable[SessionStatus | str] | None = None,
        pin: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SessionPage:
        call = routes.list_sessions(status=status, pin=pin, limit=limit, cursor=cursor)
        return await self._send(call)

    async def enqueue(
        self,
        session_id: UUID | str,
        turn_input: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        busy: BusyStrategy | str = BusyStrategy.ENQUEUE,
        timeout_seconds: float | None = None,
        traceparent: str | None = None,
    ) -> TurnQueued:
        call = routes.enqueue(
            session_id,
            turn_input,
            idempotency_key=idempotency_key,
            busy=busy,
            timeout_seconds=timeout_seconds,
            traceparent=traceparent,
        )
        return await self._send(call)

    async def enqueue_batch(
        self, turns: Iterable[BatchTurnCreate], *, traceparent: str | None = None
    ) -> TurnBatchQueued:
        """Queue many turns (each ``BatchTurnCreate``: a session id, an input, and
        optionally a key, busy strategy and timeout) in one request: all of them,
        or none when one is refused (the error names it: ``item=<index>``)."""
        return await self._send(routes.enqueue_batch(turns, traceparent=traceparent))

    async def list_turns(
        self, session_id: UUID | str, *, after_seq: int = 0, limit: int | None = None
    ) -> TurnPage:
        return await self._send(routes.list_turns(session_id, after_seq=after_seq, limit=limit))

    async def get_turn(self, session_id: UUID | str, turn_id: UUID | str) -> Turn:
        return await self._send(routes.get_turn(session_id, turn_id))

    async def children(self, session_id: UUID | str) -> ChildPage:
        """The child sessions the session's turns spawned, oldest first (its parent is
        the session's ``parent_id``)."""
        return await self._send(routes.children(session_id))

    async def cancel(
        self,
        session_id: UUID | str,
        *,
        turn_id: UUID | str | None = None,
        reason: str | None = None,
        wait: bool = False,
        wait_seconds: float | None = None,
    ) -> ControlResult:
        call = routes.control(
            "cancel",
            session_id,
            turn_id=turn_id,
            reason=reason,
            wait=wait,
            wait_seconds=wait_seconds,
        )
        return await self._send(call)

    async def interrupt(
        self,
        session_id: UUID | str,
        *,
        turn_id: UUID | str | None = None,
        reason: str | None = None,
        wait: bool = False,
        wait_seconds: float | None = None,
    ) -> ControlResult:
        call = routes.control(
            "interrupt",
            session_id,
            turn_id=turn_id,
            reason=reason,
            wait=wait,
            wait_seconds=wait_seconds,
        )
        return await self._send(call)

    async def answer(self, session_id: UUID | str, step_key: str, answer: Any) -> AnswerResult:
        return await self._send(routes.answer(session_id, step_key=step_key, value=answer))

    async def signal(
        self,
        session_id: UUID | str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        call = routes.signal(session_id, name, payload=payload, idempotency_key=idempotency_key)
        return await self._send(call)

    async def events(
        self, session_id: UUID | str, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        return await self._send(routes.events_page(session_id, after=after, limit=limit))

    def follow(
        self,
        session_id: UUID | str,
        *,
        after: int = 0,
        until: Until = "turn_end",
        turn_id: UUID | str | None = None,
    ) -> AsyncFollower:
        """An async iterator of events; see ``Client.follow``."""
        state = FollowState(
            session_id, after=after, until=until, turn_id=turn_id, policy=self._follow
        )
        return AsyncFollower(self._http, state)

    async def status(self) -> Status:
        return await self._send(routes.status())

    # Schedules

    async def create_schedule(
        self,
        name: str,
        turn_input: Mapping[str, Any],
        *,
        cron: str | None = None,
        every_seconds: float | None = None,
        timezone: str = "UTC",
        session_id: UUID | str | None = None,
        pin: str | None = None,
        catch_up: int = 0,
        busy: BusyStrategy | str = BusyStrategy.ENQUEUE,
        timeout_seconds: float | None = None,
    ) -> Schedule:
        call = routes.create_schedule(
            name,
            turn_input,
            cron=cron,
            every_seconds=every_seconds,
            timezone=timezone,
            session_id=session_id,
            pin=pin,
            catch_up=catch_up,
            busy=busy,
            timeout_seconds=timeout_seconds,
        )
        return await self._send(call)

    async def list_schedules(self) -> SchedulePage:
        return await self._send(routes.list_schedules())

    async def get_schedule(self, schedule_id: UUID | str) -> Schedule:
        return await self._send(routes.get_schedule(schedule_id))

    async def pause_schedule(self, schedule_id: UUID | str) -> Schedule:
        return await self._send(routes.pause_schedule(schedule_id))

    async def resume_schedule(self, schedule_id: UUID | str) -> Schedule:
        return await self._send(routes.resume_schedule(schedule_id))

    async def delete_schedule(self, schedule_id: UUID | str) -> Schedule:
        return await self._send(routes.delete_schedule(schedule_id))

    # Webhooks

    async def create_webhook(
        self, url: str, events: Iterable[EventKind | str], *, description: str | None = None
    ) -> WebhookCreated:
        call = routes.create_webhook(url=url, events=events, description=description)
        return await self._send(call)

    async def list_webhooks(self) -> WebhookPage:
        return await self._send(routes.list_webhooks())

    async def get_webhook(self, webhook_id: UUID | str) -> Webhook:
        return await self._send(routes.get_webhook(webhook_id))

    async def enable_webhook(self, webhook_id: UUID | str) -> Webhook:
        return await self._send(routes.enable_webhook(webhook_id))

    async def delete_webhook(self, webhook_id: UUID | str) -> Webhook:
        return await self._send(routes.delete_webhook(webhook_id))

    async def list_deliveries(
        self,
        webhook_id: UUID | str,
        *,
        status: DeliveryStatus | str | None = None,
        limit: int | None = None,
    ) -> DeliveryPage:
        return await self._send(routes.list_deliveries(webhook_id, status=status, limit=limit))


class AsyncFollower:
    """An async iterator of ``Event``s (see ``Client.follow``); ``cursor`` is the
    last seq delivered, ``reconnects`` how many times it had to connect again."""

    def __init__(self, http: httpx.AsyncClient, state: FollowState) -> None:
        self._http = http
        self._state = state
        self._events = self._run()

    @property
    def cursor(self) -> int:
        return self._state.cursor

    @property
    def reconnects(self) -> int:
        return self._state.reconnects

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await anext(self._events)

    async def aclose(self) -> None:
        """Stop following and close the connection."""
        await self._events.aclose()

    async def __aenter__(self) -> AsyncFollower:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[Event, None]:
        state = self._state
        while True:
            try:
                async with self._http.stream(**state.request()) as response:
                    if response.status_code != 200:
                        await response.aread()
                    delay = state.opened(response)
                    if delay is None:
                        async for message in EventSource(response).aiter_sse():
                            event = state.receive(message)
                            if event is not None:
                                yield event
                                if state.done:
                                    return
                        delay = state.ended("the API ended the stream")
            except httpx.TransportError as exc:
                delay = state.ended(describe(exc))
            await asyncio.sleep(delay)
