"""The listener: turns notifications into wake-ups.

A notification on the work channel wakes the claimer; one on the control
channel naming a session this worker holds makes the lease keeper renew at
once (the renewal reads the request). Nothing here is the truth: after a lost
connection it reconnects with backoff and wakes both, so whatever was missed
is found by the claim and the renewal themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stint.store.backoff import Backoff
from stint.store.errors import StoreError
from stint.worker.protocols import NotificationSource
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
        reconnect_max: float = 1.0,
    ) -> None:
        super().__init__(on_failure)
        self._subscribe = subscribe
        self._work_channel = work_channel
        self._slots = slots
        self._claim_wakeup = claim_wakeup
        self._renew_wakeup = renew_wakeup
        self._reconnect_max = reconnect_max

    def run_once(self, channel: str, payload: str) -> None:
        """Act on one notification."""
        log.debug("notification on %s: %s", channel, payload)
        if channel == self._work_channel:
            self._claim_wakeup.set()
        elif any(str(held.claim.session_id) == payload for held in self._slots.snapshot()):
            self._renew_wakeup.set()

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
                    async for channel, payload in subscription.notifications():
                        self.run_once(channel, payload)
            except StoreError as exc:
                lost = True
                log.warning("listener lost its connection: %s", exc)
                await asyncio.sleep(backoff.next_delay())
