"""The claimer: fills free slots with leased sessions.

One statement claims up to the number of free slots (``SKIP LOCKED``, oldest
first); each claim starts a slot. It wakes on a notification or a finished
slot and falls back to the poll interval: NOTIFY is a hint, polling the truth.
A failed claim backs off; a worker that fenced itself (leases unrenewed for a
whole lease) claims nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from stint.store.backoff import Backoff
from stint.store.errors import StoreError
from stint.worker.failpoints import failpoint
from stint.worker.ports import WorkerStore
from stint.worker.service import Service, Wakeup
from stint.worker.slots import Held, Slots
from stint.worker.telemetry import SPAN_CLAIM, span

__all__ = ["Claimer"]

log = logging.getLogger("stint.worker")


class Claimer(Service):
    name = "claimer"

    def __init__(
        self,
        *,
        store: WorkerStore,
        slots: Slots,
        run_slot: Callable[[Held], Coroutine[Any, Any, None]],
        owner: str,
        pins: Sequence[str],
        lease_seconds: float,
        poll_interval: float,
        may_write: Callable[[], bool],
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
        self._may_write = may_write
        self._wakeup = wakeup

    async def run_once(self) -> int:
        """Claim for the free slots once and start them; returns how many were
        claimed. Raises ``StoreError`` when the claim fails."""
        free = self._slots.free
        if free <= 0 or not self._may_write():
            return 0
        with span(SPAN_CLAIM, worker_id=self._owner, free_slots=free) as current:
            claims = await self._store.sessions_claim(
                owner=self._owner, pins=self._pins, limit=free, lease_seconds=self._lease_seconds
            )
            current.set_attribute("claimed", len(claims))
        if claims:
            failpoint("after_claim")
        for claim in claims:
            self._slots.start(claim, self._run_slot)
        return len(claims)

    async def run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                log.warning("claim failed: %s", exc)
                await self._wakeup.sleep(backoff.next_delay())
                continue
            backoff.reset()
            await self._wakeup.sleep(self._poll_interval)
