"""The dashboard's reads: what the API's HTML pages show beyond the /v1 reads.

Every method takes ``tenant``: a tenant's key passes its tenant, and sees
nothing else (another tenant's session is simply not found); an operator's
key passes None and sees every tenant. No read here counts a large table:
lists are keyset pages or bounded by one session, and the queue figures come
from the elected sampler's ring (``stint.store.stats``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.dashboard_tree import ChildTree, TreeBounds, read_children_tree
from stint.store.fetch import fetch_all
from stint.store.models import SessionRecord, TurnRecord, WorkerRow
from stint.store.pool import Pool
from stint.store.translate import guarded
from stint.store.vocabulary import SessionStatus

__all__ = ["DashboardStore", "JournalEntry", "KeptSignal", "OpenQuestion", "OpenWait"]

# A worker row without a recorded lease is live while its heartbeat is this young.
_LIVE_SECONDS = 90.0


@dataclass(frozen=True)
class JournalEntry:
    """One step of a session's durable journal."""

    turn_id: UUID
    turn_seq: int
    step_key: str
    kind: str
    status: str
    lease_epoch: int
    started_at: datetime
    finished_at: datetime | None

    @property
    def unknown(self) -> bool:
        """The effect may or may not have happened: an operator must look."""
        return self.status == "unknown"


@dataclass(frozen=True)
class OpenQuestion:
    """A parked turn's question, waiting for ``stint answer`` (or the dashboard)."""

    turn_id: UUID
    turn_seq: int
    step_key: str
    asked_at: datetime
    question: Any


@dataclass(frozen=True)
class OpenWait:
    """What a turn waits on now (``ctx.sleep``, ``ctx.wait_for``, ``ctx.join``)."""

    turn_id: UUID
    turn_seq: int
    step_key: str
    kind: str  # timer, signal or children
    name: str | None  # the signal's
    deadline: datetime | None  # a timer's end, or a wait's timeout; None: none
    wait_all: bool | None  # a join: all of the children, or any
    children: list[UUID]  # a join's, the first few
    children_total: int
    children_ended: int
    signals_kept: int  # signals of its name kept for it, not yet consumed


@dataclass(frozen=True)
class KeptSignal:
    """A signal sent to the session that no wait has consumed yet."""

    id: UUID
    name: str
    created_at: datetime
    payload_text: str  # the payload as JSON text, cut at a page's length
    payload_cut: bool


@dataclass(frozen=True)
class _Tenant:
    tenant: str


class DashboardStore:
    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def sessions_page(
        self,
        *,
        tenant: str | None,
        statuses: list[SessionStatus] | None = None,
        before: tuple[datetime, UUID] | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """One keyset page, newest first: ``tenant``'s sessions, or every tenant's."""
        before_at, before_id = before if before is not None else (None, None)
        params: dict[str, Any] = {
            "statuses": [str(s) for s in statuses or []],
            "before_created_at": before_at,
            "before_id": before_id,
            "limit": limit,
        }
        name = "sessions_list_all" if tenant is None else "sessions_list"
        if tenant is not None:
            params.update(tenant=tenant, pin=None)
        async with guarded(name, self._config), self._pool.connection() as conn:
            return await fetch_all(conn, SessionRecord, name, **params)

    async def turns_recent(
        self, *, session_id: UUID, tenant: str | None, limit: int = 20
    ) -> list[TurnRecord]:
        async with guarded("turns_recent", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn, TurnRecord, "turns_recent", session_id=session_id, tenant=tenant, limit=limit
            )

    async def steps_recent(
        self, *, session_id: UUID, tenant: str | None, limit: int = 100
    ) -> list[JournalEntry]:
        async with guarded("steps_recent", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn,
                JournalEntry,
                "steps_recent",
                session_id=session_id,
                tenant=tenant,
                limit=limit,
            )

    async def questions_open(self, *, session_id: UUID, tenant: str | None) -> list[OpenQuestion]:
        async with guarded("questions_open", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn, OpenQuestion, "questions_open", session_id=session_id, tenant=tenant
            )

    async def children_tree(
        self, *, session_id: UUID, tenant: str | None, bounds: TreeBounds | None = None
    ) -> ChildTree:
        """The session's children and theirs, as much as ``bounds`` lets a page show."""
        return await read_children_tree(
            self._config,
            self._pool,
            session_id=session_id,
            tenant=tenant,
            bounds=bounds or TreeBounds(),
        )

    async def waits_open(
        self, *, session_id: UUID, tenant: str | None, children_shown: int = 20
    ) -> list[OpenWait]:
        async with guarded("dashboard_waits_open", self._config), self._pool.connection() as c:
            return await fetch_all(
                c,
                OpenWait,
                "dashboard_waits_open",
                session_id=session_id,
                tenant=tenant,
                children_shown=children_shown,
                limit=20,
            )

    async def signals_kept(
        self, *, session_id: UUID, tenant: str | None, limit: int = 20
    ) -> list[KeptSignal]:
        """The oldest ``limit`` signals kept unconsumed (the order waits take them in)."""
        async with guarded("dashboard_signals_kept", self._config), self._pool.connection() as c:
            return await fetch_all(
                c,
                KeptSignal,
                "dashboard_signals_kept",
                session_id=session_id,
                tenant=tenant,
                limit=limit,
                payload_chars=300,
            )

    async def workers(self) -> list[WorkerRow]:
        """Workers running, draining, or stopped in the last ten minutes."""
        async with guarded("workers_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, WorkerRow, "workers_list", live_seconds=_LIVE_SECONDS)

    async def tenants(self) -> list[str]:
        async with guarded("keys_tenants", self._config), self._pool.connection() as conn:
            return [r.tenant for r in await fetch_all(conn, _Tenant, "keys_tenants")]
