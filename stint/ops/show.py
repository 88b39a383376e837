"""``stint show SESSION [--turn T]``: one turn's status, output and error as JSON.

The operator's way to see what a turn produced without reading its event log.
``turn_json`` is the one place the shape is decided, so fields added later
(token usage, say) appear in one place and in the README's table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from stint.store.client import ClientStore
from stint.store.models import TurnView

__all__ = ["show_turn", "turn_json"]


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def turn_json(view: TurnView) -> dict[str, Any]:
    """The session's id and status, and the turn (null when the session has none yet)."""
    turn = None
    if view.turn_id is not None:
        turn = {
            "turn_id": str(view.turn_id),
            "seq": view.seq,
            "status": view.status,
            "reason": view.reason,
            "attempts": view.attempts,
            "worker_id": view.worker_id,
            "output": view.output,
            "error": view.error,
            "enqueued_at": _when(view.enqueued_at),
            "started_at": _when(view.started_at),
            "finished_at": _when(view.finished_at),
        }
    return {"session_id": str(view.session_id), "session_status": view.session_status, "turn": turn}


async def show_turn(
    client: ClientStore, *, session_id: UUID, turn_id: UUID | None
) -> dict[str, Any]:
    """``turn_id``, or the session's latest turn, as ``turn_json``."""
    return turn_json(await client.turn_show(session_id=session_id, turn_id=turn_id))
