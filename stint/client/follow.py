"""Following a session's event log across disconnects, without the I/O.

``FollowState`` is what ``follow()`` knows between connections: the cursor (the
last seq delivered), whether the turn's end was seen, how long to wait before
reconnecting. Each connection asks for the events after the cursor with
``Last-Event-ID``, so whatever ended the last one — the API restarted or was
killed, it closed a slow follower's stream, a proxy timed out, the network
broke — the next one goes on exactly where the caller stopped: each event is
delivered once, in order, and only the turn's end (or the caller) ends it.

The API's log is contiguous (1..N, or from after retention's cut), so an event
whose seq is not the cursor's next means the events between were pruned: that,
and the API's own ``pruned`` notice, raise ``EventsPruned`` instead of skipping.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal
from uuid import UUID

import httpx
from httpx_sse import ServerSentEvent
from pydantic import ValidationError

from stint.client.errors import EventsPruned, ProtocolError, RateLimited, Unavailable, Unreachable
from stint.client.exchange import refusal
from stint.client.models import Event
from stint.client.retry import Backoff, FollowPolicy
from stint.client.routes import EVENTS

__all__ = ["FollowState", "Until"]

Until = Literal["turn_end"] | None

_PRUNED = "pruned"  # the API's notice that the events after a resume point are gone


class FollowState:
    """One follower's cursor and reconnection pacing (see the module's docstring)."""

    def __init__(
        self,
        session_id: UUID | str,
        *,
        after: int,
        until: Until,
        turn_id: UUID | str | None,
        policy: FollowPolicy,
    ) -> None:
        if after < 0:
            raise ValueError("after is a seq: 0 or more")
        if until not in ("turn_end", None):
            raise ValueError("until is 'turn_end' or None")
        if turn_id is not None and until != "turn_end":
            raise ValueError("turn_id names the turn whose end ends the stream: until='turn_end'")
        self.session_id = str(session_id)
        self.path = EVENTS.path(session_id=session_id)
        self.cursor = after
        self.until = until
        self.turn_id = UUID(str(turn_id)) if turn_id is not None else None
        self.done = False
        self.reconnects = 0
        self.last_reason: str | None = None
        self._policy = policy
        self._backoff = Backoff(first=policy.first, cap=policy.cap)
        self._progress_at = time.monotonic()

    def request(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client.stream`` to open the next connection.
        The API ends the stream at the next turn's end with ``until=turn_end``; when a
        particular turn is awaited the stream stays open past the others' ends."""
        params = [("until", "turn_end")] if self.until and self.turn_id is None else []
        policy = self._policy
        return {
            "method": "GET",
            "url": self.path,
            "params": params,
            "headers": {"Accept": "text/event-stream", "Last-Event-ID": str(self.cursor)},
            "timeout": httpx.Timeout(policy.timeout, read=policy.read_timeout),
        }

    def opened(self, response: httpx.Response) -> float | None:
        """None when ``response`` is an event stream to read; else the seconds to wait
        before trying again (503, 429), or the refusal raised (401, 404, 409 ...).
        A refusal's body must have been read."""
        if response.status_code == 200:
            kind = response.headers.get("content-type", "").partition(";")[0].strip()
            if kind != "text/event-stream":
                raise ProtocolError(f"GET {self.path}: expected an event stream, got {kind!r}")
            self._progress_at = time.monotonic()
            return None
        error = refusal(response, "GET", self.path)
        if isinstance(error, RateLimited | Unavailable):
            return self._pause(str(error), at_least=error.retry_after)
        raise error

    def receive(self, message: ServerSentEvent) -> Event | None:
        """The event to deliver, or None for a message that is not one (the
        ``retry:`` advice, an event already delivered)."""
        if message.event == _PRUNED:
            raise self._pruned_notice(message.data)
        if not message.id or not message.data:
            return None
        try:
            seq = int(message.id)
        except ValueError:
            raise ProtocolError(f"GET {self.path}: event id {message.id!r} is not a seq") from None
        if seq <= self.cursor:
            return None  # delivered already (the API never resends; this keeps it so)
        if seq != self.cursor + 1:
            raise EventsPruned(session_id=self.session_id, after=self.cursor, first_available=seq)
        try:
            event = Event.model_validate_json(message.data)
        except ValidationError as exc:
            raise ProtocolError(f"GET {self.path}: event {seq} is not an Event: {exc}") from None
        if event.seq != seq:
            raise ProtocolError(f"GET {self.path}: event id {seq} carries seq {event.seq}")
        self.cursor = seq
        self._backoff.reset()
        self._progress_at = time.monotonic()
        if self.until and event.ends_turn and self.turn_id in (None, event.turn_id):
            self.done = True
        return event

    def ended(self, reason: str) -> float:
        """The stream ended (or broke) before the turn's end: the seconds to wait
        before reconnecting from the cursor; ``Unreachable`` once ``give_up_after``
        seconds have passed with no event and no stream opened."""
        return self._pause(reason)

    def _pause(self, reason: str, *, at_least: float | None = None) -> float:
        self.reconnects += 1
        self.last_reason = reason
        limit = self._policy.give_up_after
        if limit is not None and time.monotonic() - self._progress_at > limit:
            raise Unreachable("GET", self.path, f"no event for {limit:g}s; last: {reason}")
        return self._backoff.next_delay(at_least=at_least)

    def _pruned_notice(self, data: str) -> EventsPruned:
        try:
            notice = json.loads(data)
            first = int(notice["next_seq"])
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(f"GET {self.path}: unreadable pruned notice {data!r}") from None
        return EventsPruned(session_id=self.session_id, after=self.cursor, first_available=first)
