"""``stint show SESSION [--turn T]``: what a session's turns did, as JSON.

A turn's status, output and error, when it ran, and what its model calls used;
for a whole session the turns in order and the usage summed over them. The
operator's way to see what a turn produced without reading the event log.
Usage sums nobody reported stay null: a scripted turn has no tokens, which is
not the same as zero tokens. ``turn_json`` and ``session_json`` are the one
place these shapes are decided (docs/reference/cli.md is drawn from them).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from stint.store.children import Descendant
from stint.store.usage import USAGE_FIELDS, SessionUsage, TurnUsage

__all__ = ["children_tree_json", "session_json", "sum_usage", "turn_json", "turn_of_session_json"]


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def sum_usage(turns: Iterable[TurnUsage]) -> dict[str, int | None]:
    """Field by field; None where no turn reported the field."""
    totals: dict[str, int | None] = dict.fromkeys(USAGE_FIELDS)
    for turn in turns:
        for name, value in turn.usage().items():
            if value is not None:
                totals[name] = (totals[name] or 0) + value
    if totals["model_calls"] is None:
        totals["model_calls"] = 0
    return totals


def turn_json(turn: TurnUsage) -> dict[str, Any]:
    return {
        "turn_id": str(turn.turn_id),
        "seq": turn.seq,
        "status": turn.status,
        "reason": turn.reason,
        "attempts": turn.attempts,
        "worker_id": turn.worker_id,
        "output": turn.output,
        "error": turn.error,
        "enqueued_at": _when(turn.enqueued_at),
        "started_at": _when(turn.started_at),
        "finished_at": _when(turn.finished_at),
        "usage": turn.usage(),
    }


def session_json(session: SessionUsage, descendants: Iterable[Descendant] = ()) -> dict[str, Any]:
    """The session and every turn, with the usage summed over them; its parent, and
    the tree of child sessions below it (each child: its id, the status of the turn
    it was spawned with, its policy on a cancel of its parent, and its children)."""
    return {
        "session_id": str(session.session_id),
        "session_status": session.status,
        "last_event_seq": session.last_event_seq,
        "parent_id": None if session.parent_id is None else str(session.parent_id),
        "usage": sum_usage(session.turns),
        "turns": [turn_json(t) for t in session.turns],
        "children": children_tree_json(session.session_id, descendants),
    }


def children_tree_json(root: Any, descendants: Iterable[Descendant]) -> list[dict[str, Any]]:
    """Nest ``descendants`` (level by level) under ``root``: the children's trees."""
    below: dict[Any, list[dict[str, Any]]] = {root: []}
    for d in descendants:
        node: dict[str, Any] = {
            "session_id": str(d.child_id),
            "status": d.status,
            "on_cancel": d.on_cancel,
            "children": [],
        }
        below[d.child_id] = node["children"]
        below.setdefault(d.parent_id, []).append(node)
    return below[root]


def turn_of_session_json(session: SessionUsage, turn: TurnUsage) -> dict[str, Any]:
    """One turn, with its session's status and summed usage beside it."""
    return {
        "session_id": str(session.session_id),
        "session_status": session.status,
        "session_usage": sum_usage(session.turns),
        "turn": turn_json(turn),
    }
