"""A byte budget shared by every event stream of one API process.

Each stream takes a grant before it reads a page of events and gives it back
only once the page has left the process (handed to the socket, and the
socket's buffer drained below its high-water mark), so the events all streams
hold in memory at once stay within ``STINT_API_STREAM_BUDGET_BYTES``, however
many clients stop reading. Grants are served first come, first served: a
stream waiting for room is not overtaken by later ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

__all__ = ["ByteBudget", "Grant"]


class Grant:
    """Bytes held by one stream; ``release()`` once, or ``resize()`` to what the
    page really took."""

    def __init__(self, budget: ByteBudget, amount: int) -> None:
        self._budget = budget
        self.amount = amount

    def resize(self, amount: int) -> None:
        """Hold ``amount`` instead: a smaller page gives the rest back; a page whose
        one event is larger than the grant takes the difference without waiting
        (a page always carries its first event)."""
        self._budget._adjust(amount - self.amount)
        self.amount = amount

    def release(self) -> None:
        if self.amount:
            self._budget._adjust(-self.amount)
            self.amount = 0


class ByteBudget:
    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def take(self, amount: int, *, seconds: float) -> Grant | None:
        """A grant of ``amount`` bytes (at most the whole budget), or None when none
        came within ``seconds`` (the caller sends a keepalive and asks again)."""
        amount = min(amount, self.total)
        if not self._waiters and self.held + amount <= self.total:
            self.held += amount
            return Grant(self, amount)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(seconds):
                await future
        except TimeoutError:
            if future.done() and not future.cancelled():
                return Grant(self, amount)  # granted just as the time ran out
            self._forget(entry)
            return None
        except BaseException:
            if future.done() and not future.cancelled():
                self._adjust(-amount)  # granted, but the stream is going away
            else:
                self._forget(entry)
            raise
        return Grant(self, amount)

    def _forget(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        with contextlib.suppress(ValueError):  # already dropped as done
            self._waiters.remove(entry)
        self._grant_waiters()

    def _adjust(self, delta: int) -> None:
        self.held += delta
        if delta < 0:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        while self._waiters:
            amount, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if self.held + amount > self.total:
                return
            self.held += amount
            self._waiters.popleft()
            future.set_result(None)
