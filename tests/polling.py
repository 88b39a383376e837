"""Poll-until-deadline helpers: tests synchronise on observed state, never fixed sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

_INTERVAL = 0.02


async def wait_until(
    probe: Callable[[], Awaitable[T | None]], *, what: str, within: float = 30.0
) -> T:
    """Await ``probe()`` until it returns something truthy; fail after ``within`` seconds.

    A probe answers ``None`` (or anything falsy) while the state is not there yet; the
    result is what it answered once it was, hence never ``None``.
    """
    deadline = time.monotonic() + within
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(_INTERVAL)
    raise AssertionError(f"timed out after {within}s waiting until {what} (last: {last!r})")
