"""A session's conversation memory: the chat messages of its finished turns.

Read once per turn (the recent window, and how much lies before it) and written
once per finished turn, under the lease fence like every worker write. A turn
never reads its own messages, so a replayed turn sees exactly the history its
first attempt saw, and its request digests match.

Both go through the worker's statement batcher, with the slots' other
statements: on a pool connection of their own they waited for one (the pool is
small, and the batcher keeps all but one busy) in 70% of their borrows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.batch import StatementBatcher
from stint.store.errors import LeaseLost
from stint.store.models import Claim

__all__ = ["ConversationStore", "MessageWindow"]


@dataclass(frozen=True)
class MessageWindow:
    """The newest ``len(messages)`` of ``total`` earlier messages, oldest first."""

    messages: list[dict[str, Any]]
    total: int


@dataclass(frozen=True)
class _Recent:
    total: int
    messages: list[list[Any]]


@dataclass(frozen=True)
class _Appended:
    added: int
    running: bool


class ConversationStore:
    """Data access for conversation memory, in the worker's statement batches."""

    def __init__(self, batcher: StatementBatcher) -> None:
        self._batcher = batcher

    async def messages_recent(
        self, *, session_id: UUID, turn_id: UUID, limit: int
    ) -> MessageWindow:
        """At most ``limit`` messages of the turns before ``turn_id``."""
        params = {"session_id": session_id, "turn_id": turn_id, "limit": limit}
        # A read that locks nothing: first in its batch (no lock order).
        row = await self._batcher.fetch_optional("messages_recent", _Recent, params)
        assert row is not None  # an aggregate: always one row
        return MessageWindow([dict(message) for _, message in row.messages], int(row.total))

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
        # The fence locks the session row: in the batch's session order, as every
        # fenced statement (StatementBatcher.fetch_optional), so batches never deadlock.
        row = await self._batcher.fetch_optional(
            "messages_append", _Appended, params, lock_order=str(claim.session_id)
        )
        if row is None:
            raise LeaseLost(
                session=claim.session_id, epoch=claim.epoch, operation="messages_append"
            )
        return row.added
