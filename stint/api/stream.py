"""A follower of one session's event log: replay from PostgreSQL, then tail,
as the bytes of a Server-Sent Events stream, in pages bounded by bytes.

Catch up by cursor (``seq > after``) in pages; when a read comes back short,
wait for the hub to say the log grew, or for the keepalive interval to pass,
whichever is first, and read again (the read is the truth, so an idle
interval also re-reads: a notification that never came costs one interval at
most). ``clear()`` happens before each read, so a notification arriving
during the read is never lost. Each event is yielded once, in seq order, and
the cursor moves only past what was yielded.

Memory: before each read the follower takes a grant from the process's
``ByteBudget`` (at most ``STINT_API_STREAM_PAGE_BYTES``) and reads no more
than that many bytes of events (the first event always); after the page it
yields ``DRAIN``, and the response waits until the client has taken what was
sent before the grant is given back. A client that does not take it within
``STINT_API_STREAM_DRAIN_SECONDS`` has its stream closed (``EventStreamResponse``);
it resumes by ``Last-Event-ID`` and misses nothing. While the budget has no
room the follower sends keepalives and waits its turn.

Honest gaps: the log is contiguous from ``events_pruned_through + 1`` (a
reader sees a prefix of it: appends to one session are serialised by its row
lock). A resume from a seq that retention already removed, or a page whose
first seq is not the cursor's next one (pruned while following), is announced
by a ``pruned`` event naming what is gone before the next event is sent.

A read that fails because the database is out of reach does not end the
stream: the follower keeps the client's connection with keepalives and reads
again (a capped backoff) until the database answers, then goes on from its
cursor, so an outage costs the client a pause, never a gap or a reconnect.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from uuid import UUID

from stint.api.budget import ByteBudget, Holder
from stint.api.hub import EventHub
from stint.api.schemas import EventOut
from stint.store.backoff import Backoff
from stint.store.client import ClientStore
from stint.store.errors import ConnectionFailed
from stint.store.models import Event, PagedEvent

__all__ = [
    "DRAIN",
    "KEEPALIVE",
    "RETRY",
    "Drain",
    "StreamLimits",
    "follow",
    "pruned_event",
    "sse_event",
]

log = logging.getLogger("stint.api")

KEEPALIVE = b": keepalive\n\n"
RETRY = b"retry: 1000\n\n"
_BATCH = 500


class Drain:
    """Yielded after each page: wait until the client took it, then go on."""


DRAIN = Drain()


@dataclass(frozen=True)
class StreamLimits:
    keepalive_seconds: float
    page_bytes: int
    budget: ByteBudget


async def follow(
    client: ClientStore,
    hub: EventHub,
    limits: StreamLimits,
    holder: Holder,
    *,
    tenant: str | None,
    session_id: UUID,
    after: int,
    pruned_through: int,
    until_turn_end: bool,
) -> AsyncGenerator[bytes | Drain, None]:
    """SSE bytes of the events with seq > ``after`` in order, then of new ones as
    they come; keepalives while idle; ``DRAIN`` after each page. Ends after a
    terminal event with ``until_turn_end``, and when the hub closes (the API is
    shutting down)."""
    cursor = after
    if after < pruned_through:
        yield pruned_event(after, pruned_through)
        cursor = pruned_through  # what lay between is gone: read on from there
    backoff = Backoff(cap=client.config.reconnect_max)
    with hub.subscribe(session_id) as sub:
        while not sub.closed:
            sub.clear()
            grant = await limits.budget.take(
                holder, limits.page_bytes, seconds=limits.keepalive_seconds
            )
            if grant is None:  # the process's budget is taken: wait our turn
                yield KEEPALIVE
                continue
            try:
                try:
                    batch = await client.events_page(
                        session_id=session_id,
                        after=cursor,
                        max_bytes=grant.amount,
                        limit=_BATCH,
                        tenant=tenant,
                    )
                except ConnectionFailed as exc:  # an outage: hold the stream, read again
                    log.info("stream of session %s waits for the database: %s", session_id, exc)
                    grant.release()
                    yield KEEPALIVE
                    await asyncio.sleep(backoff.next_delay())
                    continue
                backoff.reset()
                page, full, ended = _page(batch, cursor, until_turn_end)
                del batch  # the page's bytes are all that is held from here on
                grant.resize(sum(len(chunk) for _, chunk in page))
                for seq, chunk in page:
                    yield chunk
                    cursor = max(cursor, seq)
                if page:
                    yield DRAIN
            finally:
                grant.release()
            if ended:
                return
            if full:
                continue
            if not await sub.wait(limits.keepalive_seconds):
                yield KEEPALIVE


def _page(
    batch: list[PagedEvent], cursor: int, until_turn_end: bool
) -> tuple[list[tuple[int, bytes]], bool, bool]:
    """The page's SSE chunks (a ``pruned`` notice first when its first seq is not
    the cursor's next), whether another page may follow at once, and whether a
    terminal event ended the stream."""
    page: list[tuple[int, bytes]] = []
    if batch and batch[0].seq > cursor + 1:
        page.append((cursor, pruned_event(cursor, batch[0].seq - 1)))
    for event in batch:
        page.append((event.seq, sse_event(event)))
        if until_turn_end and event.kind.terminal:
            return page, False, True
    # A page cut by its count or by its bytes is followed at once by the next.
    return page, len(batch) == _BATCH or (len(batch) > 0 and batch[-1].more), False


def sse_event(event: Event) -> bytes:
    """One Server-Sent Event: ``id`` is the seq, so ``Last-Event-ID`` resumes exactly.
    The data is the event exactly as the JSON page form shows it (one line: JSON
    escapes newlines inside strings)."""
    data = EventOut.of(event).model_dump_json()
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n".encode()


def pruned_event(after: int, pruned_through: int) -> bytes:
    """The notice that seqs ``after + 1 .. pruned_through`` are gone (retention
    removed them): no ``id``, so the client's Last-Event-ID stays where it was."""
    data = json.dumps(
        {"after": after, "pruned_through": pruned_through, "next_seq": pruned_through + 1}
    )
    return f"event: pruned\ndata: {data}\n\n".encode()
