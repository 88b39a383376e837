"""The lease keeper: renews every lease this worker holds, in one statement.

Every lease/3 (or at once when a control notification arrives) it renews all
held sessions; a session missing from the answer was taken over, and its slot
is cancelled without another write. The renewal also brings any cancel or
interrupt request a missed notification did not deliver. If renewals fail for
a whole lease, ``may_write`` turns false: the worker fences itself, because
another worker may already hold its sessions. A renewal counts from when it was
sent, so the next one is due a third of a lease after that: one that waited
long for a connection (PostgreSQL coming back) is followed at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stint.store.errors import StoreError
from stint.worker.health import HealthState
from stint.worker.protocols import WorkerStore
from stint.worker.service import Service, Wakeup
from stint.worker.slots import Slots
from stint.worker.telemetry import record_lease_lost, record_renewal

__all__ = ["LeaseKeeper"]

log = logging.getLogger("stint.worker")


class LeaseKeeper(Service):
    name = "lease keeper"

    def __init__(
        self,
        *,
        store: WorkerStore,
        slots: Slots,
        owner: str,
        pid: int,
        lease_seconds: float,
        wakeup: Wakeup,
        health: HealthState,
        on_failure: Callable[[str, BaseException], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._slots = slots
        self._owner = owner
        self._pid = pid
        self._lease_seconds = lease_seconds
        self._wakeup = wakeup
        self._health = health
        self._clock = clock or asyncio.get_running_loop().time
        self.last_renewal = self._clock()

    def may_write(self) -> bool:
        """False once leases went unrenewed for a whole lease: we fence ourselves."""
        return self._clock() - self.last_renewal < self._lease_seconds

    def renewal_age(self) -> float:
        """Seconds since the last renewal was sent (and succeeded)."""
        return self._clock() - self.last_renewal

    def next_delay(self) -> float:
        """Seconds until the next renewal is due: a third of a lease after the last
        successful one was sent. Counted from its landing instead, a renewal that
        had waited most of that third for a connection left the fence to fall
        before the next one landed, and a turn claimed meanwhile lost its slot."""
        return max(0.0, self.last_renewal + self._lease_seconds / 3 - self._clock())

    async def run_once(self) -> None:
        """Renew once; cancel lost slots and pass on control requests.
        Raises ``StoreError`` when the renewal fails."""
        snapshot = self._slots.snapshot()
        sent_at = self._clock()
        kept = await self._store.leases_renew(
            owner=self._owner,
            pid=self._pid,
            claims=[h.claim for h in snapshot],
            lease_seconds=self._lease_seconds,
        )
        self.last_renewal = sent_at
        record_renewal(ok=True)
        self._health.renewed()
        log.debug("renewed %d of %d leases", len(kept), len(snapshot))
        for held in snapshot:
            if not self._slots.current(held):
                continue  # finished meanwhile
            if held.claim.session_id not in kept:
                if not held.releasing:  # a release can commit before this renewal
                    log.warning(
                        "session %s: lease lost, cancelling its slot", held.claim.session_id
                    )
                    record_lease_lost()
                    held.lose()
                continue
            control = kept[held.claim.session_id]
            if control is not None and control != held.control:
                log.info("session %s: %s requested", held.claim.session_id, control.action)
                held.stop_turn(control)

    async def run(self) -> None:
        interval = self._lease_seconds / 3
        delay = interval
        while True:
            await self._wakeup.sleep(delay)  # a control NOTIFY renews at once
            try:
                await self.run_once()
            except StoreError as exc:
                record_renewal(ok=False)
                self._health.renewal_failed()
                log.warning("lease renewal failed: %s", exc)
                delay = interval
            else:
                delay = self.next_delay()
