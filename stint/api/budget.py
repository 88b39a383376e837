"""A byte budget shared by every event stream of one API process.

Each stream takes a grant before it reads a page of events and gives it back
only once the page has left the process (handed to the socket, and the
socket's buffer drained below its high-water mark), so the events all streams
hold in memory at once stay within ``STINT_API_STREAM_BUDGET_BYTES``, however
many clients stop reading. Grants are served first come, first served.

A client that stops reading keeps its stream's grant until its drain deadline
(``STINT_API_STREAM_DRAIN_SECONDS``) when nobody else needs the room. When a
stream has to wait for room, every holder stalled for ``STALL_SECONDS`` or
more (its last send not taken by its client) is told to close at once: it
resumes by Last-Event-ID and loses nothing, and clients that read are never
kept waiting behind ones that do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

__all__ = ["STALL_SECONDS", "ByteBudget", "Grant", "Holder"]

STALL_SECONDS = 1.0


class Holder:
    """One stream, as the budget sees it: whether its client is taking what it is
    sent, and the signal that closes it when it is not and others wait."""

    def __init__(self) -> None:
        self.stalled_since: float | None = None
        self.evicted = False
        self.task: asyncio.Task[None] | None = None  # the one that sends, to interrupt

    def stalled(self) -> None:
        self.stalled_since = time.monotonic()

    def moving(self) -> None:
        self.stalled_since = None

    def evict(self) -> None:
        """Interrupt the stalled send: the stream closes (``stint.api.sse_response``)."""
        self.evicted = True
        if self.task is not None:
            self.task.cancel()


class Grant:
    """Bytes held by one stream; ``release()`` once, or ``resize()`` to what the
    page really took."""

    def __init__(self, budget: ByteBudget, holder: Holder, amount: int) -> None:
        self._budget = budget
        self._holder = holder
        self.amount = amount
        budget.holders.add(holder)

    def resize(self, amount: int) -> None:
        """Hold ``amount`` instead: a smaller page gives the rest back; a page whose
        one event is larger than the grant takes the difference without waiting
        (a page always carries its first event)."""
        self._budget._adjust(amount - self.amount)
        self.amount = amount

    def release(self) -> None:
        self._budget.holders.discard(self._holder)
        if self.amount:
            self._budget._adjust(-self.amount)
            self.amount = 0


class ByteBudget:
    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self.holders: set[Holder] = set()
        self.evictions = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def take(self, holder: Holder, amount: int, *, seconds: float) -> Grant | None:
        """A grant of ``amount`` bytes (at most the whole budget), or None when none
        came within ``seconds`` (the caller sends a keepalive and asks again)."""
        amount = min(amount, self.total)
        if not self._waiters and self.held + amount <= self.total:
            self.held += amount
            return Grant(self, holder, amount)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, future)
        self._waiters.append(entry)
        deadline = time.monotonic() + seconds
        try:
            while not future.done():
                self._evict_stalled()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # Look again at least every STALL_SECONDS: a holder may stall meanwhile.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, STALL_SECONDS)):
                        await asyncio.shield(future)
        except BaseException:
            if future.done():
                self._adjust(-amount)  # granted, but the stream is going away
            else:
                future.cancel()
                self._forget(entry)
            raise
        if future.done():
            return Grant(self, holder, amount)
        future.cancel()
        self._forget(entry)
        return None

    def _evict_stalled(self) -> None:
        """Someone waits: close every holder whose client has not taken its last send
        for STALL_SECONDS (their grants come back as their streams end)."""
        now = time.monotonic()
        for holder in self.holders:
            since = holder.stalled_since
            if since is not None and now - since >= STALL_SECONDS and not holder.evicted:
                holder.evict()
                self.evictions += 1

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
