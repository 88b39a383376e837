"""Provider quotas: scopes, and the reservations every worker makes against them.

A scope's limits and counters are one row; its ledger is one row per provider
request. Reserving is two statements of one transaction (the scope row locked
by the first, the window counted and the reservation written by the second,
whose snapshot is taken once the lock is held) and settling one, each under
the scope row's lock, so the workers of a deployment share one window per scope without
talking to each other (the SQL is in ``sql/quotas.sql``).

In a worker, reserving and settling go through the slots' group commit (the
``StatementBatcher``), ordered after the batch's session writes: the scope
row is locked last and held only until that batch commits, one batch can
carry the reservations of many slots, and a slot waiting for the scope's lock
never takes the pooled connection lease renewals keep free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from stint.store.batch import StatementBatcher
from stint.store.config import StoreConfig
from stint.store.errors import QuotaScopeUnknown
from stint.store.fetch import execute, fetch_all, fetch_one, fetch_optional
from stint.store.models import Claim, QuotaScope
from stint.store.pool import Pool
from stint.store.translate import guarded

__all__ = ["Grant", "QuotaLimits", "QuotaStore"]

_R = TypeVar("_R")


@dataclass(frozen=True)
class QuotaLimits:
    """What ``stint quota set`` changes; a field left None keeps its current value
    (``clear`` names limits to make unlimited)."""

    rpm: int | None = None
    tpm: int | None = None
    concurrency: int | None = None
    window_seconds: float | None = None
    clear: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Grant:
    """A reservation's answer: granted, or how long until enough frees (None: not
    known, it waits on calls in flight); ``too_big`` when no window ever fits it."""

    granted: bool
    too_big: bool
    wait_seconds: float | None


@dataclass(frozen=True)
class _Created:
    created: bool


@dataclass(frozen=True)
class _Deleted:
    scope: str


@dataclass(frozen=True)
class _Settled:
    settled: int


class QuotaStore:
    """Data access for quota scopes and reservations; with a ``batcher`` (a
    worker's), reservations and settlements ride its batches."""

    def __init__(
        self, config: StoreConfig, pool: Pool, *, batcher: StatementBatcher | None = None
    ) -> None:
        self._config = config
        self._pool = pool
        self._batcher = batcher

    async def _run(
        self,
        name: str,
        row: type[_R],
        scope: str,
        params: dict[str, Any],
        *,
        prelude: str | None = None,
    ) -> _R | None:
        """Run ``name`` in the worker's batches, or alone; ``prelude`` first, in
        the same transaction (a lock ``name`` must hold before its snapshot)."""
        if self._batcher is not None:
            # After every session row's statements: see the module doc.
            return await self._batcher.fetch_optional(
                name, row, params, lock_order=f"~{scope}", prelude=prelude
            )
        async with guarded(name, self._config), self._pool.connection() as conn:
            if prelude is None:
                return await fetch_optional(conn, row, name, **params)
            async with conn.transaction():
                await execute(conn, prelude, **params)
                return await fetch_optional(conn, row, name, **params)

    async def quota_set(self, scope: str, limits: QuotaLimits) -> bool:
        """Create ``scope`` or change its limits; True when it was created."""
        params = {
            "scope": scope,
            "rpm": limits.rpm,
            "tpm": limits.tpm,
            "concurrency": limits.concurrency,
            "window_seconds": limits.window_seconds,
            **{
                f"set_{name}": getattr(limits, name) is not None or name in limits.clear
                for name in ("rpm", "tpm", "concurrency")
            },
        }
        async with guarded("quota_set", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Created, "quota_set", **params)).created

    async def quota_list(self, scope: str | None = None) -> list[QuotaScope]:
        """Every scope (or the one named), with its counters and window use."""
        async with guarded("quota_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, QuotaScope, "quota_list", scope=scope)

    async def quota_delete(self, scope: str) -> bool:
        """Delete a scope and its ledger; False when there was none."""
        async with guarded("quota_delete", self._config), self._pool.connection() as conn:
            return await fetch_optional(conn, _Deleted, "quota_delete", scope=scope) is not None

    async def quota_reserve(
        self, claim: Claim, *, scope: str, key: str, turn_id: UUID, estimate: int
    ) -> Grant:
        """Reserve one request and ``estimate`` tokens for the request ``key``."""
        params = {
            "scope": scope,
            "key": key,
            "session_id": claim.session_id,
            "turn_id": turn_id,
            "epoch": claim.epoch,
            "estimate": estimate,
        }
        # The scope's lock is taken by its own statement first: quota_reserve's
        # snapshot then sees every reservation committed before (sql/quotas.sql).
        grant = await self._run("quota_reserve", Grant, scope, params, prelude="quota_lock_scope")
        if grant is None:
            raise QuotaScopeUnknown(scope=scope)
        return grant

    async def quota_settle(self, *, scope: str, key: str, actual: int | None) -> bool:
        """Reconcile the request ``key`` with the ``actual`` tokens the provider
        reported, or mark it unknown (``actual`` None); False when it was already
        settled (or found orphaned by a reservation)."""
        params = {"scope": scope, "key": key, "actual": actual}
        settled = await self._run("quota_settle", _Settled, scope, params)
        return settled is not None and settled.settled > 0
