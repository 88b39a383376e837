"""Retention: pruning history older than its horizon, in small batches.

Each statement removes at most ``batch`` turns' worth of rows and commits, so a
prune never holds locks for long and never blocks a claim (claims skip locked
rows). Events go from the head of each session's log only, and the session
records how far (``events_pruned_through``), so a log stays contiguous from
there to its last seq. Turns go with their steps and conversation messages.
Idle sessions with no turn left go once unchanged for their horizon, and
dashboard sign-ins once they ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.fetch import fetch_all, fetch_one, fetch_optional
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["EventsPruned", "Keyset", "RetentionStore", "TurnsPruned"]


@dataclass(frozen=True)
class EventsPruned:
    """One batch of the events pass: turns walked, events removed, and the
    finish time of the last turn walked (None when there was none)."""

    turns: int
    events: int
    until: datetime | None
    until_id: UUID | None


@dataclass(frozen=True)
class TurnsPruned:
    """One batch of the turns pass: what it removed."""

    turns: int
    events: int
    steps: int
    messages: int
    reservations: int


@dataclass(frozen=True)
class Keyset:
    """Where the events pass stopped: the last turn it walked (finish time, id)."""

    pruned_until: datetime
    pruned_after: UUID


@dataclass(frozen=True)
class _Count:
    count: int


@dataclass(frozen=True)
class _Session:
    session_id: UUID


class RetentionStore:
    """One method per statement; the loop that calls them is ``stint.worker.pruner``."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def maintenance_take(
        self, *, task: str, worker: str, every_seconds: float
    ) -> Keyset | None:
        """This interval's run of ``task``, if no other worker took it first:
        returns where the events pass stopped last time; None when not ours."""
        params = {"task": task, "worker": worker, "every_seconds": every_seconds}
        async with guarded("maintenance_take", self._config), self._pool.connection() as conn:
            return await fetch_optional(conn, Keyset, "maintenance_take", **params)

    async def prune_events(
        self, *, horizon_seconds: float, batch: int, after: Keyset
    ) -> EventsPruned:
        params = {
            "horizon_seconds": horizon_seconds,
            "batch": batch,
            "after": after.pruned_until,
            "after_id": after.pruned_after,
        }
        async with guarded("prune_events", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, EventsPruned, "prune_events", **params)

    async def prune_turns(self, *, horizon_seconds: float, batch: int) -> TurnsPruned:
        params = {"horizon_seconds": horizon_seconds, "batch": batch}
        async with guarded("prune_turns", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, TurnsPruned, "prune_turns", **params)

    async def prune_idle_sessions(self, *, horizon_seconds: float, batch: int) -> int:
        """One batch of idle sessions with no turn, event or schedule, unchanged since
        the horizon: locked in one statement, deleted by the next (lock first)."""
        params = {"horizon_seconds": horizon_seconds, "batch": batch}
        async with (
            guarded("prune_idle_sessions", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            locked = await fetch_all(conn, _Session, "prune_idle_sessions_lock", **params)
            if not locked:
                return 0
            ids = [row.session_id for row in locked]
            gone = await fetch_one(conn, _Count, "prune_idle_sessions", session_ids=ids, **params)
        return gone.count

    async def prune_dashboard_sessions(self, *, batch: int) -> int:
        """One batch of dashboard sign-ins that expired or were signed out."""
        async with guarded("prune_dashboard_sessions", self._config), self._pool.connection() as c:
            return (await fetch_one(c, _Count, "prune_dashboard_sessions", batch=batch)).count

    async def prune_workers(self, *, horizon_seconds: float) -> int:
        params = {"horizon_seconds": horizon_seconds}
        async with guarded("prune_workers", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "prune_workers", **params)).count

    async def journals_unused(self, session_ids: list[UUID]) -> set[UUID]:
        """Of these sessions, those whose every turn was pruned (or that are gone)."""
        params = {"session_ids": session_ids}
        async with guarded("journals_unused", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Session, "journals_unused", **params)
        return {r.session_id for r in rows}

    async def prune_schedule_ticks(self, *, horizon_seconds: float, batch: int) -> int:
        """One batch of schedule ticks recorded before the horizon."""
        params = {"horizon_seconds": horizon_seconds, "batch": batch}
        async with guarded("prune_schedule_ticks", self._config), self._pool.connection() as c:
            return (await fetch_one(c, _Count, "prune_schedule_ticks", **params)).count

    async def prune_webhook_deliveries(self, *, horizon_seconds: float, batch: int) -> int:
        """One batch of webhook deliveries made before the horizon, whatever their status."""
        params = {"horizon_seconds": horizon_seconds, "batch": batch}
        async with guarded("prune_webhook_deliveries", self._config), self._pool.connection() as c:
            return (await fetch_one(c, _Count, "prune_webhook_deliveries", **params)).count
