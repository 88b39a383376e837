"""Follow a session's event log: catch up by cursor, then LISTEN for more.

The cursor (last printed seq) is the truth; a notification only says "read
again". After a lost connection the follower reconnects and resumes exactly
after the last seq it emitted, so a client sees 1..N with no gap or repeat.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from uuid import UUID

from stint.ops.inputs import UsageError
from stint.store.backoff import Backoff
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.errors import ConnectionRejected, DatabaseError, StoreError
from stint.store.listen import Listener
from stint.store.models import LogBounds

__all__ = ["Gap", "follow_events", "look_up", "tail_start", "tell_pruned"]

log = logging.getLogger("stint.follow")

_RECHECK_SECONDS = 1.0

T = TypeVar("T")


async def look_up(call: Callable[[], Awaitable[T]], config: StoreConfig, *, follow: bool) -> T:
    """A follower's first reads (the session, its log's bounds) before it follows.

    Following rides through database outages from its first catch-up on; a lost
    connection during these reads must not end it either, so with ``follow`` a
    database error other than a refused connection (a password, a missing
    database: retrying cannot fix those) is retried with the follower's capped
    backoff. An unknown session is an answer, not an outage: it ends the follower.
    Without ``follow`` the first error ends the command, as any other read's does."""
    if not follow:
        return await call()
    backoff = Backoff(cap=config.reconnect_max)
    while True:
        try:
            return await call()
        except ConnectionRejected:
            raise
        except DatabaseError as exc:
            log.warning("follow: database unreachable, looking the session up again (%s)", exc)
            await asyncio.sleep(backoff.next_delay())


class _Cursor:
    """The last emitted seq, advanced event by event.

    A catch-up can fail half-way (the connection drops between two batches);
    the cursor must still say what was emitted, or the resume prints it again.
    """

    def __init__(self, seq: int) -> None:
        self.seq = seq


def tell_pruned(after: int, pruned_through: int) -> None:
    """The API's ``pruned`` event, for ``stint tail``: on stderr (stdout stays events)."""
    print(
        f"stint tail: events {after + 1}..{pruned_through} were removed by retention; "
        f"continuing at {pruned_through + 1}",
        file=sys.stderr,
        flush=True,
    )


def tail_start(bounds: LogBounds | None, after: int) -> int:
    """Where tail starts: ``after``, refused beyond the log's end (as the API's 409),
    moved past the cut (and said so) when retention removed what follows it."""
    if bounds is None:
        return after
    if after > bounds.last_event_seq:
        raise UsageError(
            f"--after {after} is beyond the session's last event {bounds.last_event_seq}"
        )
    if after < bounds.pruned_through:
        tell_pruned(after, bounds.pruned_through)
        return bounds.pruned_through
    return after


Gap = Callable[[int, int], None]
"""Told ``(after, pruned_through)`` when retention removed events the follower had
not printed yet: seqs ``after + 1 .. pruned_through`` are gone."""


async def _catch_up(
    client: ClientStore,
    session_id: UUID,
    cursor: _Cursor,
    emit: Callable[[dict[str, Any]], None],
    on_gap: Gap | None = None,
) -> None:
    while True:
        batch = await client.events_after(session_id=session_id, after=cursor.seq)
        if batch and batch[0].seq > cursor.seq + 1 and on_gap is not None:
            # The log is contiguous from its cut: a first seq past the cursor's next
            # means retention removed the ones between (appends are serialised).
            on_gap(cursor.seq, batch[0].seq - 1)
        for event in batch:
            emit(event.as_json())
            cursor.seq = event.seq
        if not batch:
            return


async def follow_events(
    client: ClientStore,
    config: StoreConfig,
    *,
    session_id: UUID,
    after: int,
    follow: bool,
    emit: Callable[[dict[str, Any]], None],
    on_gap: Gap | None = None,
) -> int:
    """Emit events with seq > after; with ``follow``, keep going until cancelled.
    Returns the last emitted seq."""
    cursor = _Cursor(after)
    if not follow:
        await _catch_up(client, session_id, cursor, emit, on_gap)
        return cursor.seq
    # Following, the first catch-up runs inside the retry loop too (after LISTEN):
    # a connection lost during it must resume like any later one, not end the follower.
    backoff = Backoff(cap=config.reconnect_max)
    wanted = str(session_id)
    while True:
        try:
            async with Listener(
                config, channels=[config.events_channel], role=ROLE_CLI
            ) as listener:
                backoff.reset()
                await _catch_up(client, session_id, cursor, emit, on_gap)
                while True:
                    async for _, payload in listener.notifications(listen_seconds=_RECHECK_SECONDS):
                        if payload == wanted:
                            break
                    await _catch_up(client, session_id, cursor, emit, on_gap)
        except StoreError as exc:
            log.warning("follow: connection lost, resuming after seq %d (%s)", cursor.seq, exc)
            await asyncio.sleep(backoff.next_delay())
