"""What a turn of an agent loop did, for its output: model calls, usage, tool calls.

The agents harness and the SDK adapters report a turn in the same shape, so a
client reads ``reply``, ``model_calls``, ``usage`` and ``tool_calls`` alike
whichever loop ran it.
"""

from __future__ import annotations

from typing import Any

from stint.agents.memory import History

__all__ = ["TurnTally"]

_SHOWN_RESULT = 300  # characters of each tool result kept in the turn's output
_USAGE = ("input_tokens", "output_tokens", "cached_tokens")


class TurnTally:
    """What the turn did, for its output: model calls, usage sums, tool calls."""

    def __init__(self) -> None:
        self.model_calls = 0
        self.retries = 0
        self.usage: dict[str, int | None] = dict.fromkeys(_USAGE)
        self.tools: list[dict[str, Any]] = []

    def add_model(self, result: dict[str, Any]) -> None:
        self.model_calls += 1
        self.retries += int(result.get("retries") or 0)
        for key in _USAGE:
            value = (result.get("usage") or {}).get(key)
            if value is not None:
                self.usage[key] = (self.usage[key] or 0) + int(value)

    def add_tool(self, name: str, args: dict[str, Any] | None, result: str) -> None:
        self.tools.append({"name": name, "arguments": args, "result": result[:_SHOWN_RESULT]})

    def output(self, reply: Any, history: History | None = None) -> dict[str, Any]:
        """The turn's output; ``history`` (what memory loaded) when the loop keeps one."""
        output = {
            "reply": reply,
            "model_calls": self.model_calls,
            "retries": self.retries,
            "usage": self.usage,
            "tool_calls": self.tools,
        }
        if history is not None:
            output["history"] = history.as_json()
        return output
