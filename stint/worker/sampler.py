"""The sampler: one elected worker reads the queue and the fleet for everyone.

Every ``interval`` each worker tries to hold the sampler's leader row (one
tiny upsert: it keeps it while it renews, another takes it once it expired);
only the holder reads queue depth, the oldest ready age and the fleet's slots
(one statement, each figure from an index) and writes the sample to the ring
the dashboard reads, then the provider quota scopes' counters (one row each).
The holder's /metrics exports the latest sample; the others export none, so a
sum or max over the fleet counts it once. A draining worker resigns, so the
next candidate takes over at its next attempt. A failed read is logged and
retried next interval: sampling never stops a worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from stint.store.errors import StoreError
from stint.store.models import QuotaScope
from stint.store.stats import SAMPLER, Sample
from stint.worker.service import Service, Wakeup

__all__ = ["SampleSource", "Sampler"]

log = logging.getLogger("stint.worker.sampler")

RING = 720  # samples kept: an hour at the default 5 s interval


class SampleSource(Protocol):
    """What the sampler needs of the store (``stint.store.stats.StatsStore``)."""

    async def leader_hold(self, *, name: str, holder: str, ttl: float) -> bool: ...

    async def leader_resign(self, *, name: str, holder: str) -> None: ...

    async def samples_take(self, *, holder: str, window_seconds: float, keep: int) -> Sample: ...

    async def quota_scopes(self) -> list[QuotaScope]: ...


class Sampler(Service):
    name = "sampler"

    def __init__(
        self,
        *,
        store: SampleSource,
        holder: str,
        interval: float,
        on_failure: Callable[[str, BaseException], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._holder = holder
        self._interval = interval
        self._clock = clock
        self._wakeup = Wakeup()
        self.leader = False
        self.latest: Sample | None = None
        self.quotas: list[QuotaScope] = []
        self._taken_at = 0.0

    def sample_age(self) -> float:
        """Seconds since this worker took ``latest``."""
        return self._clock() - self._taken_at

    async def run_once(self) -> Sample | None:
        """Hold the leadership and, as leader, take one sample. Raises ``StoreError``."""
        # Three intervals: a leader that misses one renewal keeps its place.
        held = await self._store.leader_hold(
            name=SAMPLER, holder=self._holder, ttl=3 * self._interval
        )
        if held != self.leader:
            log.info("queue sampler: %s", "elected" if held else "another worker samples")
        self.leader = held
        if not held:
            self.latest, self.quotas = None, []
            return None
        self.latest = await self._store.samples_take(
            holder=self._holder, window_seconds=self._interval, keep=RING
        )
        self.quotas = await self._store.quota_scopes()
        self._taken_at = self._clock()
        return self.latest

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                self.leader, self.latest, self.quotas = False, None, []
                log.warning("queue sample failed: %s", exc)
            await self._wakeup.sleep(self._interval)

    async def resign(self) -> None:
        """Give the leadership up (draining); best effort: it expires anyway."""
        if not self.leader:
            return
        self.leader, self.latest, self.quotas = False, None, []
        try:
            await self._store.leader_resign(name=SAMPLER, holder=self._holder)
        except StoreError as exc:
            log.warning("could not resign as queue sampler (it expires by itself): %s", exc)
