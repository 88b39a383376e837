"""The listener: turns notifications into wake-ups.

A notification on the work channel wakes the claimer when the roster picks
this worker for it (``stint.worker.roster``); picked but unable to claim now
(slots full, stopping), the worker passes it on to every worker (``work_nudge``);
``ROSTER_CHANGED`` (a worker registered, began draining or stopped) has the
roster read again.
One on the control channel naming a session this worker holds makes the lease
keeper renew at once (the renewal reads the request). Nothing here is the truth:
after a lost connection it reconnects with backoff and wakes both, so whatever
was missed is found by the claim and the renewal themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stint.store.backoff import Backoff
from stint.store.errors import StoreError
from stint.store.models import ROSTER_CHANGED
from stint.worker.cancelling import cancel_and_wait
from stint.worker.protocols import NotificationSource, WorkerStore
from stint.worker.roster import Roster, Wake, route
from stint.worker.service import Service, Wakeup
from stint.worker.slots import Slots

__all__ = ["Listener"]

log = logging.getLogger("stint.worker")


class Listener(Service):
    name = "listener"

    def __init__(
        self,
        *,
        subscribe: NotificationSource,
        work_channel: str,
        slots: Slots,
        claim_wakeup: Wakeup,
        renew_wakeup: Wakeup,
        on_failure: Callable[[str, BaseException], None],
        roster: Roster,
        roster_wakeup: Wakeup,
        claiming: Callable[[], bool],
        store: WorkerStore,
        reconnect_max: float = 1.0,
    ) -> None:
        super().__init__(on_failure)
        self._subscribe = subscribe
        self._work_channel = work_channel
        self._slots = slots
        self._claim_wakeup = claim_wakeup
        self._renew_wakeup = renew_wakeup
        self._roster = roster
        self._roster_wakeup = roster_wakeup
        self._claiming = claiming
        self._store = store
        self._reconnect_max = reconnect_max
        self._relay: asyncio.Task[None] | None = None
        self._relay_again = False
        self.relayed = 0  # notifications passed on to every worker

    def run_once(self, channel: str, payload: str) -> None:
        """Act on one notification."""
        log.debug("notification on %s: %s", channel, payload)
        if channel == self._work_channel:
            if payload == ROSTER_CHANGED:
                self._roster_wakeup.set()
                return
            wake = route(self._roster, payload, free=self._slots.free, claiming=self._claiming())
            if wake is Wake.CLAIM:
                self._claim_wakeup.set()
            elif wake is Wake.PASS_ON:
                self._pass_on()
        elif any(str(held.claim.session_id) == payload for held in self._slots.snapshot()):
            self._renew_wakeup.set()

    def _pass_on(self) -> None:
        """Wake every worker for a session this one was picked for and cannot take
        now; while a nudge is on its way, one more follows it (they coalesce)."""
        if self.passing_on:
            self._relay_again = True
            return
        self._relay = asyncio.create_task(self._nudge(), name="listener relay")

    @property
    def passing_on(self) -> bool:
        """Whether a nudge is on its way."""
        return self._relay is not None and not self._relay.done()

    async def _nudge(self) -> None:
        again = True
        while again:
            self._relay_again = False
            try:
                await self._store.work_nudge()
            except StoreError as exc:  # the other workers' polls find the session
                log.warning("could not pass a work notification on: %s", exc)
                return
            self.relayed += 1
            again = self._relay_again

    async def stop(self) -> None:
        await super().stop()  # no notification starts another relay after this
        if self._relay is not None:
            await cancel_and_wait([self._relay])

    async def run(self) -> None:
        backoff = Backoff(cap=self._reconnect_max)
        lost = False
        while True:
            try:
                async with self._subscribe() as subscription:
                    backoff.reset()
                    if lost:
                        log.info("listener connected again; catching up on missed work")
                        lost = False
                    self._claim_wakeup.set()  # catch up on anything missed while disconnected
                    self._renew_wakeup.set()
                    self._roster_wakeup.set()
                    async for channel, payload in subscription.notifications():
                        self.run_once(channel, payload)
            except StoreError as exc:
                lost = True
                log.warning("listener lost its connection: %s", exc)
                await asyncio.sleep(backoff.next_delay())
