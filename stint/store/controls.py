"""Controls from outside a worker: cancel, interrupt, and answers to parked turns.

Queued turns are ended in the database directly. A running turn belongs to the
worker holding the session's lease: it is asked (a flag on the row plus a
NOTIFY) and ends the turn itself, cooperatively. When no live worker holds it
(a parked turn, or an expired lease), the database alone ends the turn and the
epoch bump fences any previous owner. Every path appends its events under the
session row lock, so cursors stay contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from stint.store.config import StoreConfig
from stint.store.errors import NoOpenQuestion, UnknownSession
from stint.store.pool import Pool
from stint.store.queries import query
from stint.store.translate import guarded

__all__ = ["ControlResult", "ControlStore", "stop_active_turn"]

_TERMINAL = {
    "cancel": ("cancelled", "turn.cancelled"),
    "interrupt": ("interrupted", "turn.interrupted"),
}


@dataclass(frozen=True)
class ControlResult:
    """What a control did: queued turns it cancelled, and what became of the active turn."""

    session_id: UUID
    cancelled_queued: list[UUID] = field(default_factory=list)
    active_turn: UUID | None = None
    outcome: str = "no turn in progress"

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "cancelled_queued": [str(t) for t in self.cancelled_queued],
            "active_turn": str(self.active_turn) if self.active_turn else None,
            "outcome": self.outcome,
        }


async def stop_active_turn(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    *,
    session_id: UUID,
    action: str,
    reason: str,
    turn_id: UUID | None,
    lease_owner: str | None,
    lease_live: bool,
) -> tuple[UUID | None, str]:
    """Inside a transaction holding the session lock: stop its running or parked turn."""
    cur = await conn.execute(
        query("controls_active_turn"), {"session_id": session_id, "turn_id": turn_id}
    )
    active = await cur.fetchone()
    if active is None:
        return None, "no turn in progress"
    active_id, status = active
    if status == "running" and lease_live:
        await conn.execute(
            query("controls_request"),
            {
                "session_id": session_id,
                "action": action,
                "turn_id": active_id,
                "reason": reason,
                "control_channel": config.control_channel,
            },
        )
        return active_id, f"requested from worker {lease_owner}"
    turn_status, kind = _TERMINAL[action]
    await conn.execute(
        query("controls_end_turn"),
        {
            "session_id": session_id,
            "turn_id": active_id,
            "status": turn_status,
            "kind": kind,
            "reason": reason,
            "events_channel": config.events_channel,
            "work_channel": config.work_channel,
        },
    )
    why = "parked" if status == "parked" else "no live worker holds its lease"
    return active_id, f"{turn_status} in the database ({why})"


class ControlStore:
    """``stint cancel``, ``stint interrupt`` and ``stint answer``."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def control(
        self, *, session_id: UUID, action: str, reason: str, turn_id: UUID | None = None
    ) -> ControlResult:
        """``cancel``: queued turns (or ``turn_id``) directly, and the running one.
        ``interrupt``: the running turn only."""
        if action not in _TERMINAL:
            raise ValueError(f"unknown control {action!r}")
        async with (
            guarded(f"control {action}", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            cur = await conn.execute(query("controls_lock_session"), {"session_id": session_id})
            locked = await cur.fetchone()
            if locked is None:
                raise UnknownSession(session=session_id)
            _, owner, lease_live = locked
            cancelled: list[UUID] = []
            if action == "cancel":
                cur = await conn.execute(
                    query("controls_cancel_queued"),
                    {
                        "session_id": session_id,
                        "turn_id": turn_id,
                        "reason": reason,
                        "events_channel": self._config.events_channel,
                    },
                )
                cancelled = [row[0] for row in await cur.fetchall()]
            active, outcome = await stop_active_turn(
                conn,
                self._config,
                session_id=session_id,
                action=action,
                reason=reason,
                turn_id=turn_id,
                lease_owner=owner,
                lease_live=bool(lease_live),
            )
        return ControlResult(session_id, cancelled, active, outcome)

    async def answer(self, *, session_id: UUID, step_key: str, answer: Any) -> UUID:
        """Record an answer; the parked turn is queued again. Returns the turn id."""
        params = {
            "session_id": session_id,
            "step_key": step_key,
            "answer": Jsonb(answer),
            "events_channel": self._config.events_channel,
            "work_channel": self._config.work_channel,
        }
        async with (
            guarded("answer", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            cur = await conn.execute(query("answers_record"), params)
            row = await cur.fetchone()
            if row is None:
                raise NoOpenQuestion(session=session_id, step_key=step_key)
        turn_id: UUID = row[0]
        return turn_id
