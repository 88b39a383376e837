"""Conversation memory for the agent loop: what earlier turns said, within a bound.

A turn loads at most ``history_messages`` earlier messages. When the session has
more, the oldest are cut, and the cut moves forward to the next user message:
a window must never begin with a tool result whose call was cut off, or with
an assistant's tool calls whose results were, since providers refuse both. The
cut is recorded (a ``history.truncated`` event and the turn's output), so what
the model did not see is never a silent loss.

Only turns that finished write their messages (at the end, in one fenced
write), so a failed or interrupted turn never leaves a dangling tool call in
the conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stint.store.conversation import MessageWindow

__all__ = ["History", "trim_window"]


@dataclass(frozen=True)
class History:
    """The messages the model will see, out of ``total`` earlier ones."""

    messages: list[dict[str, Any]]
    total: int
    limit: int

    @property
    def dropped(self) -> int:
        return self.total - len(self.messages)

    def as_json(self) -> dict[str, int]:
        return {"loaded": len(self.messages), "dropped": self.dropped, "limit": self.limit}


def trim_window(window: MessageWindow, *, limit: int) -> History:
    """The window as the model may see it: from its first user message when cut."""
    messages = window.messages
    if len(messages) < window.total:
        start = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
        messages = messages[start:]
    return History(messages, window.total, limit)
