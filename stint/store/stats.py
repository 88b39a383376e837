"""The elected sampler's data: one leader row per job, and a ring of queue samples.

Queue depth, the oldest ready age and the fleet's slots are read by one
process at a time, the holder of a leader row with an expiry, instead of by
every worker (or every dashboard page) counting them live. Its samples go to
a ring of a fixed number of rows that the dashboard draws its overview and
its turns/s chart from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from stint.store.config import StoreConfig
from stint.store.fetch import execute, fetch_all, fetch_one, fetch_optional
from stint.store.models import QuotaScope
from stint.store.pool import Pool
from stint.store.quotas import QuotaStore
from stint.store.translate import guarded

__all__ = ["SAMPLER", "Leader", "Sample", "StatsStore"]

SAMPLER = "sampler"
"""The leadership of the queue sampler."""

# A worker row without a recorded lease is live while its heartbeat is this young.
_LIVE_SECONDS = 90.0


@dataclass(frozen=True)
class Sample:
    """One reading of the queue and the fleet; ``age`` is seconds since it was taken."""

    n: int
    at: datetime
    sampled_by: str
    window_seconds: float
    ready_sessions: int
    queued_turns: int
    running_turns: int
    parked_turns: int
    oldest_ready_age: float | None
    live_workers: int
    total_slots: int
    busy_slots: int
    turns_finished: int
    turns_failed: int
    age: float

    @property
    def turns_per_second(self) -> float:
        return self.turns_finished / self.window_seconds


@dataclass(frozen=True)
class Leader:
    holder: str
    since: datetime
    live: bool


@dataclass(frozen=True)
class _Holder:
    holder: str


class StatsStore:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool
        self._quotas = QuotaStore(config, pool)

    async def quota_scopes(self) -> list[QuotaScope]:
        """Every provider quota scope's counters, for the elected sampler's metrics."""
        return await self._quotas.quota_list()

    async def leader_hold(self, *, name: str, holder: str, ttl: float) -> bool:
        """Take or renew the leadership ``name`` for ``ttl`` seconds; False when
        another live holder has it."""
        async with guarded("leader_hold", self._config), self._pool.connection() as conn:
            found = await fetch_optional(
                conn, _Holder, "leader_hold", job=name, holder=holder, ttl=ttl
            )
        return found is not None

    async def leader_resign(self, *, name: str, holder: str) -> None:
        async with guarded("leader_resign", self._config), self._pool.connection() as conn:
            await execute(conn, "leader_resign", job=name, holder=holder)

    async def leader_get(self, *, name: str) -> Leader | None:
        async with guarded("leader_get", self._config), self._pool.connection() as conn:
            return await fetch_optional(conn, Leader, "leader_get", job=name)

    async def samples_take(self, *, holder: str, window_seconds: float, keep: int) -> Sample:
        """Read the queue and the fleet now and write the sample into the ring."""
        async with guarded("stats_sample_take", self._config), self._pool.connection() as conn:
            return await fetch_one(
                conn,
                Sample,
                "stats_sample_take",
                holder=holder,
                window_seconds=window_seconds,
                keep=keep,
                live_seconds=_LIVE_SECONDS,
            )

    async def samples_recent(self, *, limit: int) -> list[Sample]:
        """The newest ``limit`` samples, newest first."""
        async with guarded("stats_samples_recent", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, Sample, "stats_samples_recent", limit=limit)
