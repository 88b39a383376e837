"""Turns arriving on a schedule: the producer of the scale soak and the sizing
validation, which must offer their rate whatever the server's latency.

One producer awaiting each enqueue's transaction (several statements on a busy
server) could not offer the rate asked for, and the run would measure the
producer; so up to ``concurrency`` enqueues are in flight at once, each started
at its due time (or as soon as one of them finishes, when all are busy).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any

__all__ = ["evenly", "poisson", "produce"]


def evenly(rate: float, count: int) -> Iterator[float]:
    """``count`` arrivals ``1 / rate`` seconds apart, from 0."""
    return (n / rate for n in range(count))


def poisson(rate: float, seconds: float, seed: int) -> Iterator[float]:
    """Arrivals of a Poisson process at ``rate`` per second over ``seconds``
    (exponential gaps from a seeded generator, so a run can be repeated)."""
    generator = random.Random(seed)
    at = generator.expovariate(rate)
    while at < seconds:
        yield at
        at += generator.expovariate(rate)


async def produce(
    due: Iterable[float],
    enqueue: Callable[[int], Coroutine[Any, Any, None]],
    *,
    concurrency: int,
) -> int:
    """Call ``enqueue(n)`` for the n-th due time (seconds from now); return how many
    were sent. The first failed enqueue stops the production and is raised."""
    started = time.monotonic()
    slots = asyncio.Semaphore(concurrency)
    pending: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        pending.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]

    sent = 0
    try:
        for n, offset in enumerate(due):
            delay = started + offset - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            if failures:
                raise RuntimeError("an enqueue failed") from failures[0]
            task = asyncio.create_task(enqueue(n))
            pending.add(task)
            task.add_done_callback(done)
            sent += 1
        while pending:
            await asyncio.gather(*pending)
    finally:
        for task in pending:
            task.cancel()
    return sent
