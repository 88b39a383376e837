"""Long-running commands end on SIGINT and SIGTERM, whatever they inherited.

A process started in the background by a non-interactive shell (``cmd &`` in a
script, a CI step, a test run sent to the background) inherits SIGINT
*ignored*, and Python then installs no handler of its own: ``stint tail
--follow`` started that way could not be stopped by SIGINT at all (a test run
waited 30 s for it, then failed). ``worker`` and ``stint api`` already set
their own handlers for both signals; a following ``stint tail`` does the same
here, for as long as it follows.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any

__all__ = ["STOP_SIGNALS", "until_stopped"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def until_stopped(work: Coroutine[Any, Any, object]) -> bool:
    """Run ``work`` until it returns (False), or until SIGINT or SIGTERM cancels it
    (True: its own cleanup ran, connections closed)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    signalled = False

    def stop() -> None:
        nonlocal signalled
        signalled = True
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop)
    try:
        await task
    except asyncio.CancelledError:
        if not signalled:
            raise
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
    return signalled
