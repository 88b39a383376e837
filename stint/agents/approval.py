"""What counts as a human's yes to a tool call that waits for approval.

Shared by every agent loop that parks a tool call on ``ctx.ask``: the agents
harness and the SDK adapters read an answer (``stint answer``) the same way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["approved"]

_APPROVALS = frozenset({"yes", "y", "approve", "approved", "ok", "true"})


def approved(answer: Any) -> bool:
    """``true``, ``{"approved": true}`` or a yes-word (yes, y, approve, ok, ...)."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, dict):
        return answer.get("approved") is True
    return isinstance(answer, str) and answer.strip().lower() in _APPROVALS
