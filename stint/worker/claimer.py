"""The claimer: fills free slots with leased sessions.

One statement claims up to the number of free slots (``SKIP LOCKED``, oldest
first) and starts each claimed session's next turn; each starts a slot. It
wakes on a notification or a finished slot and falls back to the poll
interval: NOTIFY is a hint, polling the truth.
A failed claim backs off; a worker that fenced itself (leases unrenewed for a
whole lease) claims nothing. Stopping lets a claim already sent finish and start
its sessions (the drain then takes them); cancelled in flight, the claim would
still commit, and its sessions would be held by nobody until their leases ran out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from stint.store.backoff import Backoff
from stint.store.batch import Late
from stint.store.errors import StoreError
from stint.store.models import TurnStart
from stint.worker.failpoints import failpoint
from stint.worker.protocols import WorkerStore
from stint.worker.service import Service, Wakeup
from stint.worker.slots import Held, Slots
from stint.worker.telemetry import (
    SPAN_CLAIM,
    record_claim,
    record_claim_failed,
    record_turn_started,
    span,
)

__all__ = ["Claimer"]

log = logging.getLogger("stint.worker")


class Claimer(Service):
    name = "claimer"

    def __init__(
        self,
        *,
        store: WorkerStore,
        slots: Slots,
        run_slot: Callable[[Held, TurnStart | None], Coroutine[Any, Any, None]],
        owner: str,
        pins: Sequence[str],
        lease_seconds: float,
        poll_interval: float,
        may_write: Callable[[], bool],
        reconnect_max: float = 1.0,
        wakeup: Wakeup,
        on_failure: Callable[[str, BaseException], None],
        stop_wait: float = 10.0,
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._slots = slots
        self._run_slot = run_slot
        self._owner = owner
        self._pins = list(pins)
        self._lease_seconds = lease_seconds
        self._poll_interval = poll_interval
        self._reconnect_max = reconnect_max
        self._may_write = may_write
        self._wakeup = wakeup
        self._stop_wait = stop_wait
        self._stopping = False

    async def stop(self) -> None:
        """No new claims. A claim not yet sent claims nothing (its limit reads 0 as
        it is sent); one already sent is waited for, up to ``stop_wait`` seconds (a
        database outage), and its sessions start in slots like any claim's."""
        self._stopping = True
        self._wakeup.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._stop_wait):
                    await asyncio.shield(self._task)
        await super().stop()

    def claiming(self) -> bool:
        """Whether a claim now would claim anything (not stopping, not fenced)."""
        return not self._stopping and self._may_write()

    async def run_once(self) -> int:
        """Claim for the free slots once and start them; returns how many were
        claimed. Raises ``StoreError`` when the claim fails."""
        free = self._slots.free
        if free <= 0:
            self._slots.claim_owed = True  # the next slot to end wakes this claimer
            return 0
        self._slots.claim_owed = False  # this claim reads whatever became ready until now
        if not self.claiming():
            return 0
        with span(SPAN_CLAIM, worker_id=self._owner, free_slots=free) as current:
            started = time.perf_counter()
            works = await self._store.turns_claim(
                owner=self._owner,
                pins=self._pins,
                # Read as the claim is sent: one that waited through an outage for a
                # connection claims nothing if the worker fenced itself meanwhile.
                limit=Late(lambda: free if self.claiming() else 0),
                lease_seconds=self._lease_seconds,
            )
            record_claim(time.perf_counter() - started, claimed=len(works))
            current.set_attribute("claimed", len(works))
        if works:
            failpoint("after_claim")
        for work in works:
            if work.turn is not None:
                record_turn_started(work.turn.queue_wait)
            self._slots.start(work.claim, self._slot_running(work.turn))
        return len(works)

    def _slot_running(self, turn: TurnStart | None) -> Callable[[Held], Coroutine[Any, Any, None]]:
        def run(held: Held) -> Coroutine[Any, Any, None]:
            return self._run_slot(held, turn)

        return run

    async def run(self) -> None:
        backoff = Backoff(cap=self._reconnect_max)
        while not self._stopping:
            try:
                await self.run_once()
            except StoreError as exc:
                record_claim_failed()
                log.warning("claim failed: %s", exc)
                await self._wakeup.sleep(backoff.next_delay())
                continue
            backoff.reset()
            await self._wakeup.sleep(self._poll_interval)
