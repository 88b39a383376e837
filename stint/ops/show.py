"""``stint show``: a session's turns — status, output, error — and what their model calls used.

Usage is summed per turn and per session from the committed model steps
(``stint.store.usage``). A sum nobody reported stays null: a scripted turn has
no tokens, which is not the same as zero tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stint.store.usage import USAGE_FIELDS, SessionUsage, TurnUsage

__all__ = ["session_json", "sum_usage", "turn_json"]


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
        "attempts": turn.attempts,
        "output": turn.output,
        "error": turn.error,
        "usage": turn.usage(),
    }


def session_json(session: SessionUsage, *, totals: dict[str, int | None]) -> dict[str, Any]:
    return {
        "session_id": str(session.session_id),
        "status": session.status,
        "last_event_seq": session.last_event_seq,
        "usage": totals,
        "turns": [turn_json(t) for t in session.turns],
    }
