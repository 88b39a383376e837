"""What a tool is to Stint, and the native journal tool.

A tool runs an effect once and, after a crash, says whether the effect already
happened (``reconcile``). Tools that cannot tell answer ``UNKNOWN`` and the step
is surfaced as an unknown effect instead of being run twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol
from uuid import UUID

from stint.worker.journal import EffectJournal

__all__ = ["JournalTool", "Reconciled", "Tool", "ToolCall", "Verdict"]


@dataclass(frozen=True)
class ToolCall:
    """One durable call: the step key is what makes the effect idempotent."""

    session_id: UUID
    turn_id: UUID
    step_key: str
    args: Mapping[str, Any]


class Verdict(Enum):
    DONE = "done"
    NOT_DONE = "not_done"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Reconciled:
    """A tool's answer about a step found started but never committed."""

    verdict: Verdict
    result: Any = None


class Tool(Protocol):
    name: str

    async def run(self, call: ToolCall) -> Any: ...

    async def reconcile(self, call: ToolCall) -> Reconciled: ...


class JournalTool:
    """The native effect: append the call to the session's fsync'd journal."""

    name = "journal"

    def __init__(self, journal: EffectJournal) -> None:
        self._journal = journal

    async def run(self, call: ToolCall) -> Any:
        record = {"turn_id": str(call.turn_id), "args": dict(call.args)}
        return await asyncio.to_thread(self._journal.append, call.session_id, call.step_key, record)

    async def reconcile(self, call: ToolCall) -> Reconciled:
        found = await asyncio.to_thread(self._journal.lookup, call.session_id, call.step_key)
        if found is None:
            return Reconciled(Verdict.NOT_DONE)
        return Reconciled(Verdict.DONE, found)
