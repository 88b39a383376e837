"""Follow a session's event log: catch up by cursor, then LISTEN for more.

The cursor (last printed seq) is the truth; a notification only says "read
again". After a lost connection the follower reconnects and resumes exactly
after the last seq it emitted, so a client sees 1..N with no gap or repeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from store.client import ClientStore
from store.config import ROLE_CLI, StoreConfig
from store.errors import StoreError
from store.listen import Listener
from worker.backoff import Backoff

__all__ = ["follow_events"]

log = logging.getLogger("stint.follow")

_RECHECK_SECONDS = 1.0


async def _catch_up(
    client: ClientStore, session_id: UUID, cursor: int, emit: Callable[[dict[str, Any]], None]
) -> int:
    while True:
        batch = await client.events_after(session_id=session_id, after=cursor)
        for event in batch:
            emit(event.as_json())
            cursor = event.seq
        if not batch:
            return cursor


async def follow_events(
    client: ClientStore,
    config: StoreConfig,
    *,
    session_id: UUID,
    after: int,
    follow: bool,
    emit: Callable[[dict[str, Any]], None],
) -> int:
    """Emit events with seq > after; with ``follow``, keep going until cancelled.
    Returns the last emitted seq."""
    cursor = await _catch_up(client, session_id, after, emit)
    if not follow:
        return cursor
    backoff = Backoff()
    wanted = str(session_id)
    while True:
        try:
            async with Listener(
                config, channels=[config.events_channel], role=ROLE_CLI
            ) as listener:
                backoff.reset()
                cursor = await _catch_up(client, session_id, cursor, emit)
                while True:
                    async for _, payload in listener.notifications(listen_seconds=_RECHECK_SECONDS):
                        if payload == wanted:
                            break
                    cursor = await _catch_up(client, session_id, cursor, emit)
        except StoreError as exc:
            log.warning("follow: connection lost, resuming after seq %d (%s)", cursor, exc)
            await asyncio.sleep(backoff.next_delay())
