"""One lifecycle for each of the worker's services, and the wake-up signal they share.

A service is a long-running loop (``run``) around one iteration that tests can
call on its own (``run_once``). ``start`` runs the loop in a task; if the loop
ever ends with an error, ``on_failure`` is told, and the supervisor stops the
whole worker loudly rather than run on half-alive. ``stop`` cancels until the
task has really ended (see ``cancelling``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable

from stint.worker.cancelling import cancel_and_wait

__all__ = ["Service", "Wakeup"]

log = logging.getLogger("stint.worker")


class Wakeup:
    """A level-triggered nudge: ``set`` from anywhere; ``sleep`` lasts until it is
    set or the timeout passes, whichever comes first, then clears it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
        # that races with the event (cpython#86296), and the worker would not stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._event.wait()
        self._event.clear()


class Service(ABC):
    """Subclasses set ``name`` and implement ``run`` (the loop) and a ``run_once``."""

    name: str = "service"

    def __init__(self, on_failure: Callable[[str, BaseException], None]) -> None:
        self._on_failure = on_failure
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run(self) -> None:
        """The service's loop; returns only when cancelled."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervised(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _supervised(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.exception("%s failed; stopping the worker", self.name)
            self._on_failure(self.name, exc)
