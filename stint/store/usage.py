"""A session's turns, what they produced and what their model calls cost (``stint show``).

Usage is read from the committed model steps, where the agents harness records
each call's token counts and retries: nothing is counted twice, and a figure no
provider reported stays ``None`` instead of becoming a zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.fetch import fetch_all, fetch_optional
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["USAGE_FIELDS", "SessionUsage", "TurnUsage", "UsageStore"]

USAGE_FIELDS = ("model_calls", "input_tokens", "output_tokens", "cached_tokens", "retries")


@dataclass(frozen=True)
class TurnUsage:
    """One turn: how it ended, when, and the usage of its committed model calls."""

    turn_id: UUID
    seq: int
    status: str
    reason: str | None
    attempts: int
    worker_id: str | None
    output: Any
    error: str | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    retries: int | None

    def usage(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in USAGE_FIELDS}


@dataclass(frozen=True)
class _Session:
    session_id: UUID
    status: str
    last_event_seq: int
    parent_id: UUID | None


@dataclass(frozen=True)
class SessionUsage:
    """A session, its turns (all, or the one asked for), and their usage."""

    session_id: UUID
    status: str
    last_event_seq: int
    turns: list[TurnUsage]
    parent_id: UUID | None = None


class UsageStore:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def session_usage(
        self, *, session_id: UUID, turn_id: UUID | None = None
    ) -> SessionUsage | None:
        """None when no such session exists; ``turns`` is empty when ``turn_id``
        is not one of its turns."""
        params = {"session_id": session_id, "turn_id": turn_id}
        async with guarded("session_usage", self._config), self._pool.connection() as conn:
            session = await fetch_optional(conn, _Session, "usage_session", **params)
            if session is None:
                return None
            turns = await fetch_all(conn, TurnUsage, "usage_turns", **params)
        return SessionUsage(
            session.session_id, session.status, session.last_event_seq, turns, session.parent_id
        )
