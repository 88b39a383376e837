"""``Client``: the blocking client for Stint's HTTP API (``AsyncClient`` is its twin)."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator, Mapping
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

__all__ = ["Client", "Follower"]

T = TypeVar("T", bound=BaseModel)


class Client:
    """Stint's HTTP API for one key (one tenant)::

        with Client("http://127.0.0.1:8000", api_key) as stint:
            session = stint.create_session()
            turn = stint.enqueue(session.id, {"message": "hello"})
            for event in stint.follow(session.id, turn_id=turn.turn_id):
                print(event.seq, event.kind, event.payload)

    Refusals raise ``ApiError`` subclasses carrying the problem+json; calls are
    retried only where that is safe (see ``stint.client.retry``). The key is
    sent as ``Authorization: Bearer`` and never appears in a repr or an error.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        follow: FollowPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._base_url = base_url
        self._retry = retry or RetryPolicy()
        self._follow = follow or FollowPolicy()
        self._http = httpx.Client(**http_options(base_url, api_key, timeout), transport=transport)

    def __repr__(self) -> str:
        return f"Client({self._base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempts = call.attempts(self._retry)
        while True:
            try:
                response = self._http.request(**call.request())
            except httpx.TransportError as exc:
                time.sleep(attempts.after_transport_error(exc))
                continue
            delay = attempts.after_answer(response)
            if delay is None:
                return call.read(response)
            time.sleep(delay)

    # Sessions

    def create_session(self, *, pin: str | None = None) -> Session:
        """A new session of the key's tenant (``pin``: only workers started with
        ``--pin PIN`` run it). Not retried once sent: a lost answer could mean a
        session was made."""
        return self._send(routes.create_session(pin=pin))

    def get_session(self, session_id: UUID | str) -> Session:
        return self._send(routes.get_session(session_id))

    def list_sessions(
        self,
        *,
        status: Iterable[SessionStatus | str] | None = None,
        pin: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> SessionPage:
        """One page, newest first; pass ``next_cursor`` as ``cursor`` for the next."""
        return self._send(routes.list_sessions(status=status, pin=pin, limit=limit, cursor=cursor))

    # Turns

    def enqueue(
        self,
        session_id: UUID | str,
        turn_input: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        busy: BusyStrategy | str = BusyStrategy.ENQUEUE,
        timeout_seconds: float | None = None,
        traceparent: str | None = None,
    ) -> TurnQueued:
        """Queue a turn. Without ``idempotency_key`` one is made for this call and sent
        on every retry of it, so a retry never queues a second turn; pass your own to
        make retries across calls (or processes) safe too."""
        call = routes.enqueue(
            session_id,
            turn_input,
            idempotency_key=idempotency_key,
            busy=busy,
            timeout_seconds=timeout_seconds,
            traceparent=traceparent,
        )
        return self._send(call)

    def enqueue_batch(
        self, turns: Iterable[BatchTurnCreate], *, traceparent: str | None = None
    ) -> TurnBatchQueued:
        """Queue many turns (each ``BatchTurnCreate``: a session id, an input, and
        optionally a key, busy strategy and timeout) in one request: all of them,
        or none when one is refused (the error names it: ``item=<index>``)."""
        return self._send(routes.enqueue_batch(turns, traceparent=traceparent))

    def list_turns(
        self, session_id: UUID | str, *, after_seq: int = 0, limit: int | None = None
    ) -> TurnPage:
        return self._send(routes.list_turns(session_id, after_seq=after_seq, limit=limit))

    def get_turn(self, session_id: UUID | str, turn_id: UUID | str) -> Turn:
        return self._send(routes.get_turn(session_id, turn_id))

    def children(self, session_id: UUID | str) -> ChildPage:
        """The child sessions the session's turns spawned, oldest first (its parent is
        the session's ``parent_id``)."""
        return self._send(routes.children(session_id))

    # Controls and answers

    def cancel(
        self,
        session_id: UUID | str,
        *,
        turn_id: UUID | str | None = None,
        reason: str | None = None,
        wait: bool = False,
        wait_seconds: float | None = None,
    ) -> ControlResult:
        """Cancel the session's queued turns and its running one (or only ``turn_id``);
        ``wait=True`` answers once the active turn has ended."""
        return self._send(
            routes.control(
                "cancel",
                session_id,
                turn_id=turn_id,
                reason=reason,
                wait=wait,
                wait_seconds=wait_seconds,
            )
        )

    def interrupt(
        self,
        session_id: UUID | str,
        *,
        turn_id: UUID | str | None = None,
        reason: str | None = None,
        wait: bool = False,
        wait_seconds: float | None = None,
    ) -> ControlResult:
        """Interrupt the running turn and its cascade children's turns (queued turns go on)."""
        return self._send(
            routes.control(
                "interrupt",
                session_id,
                turn_id=turn_id,
                reason=reason,
                wait=wait,
                wait_seconds=wait_seconds,
            )
        )

    def answer(self, session_id: UUID | str, step_key: str, answer: Any) -> AnswerResult:
        """Answer a parked turn's question (``step_key`` is in its
        ``approval.requested`` event); the turn resumes with ``answer``."""
        return self._send(routes.answer(session_id, step_key=step_key, value=answer))

    def signal(
        self,
        session_id: UUID | str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        """Deliver signal ``name`` to the session (``POST .../signals/{name}``), keyed
        like ``enqueue``: a retry delivers it once."""
        call = routes.signal(session_id, name, payload=payload, idempotency_key=idempotency_key)
        return self._send(call)

    # Events and status

    def events(
        self, session_id: UUID | str, *, after: int = 0, limit: int | None = None
    ) -> EventPage:
        """One page of the session's events after ``after`` (the JSON form)."""
        return self._send(routes.events_page(session_id, after=after, limit=limit))

    def follow(
        self,
        session_id: UUID | str,
        *,
        after: int = 0,
        until: Until = "turn_end",
        turn_id: UUID | str | None = None,
    ) -> Follower:
        """The session's events after ``after``, live, each once and in order, across
        disconnects (it reconnects by itself with ``Last-Event-ID``). Ends after the
        next turn's end (``until="turn_end"``), or after ``turn_id``'s end, or never
        (``until=None``: close it). Use it as ``with client.follow(...) as events:``."""
        state = FollowState(
            session_id, after=after, until=until, turn_id=turn_id, policy=self._follow
        )
        return Follower(self._http, state)

    def status(self) -> Status:
        """The tenant's sessions by status and queue; the fleet's live capacity."""
        return self._send(routes.status())

    # Schedules

    def create_schedule(
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
        """A schedule named ``name`` (unique in the tenant) that queues ``turn_input`` as a
        turn per tick of ``cron`` (read in ``timezone``) or of ``every_seconds``: on
        ``session_id`` (``busy`` says what a tick does while a turn is in progress), or
        on a new session per tick (with ``pin``). ``catch_up``: missed ticks to run after
        downtime. A bad expression, zone or interval raises ``InvalidRequest``, a name in
        use ``Conflict``; nothing is written. Not retried once sent."""
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
        return self._send(call)

    def list_schedules(self) -> SchedulePage:
        """The tenant's schedules, by name, each with its next run."""
        return self._send(routes.list_schedules())

    def get_schedule(self, schedule_id: UUID | str) -> Schedule:
        """A schedule with its latest ticks (``recent_ticks``: what each queued)."""
        return self._send(routes.get_schedule(schedule_id))

    def pause_schedule(self, schedule_id: UUID | str) -> Schedule:
        """Pause it: ticks that fall while paused never run (pausing again is a no-op)."""
        return self._send(routes.pause_schedule(schedule_id))

    def resume_schedule(self, schedule_id: UUID | str) -> Schedule:
        """Resume it from its first tick after now (resuming a running one is a no-op)."""
        return self._send(routes.resume_schedule(schedule_id))

    def delete_schedule(self, schedule_id: UUID | str) -> Schedule:
        """Delete it and answer it as it was; the turns it queued stay. Not retried once
        sent: a retry after a lost answer would be a ``NotFound`` hiding the delete."""
        return self._send(routes.delete_schedule(schedule_id))

    # Webhooks

    def create_webhook(
        self, url: str, events: Iterable[EventKind | str], *, description: str | None = None
    ) -> WebhookCreated:
        """An endpoint to which the tenant's events of the kinds ``events`` are POSTed,
        signed. The answer carries the signing ``secret``, shown this once (never in a
        later answer, nor in the answer's repr): keep it. Needs ``STINT_WEBHOOK_KEY`` on
        the API (else ``Unavailable``); a bad URL or kind raises ``InvalidRequest`` with
        nothing written. Not retried once sent: a replay would make a second endpoint."""
        call = routes.create_webhook(url=url, events=events, description=description)
        return self._send(call)

    def list_webhooks(self) -> WebhookPage:
        """The tenant's webhook endpoints (never their secrets)."""
        return self._send(routes.list_webhooks())

    def get_webhook(self, webhook_id: UUID | str) -> Webhook:
        return self._send(routes.get_webhook(webhook_id))

    def enable_webhook(self, webhook_id: UUID | str) -> Webhook:
        """Enable an endpoint disabled for failing; its pending deliveries go out."""
        return self._send(routes.enable_webhook(webhook_id))

    def delete_webhook(self, webhook_id: UUID | str) -> Webhook:
        """Delete the endpoint and its delivery log; answered as it was. Not retried
        once sent (see ``delete_schedule``)."""
        return self._send(routes.delete_webhook(webhook_id))

    def list_deliveries(
        self,
        webhook_id: UUID | str,
        *,
        status: DeliveryStatus | str | None = None,
        limit: int | None = None,
    ) -> DeliveryPage:
        """The endpoint's delivery log, newest first: only ``status`` when given, at most
        ``limit`` (the API's default: 50)."""
        return self._send(routes.list_deliveries(webhook_id, status=status, limit=limit))


class Follower:
    """An iterator of ``Event``s (see ``Client.follow``). ``cursor`` is the last seq
    delivered, ``reconnects`` how many times it had to connect again."""

    def __init__(self, http: httpx.Client, state: FollowState) -> None:
        self._http = http
        self._state = state
        self._events = self._run()

    @property
    def cursor(self) -> int:
        return self._state.cursor

    @property
    def reconnects(self) -> int:
        return self._state.reconnects

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._events)

    def close(self) -> None:
        """Stop following and close the connection."""
        self._events.close()

    def __enter__(self) -> Follower:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self) -> Generator[Event, None, None]:
        state = self._state
        while True:
            try:
                with self._http.stream(**state.request()) as response:
                    if response.status_code != 200:
                        response.read()
                    delay = state.opened(response)
                    if delay is None:
                        for message in EventSource(response).iter_sse():
                            event = state.receive(message)
                            if event is not None:
                                yield event
                                if state.done:
                                    return
                        delay = state.ended("the API ended the stream")
            except httpx.TransportError as exc:
                delay = state.ended(describe(exc))
            time.sleep(delay)
