"""Cancel tasks and wait until they have really ended.

On Python 3.11, ``asyncio.wait_for`` (which psycopg and psycopg_pool use while
waiting for a connection or a socket) swallows a cancellation that arrives in
the same loop iteration as the result it was waiting for. A service loop that
loses its cancel that way simply goes round again, and a single
``cancel()`` + ``gather()`` then waits for ever: a worker that ignores SIGTERM.
Cancelling again until the task is done closes that window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]

log = logging.getLogger("stint.worker")

# Between two cancels; a swallowed cancel costs at most this much shutdown time.
RECANCEL_SECONDS = 0.5


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel every task, re-cancelling the ones still running, until all ended."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
        if pending:
            names = ", ".join(sorted(task.get_name() for task in pending))
            log.info("cancelling again (a cancel was swallowed): %s", names)
