"""A transaction run again when PostgreSQL ended it to break a deadlock.

A control (cancel, interrupt, an enqueue with ``busy=interrupt``) locks a
parent session and then each of its ``cascade`` children, in the tree's order,
in one transaction: the children are only known once the parent is locked.
A worker's group-commit batch locks the sessions of its statements in id
order (``StatementBatcher``), so a worker holding both a parent and its child
can lock the child first. Each order is right for its own writer; together
they can wait on each other, and PostgreSQL ends one of the two transactions
after ``deadlock_timeout``. A batch that loses re-runs each statement alone
(``StatementBatcher``); a control that loses runs again here, from the start:
nothing of it was kept, and it reads the sessions afresh, so running it again
is the same request, not a second one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from stint.store.errors import Deadlocked

__all__ = ["DEADLOCK_TRIES", "retried_on_deadlock"]

log = logging.getLogger("stint.store")

T = TypeVar("T")

DEADLOCK_TRIES = 3
"""Tries in all: each loss costs a ``deadlock_timeout`` (1 s by default), and a
batch that won re-runs its statements alone, so the next try finds them done."""


async def retried_on_deadlock(operation: str, run: Callable[[], Awaitable[T]]) -> T:
    """``run()`` (one whole transaction), run again while it loses a deadlock; the
    last loss is raised as ``Deadlocked``."""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            return await run()
        except Deadlocked:
            if attempt == DEADLOCK_TRIES:
                raise
            log.info("%s: ended to break a deadlock, running it again (try %d)", operation, attempt)
    raise AssertionError("unreachable")  # pragma: no cover
