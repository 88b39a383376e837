"""A follower of one session's event log: replay from PostgreSQL, then tail.

Catch up by cursor (``seq > after``) in batches; when a read comes back
short, wait for the hub to say the log grew, or for the keepalive interval
to pass, whichever is first, and read again (the read is the truth, so an
idle interval also re-reads: a notification that never came costs one
interval at most). ``clear()`` happens before each read, so a notification
arriving during the read is never lost. Each event is yielded once, in seq
order, and the cursor moves only past what was yielded.

A read that fails because the database is out of reach does not end the
stream: the follower keeps the client's connection with keepalives and reads
again (a capped backoff) until the database answers, then goes on from its
cursor, so an outage costs the client a pause, never a gap or a reconnect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from uuid import UUID

from stint.api.hub import EventHub
from stint.api.schemas import EventOut
from stint.store.backoff import Backoff
from stint.store.client import ClientStore
from stint.store.errors import ConnectionFailed
from stint.store.models import Event

__all__ = ["KEEPALIVE", "follow", "sse_event"]

log = logging.getLogger("stint.api")

KEEPALIVE = b": keepalive\n\n"
_BATCH = 500


async def follow(
    client: ClientStore,
    hub: EventHub,
    *,
    tenant: str | None,
    session_id: UUID,
    after: int,
    until_turn_end: bool,
    keepalive_seconds: float,
) -> AsyncIterator[Event | None]:
    """Events with seq > ``after`` in order, then new ones as they come; ``None``
    when a keepalive is due. Ends after a terminal event with ``until_turn_end``,
    and when the hub closes (the API is shutting down)."""
    cursor = after
    backoff = Backoff(cap=client.config.reconnect_max)
    with hub.subscribe(session_id) as sub:
        while not sub.closed:
            sub.clear()
            try:
                batch = await client.events_after(
                    session_id=session_id, after=cursor, limit=_BATCH, tenant=tenant
                )
            except ConnectionFailed as exc:  # an outage: hold the stream, read again
                log.info("stream of session %s waits for the database: %s", session_id, exc)
                yield None
                await asyncio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            for event in batch:
                cursor = event.seq
                yield event
                if until_turn_end and event.kind.terminal:
                    return
            if len(batch) == _BATCH:
                continue
            if not await sub.wait(keepalive_seconds):
                yield None


def sse_event(event: Event) -> bytes:
    """One Server-Sent Event: ``id`` is the seq, so ``Last-Event-ID`` resumes exactly.
    The data is the event exactly as the JSON page form shows it (one line: JSON
    escapes newlines inside strings)."""
    data = EventOut.of(event).model_dump_json()
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n".encode()
