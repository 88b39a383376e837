"""Stint's agents harness: OpenAI-compatible chat with tools, memory and streaming.

Select it with ``STINT_HARNESS=stint.agents:chat``. Names are imported on first
use: importing this package (the fake provider does) does not load ``openai``;
only the harness itself does, when a worker loads it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stint.agents.harness import ChatHarness, chat
    from stint.agents.tools import AgentTool, ToolRegistry

__all__ = ["AgentTool", "ChatHarness", "ToolRegistry", "chat"]

_HOMES = {
    "AgentTool": "stint.agents.tools",
    "ChatHarness": "stint.agents.harness",
    "ToolRegistry": "stint.agents.tools",
    "chat": "stint.agents.harness",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'stint.agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
