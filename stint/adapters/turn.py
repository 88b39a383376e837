"""One turn's durable bookkeeping, shared by the adapters: step keys and a tally.

A framework's loop calls the adapter's model and tools from deep inside
itself, often in tasks of its own; the turn they belong to is found through a
context variable set around the run (tasks copy it when they are created).

Step keys are derived from the turn and the order of the *model* calls, which
the framework makes one after another: the n-th model call of a turn is step
``model:n``; a tool call is keyed by the model call that asked for it and its
call id (``tool:n:<call id>``), both taken from the recorded answer, so a
replay asks for exactly the same steps in whatever order the framework runs
the tools, and concurrent tool calls cannot swap keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from pydantic_core import to_jsonable_python

from stint.adapters.errors import AdapterError
from stint.agents.tally import TurnTally
from stint.worker.context import TurnContext

__all__ = ["DurableTurn", "bind", "current", "jsonable"]


class DurableTurn:
    """The turn an adapter's model and tools are running for."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx
        self.tally = TurnTally()
        self._models = 0
        self._origin: dict[str, int] = {}

    def model_key(self) -> str:
        """The key of the next model call of this turn."""
        key = f"{self.ctx.turn_id}:model:{self._models}"
        self._models += 1
        return key

    def asked(self, call_ids: Iterable[str]) -> None:
        """The model call just answered asked for these tool calls."""
        for call_id in call_ids:
            self._origin[call_id] = self._models - 1

    def tool_key(self, call_id: str) -> str:
        """The step key of one tool call (and, suffixed, of its approval)."""
        return f"{self.ctx.turn_id}:tool:{self._origin.get(call_id, self._models - 1)}:{call_id}"

    def approval_key(self, call_id: str) -> str:
        return f"{self.tool_key(call_id)}:approval"

    def add_model(self, result: dict[str, Any]) -> None:
        self.tally.add_model(result)


_CURRENT: ContextVar[DurableTurn | None] = ContextVar("stint_adapter_turn", default=None)


def current() -> DurableTurn:
    """The turn running now; an adapter's model or tool used outside one is an error."""
    turn = _CURRENT.get()
    if turn is None:
        raise AdapterError(
            "a Stint-wrapped model or tool was called outside a Stint turn "
            "(run the agent through its Stint harness)"
        )
    return turn


@contextlib.contextmanager
def bind(turn: DurableTurn) -> Iterator[DurableTurn]:
    """Make ``turn`` the current one for the code (and tasks) run inside."""
    token = _CURRENT.set(turn)
    try:
        yield turn
    finally:
        _CURRENT.reset(token)


def jsonable(value: Any) -> Any:
    """An agent's final output as JSON (a turn's output must be): pydantic models and
    dataclasses as their fields, anything else unknown as its ``str``."""
    return to_jsonable_python(value, fallback=str)
