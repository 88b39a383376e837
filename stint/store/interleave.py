"""Interleaving points: where a test's scheduler may stop a transaction between statements.

Races in the store are decided by the order in which concurrent transactions
reach PostgreSQL: an enqueue holding a session's row lock while a worker's
finish waits for it is a different history from the same two in the other
order. The model-based race test (``tests/integration/test_race_model.py``)
drives the real store methods from several simulated processes and chooses
that order itself: it installs a ``Gate`` in each process's context, and the
store awaits the gate before every statement it sends on its own (and before
every group-commit batch, as one step: a pipelined batch is one exchange).

Production never installs a gate; a statement then costs one ``ContextVar``
read here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar, Token

__all__ = ["Gate", "current_gate", "install_gate", "remove_gate"]

Gate = Callable[[str], Awaitable[None]]
"""Awaited with the statement's name (``batch:a,b`` for a batch) before it is sent."""

_gate: ContextVar[Gate | None] = ContextVar("stint_store_gate", default=None)


def current_gate() -> Gate | None:
    """The gate of the running context, if a test installed one."""
    return _gate.get()


def install_gate(gate: Gate) -> Token[Gate | None]:
    """Make ``gate`` this context's (tasks created from it inherit it)."""
    return _gate.set(gate)


def remove_gate(token: Token[Gate | None]) -> None:
    _gate.reset(token)
