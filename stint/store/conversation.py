"""A session's conversation memory: the chat messages of its finished turns.

Read once per turn (the recent window, and how much lies before it) and written
once per finished turn, under the lease fence like every worker write. A turn
never reads its own messages, so a replayed turn sees exactly the history its
first attempt saw, and its request digests match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.config import StoreConfig
from stint.store.errors import LeaseLost
from stint.store.fetch import execute
from stint.store.models import Claim
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["ConversationStore", "MessageWindow"]


@dataclass(frozen=True)
class MessageWindow:
    """The newest ``len(messages)`` of ``total`` earlier messages, oldest first."""

    messages: list[dict[str, Any]]
    total: int


class ConversationStore:
    """Data access for conversation memory, on the slots' pool."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def messages_recent(
        self, *, session_id: UUID, turn_id: UUID, limit: int
    ) -> MessageWindow:
        """At most ``limit`` messages of the turns before ``turn_id``."""
        params = {"session_id": session_id, "turn_id": turn_id, "limit": limit}
        async with guarded("messages_recent", self._config), self._pool.connection() as conn:
            cur = await execute(conn, "messages_recent", **params)
            row = await cur.fetchone()
        assert row is not None
        total, pairs = row
        return MessageWindow([dict(message) for _, message in pairs], int(total))

    async def messages_append(
        self, claim: Claim, *, turn_id: UUID, messages: Sequence[Mapping[str, Any]]
    ) -> int:
        """Record the running turn's messages in order; returns how many were new
        (0 when a replay already wrote them). Raises LeaseLost when fenced."""
        params = {
            "session_id": claim.session_id,
            "owner": claim.owner,
            "epoch": claim.epoch,
            "turn_id": turn_id,
            # One jsonb array, dumped once: a jsonb[] is dumped element by element.
            "messages": Jsonb([dict(m) for m in messages]),
        }
        async with guarded("messages_append", self._config), self._pool.connection() as conn:
            cur = await execute(conn, "messages_append", **params)
            row = await cur.fetchone()
        if row is None:
            raise LeaseLost(
                session=claim.session_id, epoch=claim.epoch, operation="messages_append"
            )
        return int(row[0])
