"""Stint: durable agent sessions on PostgreSQL.

The public face for harness authors::

    from stint import Harness, TurnContext, Tool

Names are imported on first use, so ``import stint.store`` (or a worker
running the scripted harness) does not pay for the harness machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stint.worker.context import NondeterministicReplay, TurnContext, UnknownEffect
    from stint.worker.harness import Harness
    from stint.worker.tools import Reconciled, Tool, ToolCall, Verdict

__all__ = [
    "Harness",
    "NondeterministicReplay",
    "Reconciled",
    "Tool",
    "ToolCall",
    "TurnContext",
    "UnknownEffect",
    "Verdict",
]

_HOMES = {
    "Harness": "stint.worker.harness",
    "NondeterministicReplay": "stint.worker.context",
    "Reconciled": "stint.worker.tools",
    "Tool": "stint.worker.tools",
    "ToolCall": "stint.worker.tools",
    "TurnContext": "stint.worker.context",
    "UnknownEffect": "stint.worker.context",
    "Verdict": "stint.worker.tools",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'stint' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
