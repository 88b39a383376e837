"""What a session's turns produced and what their model calls cost (``stint show``).

Usage is read from the committed model steps, where the agents harness records
each call's token counts and retries: nothing is counted twice, and a figure no
provider reported stays ``None`` instead of becoming a zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.pool import Pool
from stint.store.queries import query
from stint.store.translate import guarded

__all__ = ["USAGE_FIELDS", "SessionUsage", "TurnUsage", "UsageStore"]

USAGE_FIELDS = ("model_calls", "input_tokens", "output_tokens", "cached_tokens", "retries")


@dataclass(frozen=True)
class TurnUsage:
    """One turn: how it ended, and the usage of its committed model calls."""

    turn_id: UUID
    seq: int
    status: str
    attempts: int
    output: Any
    error: str | None
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    retries: int | None

    def usage(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in USAGE_FIELDS}


@dataclass(frozen=True)
class SessionUsage:
    """A session, its turns (all, or the one asked for), and their usage."""

    session_id: UUID
    status: str
    last_event_seq: int
    turns: list[TurnUsage]


class UsageStore:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def session_usage(
        self, *, session_id: UUID, turn_id: UUID | None = None
    ) -> SessionUsage | None:
        """None when no such session exists."""
        params = {"session_id": session_id, "turn_id": turn_id}
        async with guarded("session_usage", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("usage_session"), params)
            session = await cur.fetchone()
            if session is None:
                return None
            cur = await conn.execute(query("usage_turns"), params)
            turns = [
                TurnUsage(
                    turn_id=r[0],
                    seq=r[1],
                    status=r[2],
                    attempts=r[3],
                    output=r[4],
                    error=r[5],
                    model_calls=int(r[6]),
                    input_tokens=_int(r[7]),
                    output_tokens=_int(r[8]),
                    cached_tokens=_int(r[9]),
                    retries=_int(r[10]),
                )
                for r in await cur.fetchall()
            ]
        return SessionUsage(session[0], session[1], int(session[2]), turns)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
