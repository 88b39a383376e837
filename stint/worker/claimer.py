"""The claimer: fills free slots with leased sessions.

One statement claims up to the number of free slots (``SKIP LOCKED``, oldest
first) and starts each claimed session's next turn; each starts a slot. It
wakes on a notification or a finished slot and falls back to the poll
interval: NOTIFY is a hint, polling the truth.
A failed claim backs off; a worker that fenced itself (leases unrenewed for a
whole lease) claims nothing.
"""

from __future__ import annotations

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

    async def run_once(self) -> int:
        """Claim for the free slots once and start them; returns how many were
        claimed. Raises ``StoreError`` when the claim fails."""
        free = self._slots.free
        if free <= 0 or not self._may_write():
            return 0
        with span(SPAN_CLAIM, worker_id=self._owner, free_slots=free) as current:
            started = time.perf_counter()
            works = await self._store.turns_claim(
                owner=self._owner,
                pins=self._pins,
                # Read as the claim is sent: one that waited through an outage for a
                # connection claims nothing if the worker fenced itself meanwhile.
                limit=Late(lambda: free if self._may_write() else 0),
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
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                record_claim_failed()
                log.warning("claim failed: %s", exc)
                await self._wakeup.sleep(backoff.next_delay())
                continue
            backoff.reset()
            await self._wakeup.sleep(self._poll_interval)
