"""Admission control: the limits every enqueue checks, and the operator's view of them.

The limits live in ``admission_limits`` (one row per tenant with its own, and
the ``'*'`` defaults row that also holds the global backlog), so every producer
enforces the same ones whatever its environment says. Enqueue calls
:func:`check_session_queue` under the session's row lock, then
:func:`admit` inside the same transaction: it takes a per-tenant (and, with a
backlog limit, a global) transaction-scoped advisory lock before counting, so
concurrent producers are serialised exactly where they share a limit and can
never overshoot it. Usage is counted, never kept in counters: the claim and
finish statements (the hot path) do no extra write, and the count reads only
``sessions_open_tenant_idx``, whose entries are the sessions with work.

Creating a session calls :func:`admit_session` first, in the creating
transaction: with a ``max_sessions`` limit it takes the tenant's sessions lock,
then counts the tenant's sessions (``sessions_tenant_created_idx``), so
concurrent creators never overshoot either. Retention removes idle sessions
with no turns, which frees their places.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from stint.store.config import StoreConfig
from stint.store.errors import AdmissionRefused, InvalidInput, QueueFull, SessionLimitReached
from stint.store.fetch import execute, fetch_all, fetch_one, fetch_optional
from stint.store.input_rules import check_tenant
from stint.store.pool import Pool
from stint.store.translate import guarded
from stint.store.vocabulary import AdmissionLimit

__all__ = [
    "DEFAULT_ROW",
    "AdmissionStore",
    "EffectiveLimits",
    "LimitsRow",
    "admit",
    "admit_session",
    "check_session_queue",
    "effective_limits",
]

DEFAULT_ROW = "*"
"""The ``admission_limits`` row of the defaults (and of the global backlog)."""


@dataclass(frozen=True)
class EffectiveLimits:
    """The limits one tenant's enqueues are held to (None: unlimited)."""

    max_queued: int | None
    max_running: int | None
    max_session_queue: int | None
    global_backlog: int | None
    max_sessions: int | None

    @property
    def tenant_scoped(self) -> bool:
        return self.max_queued is not None or self.max_running is not None


@dataclass(frozen=True)
class LimitsRow:
    """One row of ``admission_limits`` with what its tenant has in flight now."""

    tenant: str
    max_queued: int | None
    max_running: int | None
    max_session_queue: int | None
    global_backlog: int | None
    max_sessions: int | None
    max_depth: int | None
    max_fanout: int | None
    queued: int
    running: int
    sessions: int

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "limits": {
                str(AdmissionLimit.MAX_QUEUED): self.max_queued,
                str(AdmissionLimit.MAX_RUNNING): self.max_running,
                str(AdmissionLimit.MAX_SESSION_QUEUE): self.max_session_queue,
                str(AdmissionLimit.MAX_SESSIONS): self.max_sessions,
                str(AdmissionLimit.MAX_DEPTH): self.max_depth,
                str(AdmissionLimit.MAX_FANOUT): self.max_fanout,
            },
            "usage": {"queued": self.queued, "running": self.running, "sessions": self.sessions},
        }


@dataclass(frozen=True)
class _Usage:
    queued: int
    running: int
    backlog: int | None


@dataclass(frozen=True)
class _Sessions:
    sessions: int
    keyed: bool


@dataclass(frozen=True)
class _Backlog:
    backlog: int


_UNLIMITED = EffectiveLimits(None, None, None, None, None)


def _tenant_name(tenant: str | None) -> str:
    return f"tenant {tenant}" if tenant is not None else "no tenant"


def _refuse(
    limit: AdmissionLimit,
    value: int,
    tenant: str | None,
    what: str,
    kind: type[AdmissionRefused] = AdmissionRefused,
) -> AdmissionRefused:
    """The one-line refusal: which limit, its value, and whose it is."""
    if limit is AdmissionLimit.GLOBAL_BACKLOG:
        owner = "all tenants"
    elif tenant is None:
        owner = "sessions without a tenant"
    else:
        owner = _tenant_name(tenant)
    return kind(
        f"admission refused: {limit} limit of {value} {what} reached for {owner}; "
        "nothing was written",
        limit=str(limit),
        value=value,
        tenant=tenant,
    )


async def effective_limits(
    conn: AsyncConnection[TupleRow], *, tenant: str | None
) -> EffectiveLimits:
    """The limits that apply to ``tenant``'s enqueues (its row over the defaults)."""
    found = await fetch_optional(conn, EffectiveLimits, "admission_effective", tenant=tenant)
    return found or _UNLIMITED


