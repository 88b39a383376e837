"""Token deltas to followers without one transaction per token.

Deltas are buffered and written as one ``message.delta`` event when the batch
holds ``flush_deltas`` deltas or its oldest delta has waited ``flush_seconds``,
whichever comes first. The writer is one task, so events keep the order of the
deltas and at most one write is in flight; while it is, new deltas gather for
the next event. Each write goes through the fenced event appender, so cursors
stay contiguous and a worker that lost its lease writes nothing more. What is
still pending when the call ends goes with the step's commit (``close(last=...)``,
``TurnContext.emit_at_step_end``): one statement fewer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["DeltaCoalescer"]

Write = Callable[[dict[str, Any]], Awaitable[object]]


class DeltaCoalescer:
    """``add`` deltas as they arrive; ``close`` writes what is left.

    Each event's payload is ``base`` plus ``try`` (the provider attempt),
    ``index`` (of its first delta within that attempt), ``count`` and ``text``.
    """

    def __init__(
        self,
        write: Write,
        *,
        base: Mapping[str, Any],
        flush_seconds: float,
        flush_deltas: int,
    ) -> None:
        self._write = write
        self._base = dict(base)
        self._flush_seconds = flush_seconds
        self._flush_deltas = flush_deltas
        self._pending: list[tuple[float, str]] = []  # (arrival, text)
        self._try = 1
        self._next_index = 0
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._closing = False
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self.events = 0
        self.deltas = 0

    def add(self, text: str) -> None:
        """Queue one delta; raises the writer's error if a write failed."""
        if self._error is not None:
            raise self._error
        if not text:
            return
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="delta-writer")
        self._pending.append((time.monotonic(), text))
        self.deltas += 1
        if len(self._pending) >= self._flush_deltas or len(self._pending) == 1:
            self._wake.set()

    async def new_try(self, number: int) -> None:
        """The provider call starts again: write what the last try sent, then
        number the next deltas from 0 under ``try`` = ``number``."""
        await self._flush(everything=True)
        self._try = number
        self._next_index = 0

    async def close(self, *, last: Write | None = None) -> None:
        """Write every pending delta and stop the writer; raise its error if any.
        ``last`` writes what is still pending at the end instead of the writer
        (the model step hands it to its own commit: one statement fewer)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._error is not None:
            raise self._error
        await self._flush(everything=True, write=last)

    async def abort(self) -> None:
        """Stop the writer without writing (the turn is being cancelled)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        try:
            while not self._closing:
                await self._wake.wait()
                self._wake.clear()
                if not self._pending:
                    continue
                wait = self._pending[0][0] + self._flush_seconds - time.monotonic()
                if wait > 0 and len(self._pending) < self._flush_deltas and not self._closing:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                    self._wake.clear()
                await self._flush(everything=False)
                if self._pending:  # arrived during the write: their own clock runs
                    self._wake.set()
        except Exception as exc:  # surfaced to the stream by add() or close()
            self._error = exc

    async def _flush(self, *, everything: bool, write: Write | None = None) -> None:
        """Write the pending deltas, at most ``flush_deltas`` per event. Unless
        ``everything``, only full batches and a batch whose oldest delta is due:
        a remainder waits for its own batch to fill or its own clock to run out,
        however late the writer got to run."""
        async with self._lock:
            while self._pending:
                batch = self._pending[: self._flush_deltas]
                due = batch[0][0] + self._flush_seconds <= time.monotonic()
                if not everything and len(batch) < self._flush_deltas and not due:
                    return
                del self._pending[: len(batch)]
                payload = {
                    **self._base,
                    "try": self._try,
                    "index": self._next_index,
                    "count": len(batch),
                    "text": "".join(text for _, text in batch),
                }
                self._next_index += len(batch)
                await (write or self._write)(payload)
                self.events += 1