def check_session_queue(
    limits: EffectiveLimits, *, session_id: UUID, queued: int, tenant: str | None
) -> None:
    """Refuse a turn for a session that already holds ``max_session_queue``
    unfinished turns (the caller holds the session's row lock)."""
    limit = limits.max_session_queue
    if limit is not None and queued >= limit:
        raise QueueFull(
            f"queue full: {AdmissionLimit.MAX_SESSION_QUEUE} limit of {limit} unfinished turns "
            f"reached for session {session_id} ({_tenant_name(tenant)}); nothing was written",
            limit=str(AdmissionLimit.MAX_SESSION_QUEUE),
            value=limit,
            tenant=tenant,
        )


async def admit(
    conn: AsyncConnection[TupleRow],
    limits: EffectiveLimits,
    *,
    tenant: str | None,
    activates: bool,
) -> None:
    """Refuse one more turn when it would take ``tenant`` (or the deployment)
    past a limit. ``activates``: the turn's session has no unfinished turn yet,
    so it counts against ``max_running`` too. Runs in the enqueue transaction,
    before the insert; with no tenant or global limit it costs no statement."""
    global_scope = limits.global_backlog is not None
    if not (limits.tenant_scoped or global_scope):
        return
    params = {"tenant": tenant, "tenant_scope": limits.tenant_scoped, "global_scope": global_scope}
    await execute(conn, "admission_lock", **params)
    usage = await fetch_one(conn, _Usage, "admission_usage", **params)
    if limits.max_queued is not None and usage.queued >= limits.max_queued:
        raise _refuse(AdmissionLimit.MAX_QUEUED, limits.max_queued, tenant, "unfinished turns")
    if activates and limits.max_running is not None and usage.running >= limits.max_running:
        raise _refuse(AdmissionLimit.MAX_RUNNING, limits.max_running, tenant, "active sessions")
    backlog = limits.global_backlog
    if backlog is not None and usage.backlog is not None and usage.backlog >= backlog:
        raise _refuse(AdmissionLimit.GLOBAL_BACKLOG, backlog, tenant, "unfinished turns")


async def admit_session(
    conn: AsyncConnection[TupleRow],
    limits: EffectiveLimits,
    *,
    tenant: str | None,
    creation_key: str | None,
) -> None:
    """Refuse a new session when ``tenant`` already holds ``max_sessions`` of them
    (``SessionLimitReached``). Runs in the creating transaction, before the insert;
    a retry whose ``creation_key`` already made a session is let through (it creates
    nothing). With no such limit it costs no statement."""
    limit = limits.max_sessions
    if limit is None:
        return
    await execute(conn, "admission_lock_sessions", tenant=tenant)
    held = await fetch_one(
        conn, _Sessions, "admission_sessions", tenant=tenant, creation_key=creation_key
    )
    if held.sessions >= limit and not held.keyed:
        raise _refuse(AdmissionLimit.MAX_SESSIONS, limit, tenant, "sessions", SessionLimitReached)


class AdmissionStore:
    """The operator's side: set and read the limits (``stint admission``)."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def admission_set(self, *, tenant: str, limits: dict[AdmissionLimit, int | None]) -> None:
        """Write the given limits of ``tenant``'s row (``DEFAULT_ROW``: the
        defaults); a None value clears one, limits not given keep their value."""
        if tenant != DEFAULT_ROW:
            check_tenant(tenant)
        if not limits:
            raise InvalidInput("no limit given; nothing was written")
        if AdmissionLimit.GLOBAL_BACKLOG in limits and tenant != DEFAULT_ROW:
            raise InvalidInput("the global backlog is not a tenant's limit; nothing was written")
        params: dict[str, Any] = {"tenant": tenant}
        for limit in AdmissionLimit:
            params[str(limit)] = limits.get(limit)
            params[f"set_{limit}"] = limit in limits
        async with guarded("admission_set", self._config), self._pool.connection() as conn:
            await execute(conn, "admission_set", **params)

    async def admission_list(self) -> list[LimitsRow]:
        """Every limits row (the defaults first) with its tenant's usage."""
        async with guarded("admission_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, LimitsRow, "admission_list")

    async def admission_backlog(self) -> int:
        """Unfinished turns of every tenant: what the global backlog limit counts."""
        async with guarded("admission_backlog", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Backlog, "admission_backlog")).backlog
