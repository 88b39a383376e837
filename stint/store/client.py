"""The client's side of the store: producers enqueue turns, followers read event
logs, clients read sessions and turns, operators read status. (Measurement-only
reads live in ``probe``.)

Methods that take ``tenant`` scope what they read to that tenant's sessions:
another tenant's session is simply not found. ``None`` means no scope (the
operator's CLI); the API always passes its caller's tenant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from stint.store.admission import (
    EffectiveLimits,
    admit,
    admit_session,
    check_session_queue,
    effective_limits,
)
from stint.store.children import children_interrupting
from stint.store.config import StoreConfig
from stint.store.controls import interrupt_children, stop_active_turn
from stint.store.deadlock import retried_on_deadlock
from stint.store.enqueue_batch import EnqueueItem, NotPlanned, planned_enqueue
from stint.store.enqueue_batch import KeyedTurn as _KeyedTurn
from stint.store.enqueue_batch import LockedSession as _LockedSession
from stint.store.errors import (
    IdempotencyConflict,
    SessionBusy,
    StoreError,
    UnknownSession,
)
from stint.store.fetch import fetch_all, fetch_one, fetch_optional
from stint.store.input_rules import check_batch_size
from stint.store.models import (
    EnqueueResult,
    Event,
    LogBounds,
    PagedEvent,
    QuotaScope,
    SessionRecord,
    StatusSummary,
    TenantStatus,
    TurnRecord,
    WorkerRow,
)
from stint.store.pool import Pool
from stint.store.translate import guarded
from stint.store.vocabulary import BusyStrategy, ControlAction, SessionStatus, TurnStatus

__all__ = ["ClientStore", "EnqueueItem", "enqueue_in"]

# A worker row without a recorded lease (written before migration 0004) is live
# while its heartbeat is younger than this.
_LIVE_SECONDS = 90.0


@dataclass(frozen=True)
class _NewTurn:
    id: UUID
    seq: int
    notified: bool


@dataclass(frozen=True)
class _NewSession:
    id: UUID
    created_at: datetime


@dataclass(frozen=True)
class _KeyedSession:
    id: UUID
    pin: str | None


@dataclass(frozen=True)
class _FoundSession:
    id: UUID
    status: str


@dataclass(frozen=True)
class _QueueSummary:
    oldest_ready_age: float | None


@dataclass(frozen=True)
class _ReadyBlocked:
    live_workers: int
    without_worker: int
    unaccepted: int


@dataclass(frozen=True)
class _StatusCount:
    status: str
    count: int


async def _keyed_session(
    conn: AsyncConnection[TupleRow], *, tenant: str | None, pin: str | None, key: str | None
) -> UUID:
    """The session an earlier enqueue created with this key (and tenant)."""
    found = await fetch_one(
        conn, _KeyedSession, "sessions_find_by_creation_key", tenant=tenant, creation_key=key
    )
    if found.pin != pin:
        raise IdempotencyConflict(
            "this idempotency key already created a session with another pin; nothing was written",
            session=found.id,
            idempotency_key=key,
        )
    return found.id


async def _create_session(
    conn: AsyncConnection[TupleRow],
    limits: EffectiveLimits,
    *,
    tenant: str | None,
    pin: str | None,
    key: str | None,
) -> _NewSession | None:
    """A new session, inside the caller's transaction, once the tenant's session
    limit admits it (``SessionLimitReached`` otherwise, before anything is written).
    With a creation ``key`` an earlier call already used: None (nothing created)."""
    await admit_session(conn, limits, tenant=tenant, creation_key=key)
    return await fetch_optional(
        conn, _NewSession, "sessions_create", tenant=tenant, pin=pin, creation_key=key
    )


async def enqueue_in(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    *,
    session_id: UUID | None,
    idempotency_key: str,
    turn_input: dict[str, Any],
    tenant: str | None = None,
    pin: str | None = None,
    timeout_seconds: float | None = None,
    busy: BusyStrategy = BusyStrategy.ENQUEUE,
    within_tenant: str | None = None,
    session_key: str | None = None,
    traceparent: str | None = None,
) -> EnqueueResult:
    """The enqueue's statements, inside the caller's transaction (``ClientStore.turns_enqueue``
    explains them); a schedule's tick runs them in the transaction that records the tick."""
    busy = BusyStrategy(busy)
    payload = Jsonb(turn_input)
    new: _NewSession | None = None
    limits: EffectiveLimits | None = None
    if session_id is None:
        limits = await effective_limits(conn, tenant=tenant)
        new = await _create_session(conn, limits, tenant=tenant, pin=pin, key=session_key)
    if new is not None:
        sid = new.id
        locked = _LockedSession(tenant, 0, 0, None, False)
    else:
        # An existing session, or a retry whose key already created one.
        sid = session_id or await _keyed_session(conn, tenant=tenant, pin=pin, key=session_key)
        found = await fetch_optional(
            conn,
            _LockedSession,
            "sessions_lock_for_enqueue",
            session_id=sid,
            tenant=within_tenant,
        )
        if found is None:
            raise UnknownSession(session=sid)
        locked = found
        existing = await fetch_optional(
            conn,
            _KeyedTurn,
            "turns_find_by_key",
            session_id=sid,
            idempotency_key=idempotency_key,
            input=payload,
            timeout_seconds=timeout_seconds,
            busy=str(busy),
        )
        if existing is not None:
            if not existing.same_input:
                raise IdempotencyConflict(session=sid, idempotency_key=idempotency_key)
            return EnqueueResult(sid, existing.id, existing.seq, created=False)
    queued = locked.queued_turns
    if limits is None:
        limits = await effective_limits(conn, tenant=locked.tenant)
    check_session_queue(limits, session_id=sid, queued=queued, tenant=locked.tenant)
    if queued and busy is BusyStrategy.REJECT:
        raise SessionBusy(
            f"session busy ({queued} turn(s) in progress or queued); nothing was written"
        )
    await admit(conn, limits, tenant=locked.tenant, activates=not queued)
    inserted = await fetch_one(
        conn,
        _NewTurn,
        "turns_insert",
        session_id=sid,
        seq=locked.last_turn_seq + 1,
        idempotency_key=idempotency_key,
        input=payload,
        timeout_seconds=timeout_seconds,
        traceparent=traceparent,
        busy=str(busy),
        work_channel=config.work_channel,
    )
    if queued and busy is BusyStrategy.INTERRUPT:
        # As `stint interrupt`: the children the turn spawned with `cascade` are read
        # before it is stopped, and interrupted after it.
        below = await children_interrupting(conn, session_id=sid, turn_id=None)
        await stop_active_turn(
            conn,
            config,
            session_id=sid,
            action=ControlAction.INTERRUPT,
            reason="new input",
            turn_id=None,
            lease_owner=locked.lease_owner,
            lease_live=bool(locked.lease_live),
        )
        await interrupt_children(conn, config, below)
    return EnqueueResult(sid, inserted.id, inserted.seq, created=True)


async def _enqueue_item(
    conn: AsyncConnection[TupleRow], config: StoreConfig, item: EnqueueItem
) -> EnqueueResult:
    return await enqueue_in(
        conn,
        config,
        session_id=item.session_id,
        idempotency_key=item.idempotency_key,
        turn_input=item.turn_input,
        tenant=item.tenant,
        pin=item.pin,
        timeout_seconds=item.timeout_seconds,
        busy=item.busy,
        within_tenant=item.within_tenant,
        session_key=item.session_key,
        traceparent=item.traceparent,
    )


@dataclass(frozen=True)
class _Capacity:
    live_workers: int
    live_slots: int


class ClientStore:
    """Data access for producers, followers and operators."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    @property
    def config(self) -> StoreConfig:
        return self._config

    async def turns_enqueue(
        self,
        *,
        session_id: UUID | None,
        idempotency_key: str,
        turn_input: dict[str, Any],
        tenant: str | None = None,
        pin: str | None = None,
        timeout_seconds: float | None = None,
        busy: BusyStrategy = BusyStrategy.ENQUEUE,
        within_tenant: str | None = None,
        session_key: str | None = None,
        traceparent: str | None = None,
    ) -> EnqueueResult:
        """Queue one turn in one transaction; on any refusal nothing is written.

        The session row is locked first, so concurrent producers of one session
        are serialised and an idempotency key can never yield two turns. A new
        turn must then pass the admission limits in the database (per session,
        per tenant, global: ``stint.store.admission``); an idempotent retry of an
        admitted turn returns it whatever the limits say now. ``busy``
        says what to do when the session already has a turn in progress:
        ``enqueue`` behind it, ``reject`` the input, or ``interrupt`` the running
        turn and run the new one after it. With ``within_tenant``, an existing
        session of another tenant is an ``UnknownSession``. ``session_key``
        (without ``session_id``) makes creating the session idempotent too: a
        retry with the same key and tenant finds the session the first call
        created. ``traceparent`` (the producer's W3C trace context) is stored with
        the turn, so the worker's span for it continues the producer's trace.
        """
        item = EnqueueItem(
            idempotency_key,
            turn_input,
            session_id,
            tenant,
            pin,
            timeout_seconds,
            busy,
            within_tenant,
            session_key,
            traceparent,
        )
        [result] = await self._enqueue([item], "turns_enqueue")
        return result

    async def turns_enqueue_many(self, items: Sequence[EnqueueItem]) -> list[EnqueueResult]:
        """Queue many turns in one transaction, all or nothing: each item is
        checked exactly as ``turns_enqueue`` checks one (its own idempotency key,
        the same admission limits, counted with the items before it), and the
        first refusal rolls every item back; the error names the item
        (``item``: its index). One commit (one WAL flush) for the whole batch
        instead of one per turn, and the statements of all items sent together
        (``stint.store.enqueue_batch``), make it fast. Results are in item order.
        ``InvalidInput`` for an empty batch or one over ``MAX_BATCH_TURNS``."""
        check_batch_size(len(items))
        return await self._enqueue(items, "turns_enqueue_many")

    async def _enqueue(self, items: Sequence[EnqueueItem], operation: str) -> list[EnqueueResult]:
        """One transaction: by the plan (``stint.store.enqueue_batch``: two round
        trips, BEGIN and COMMIT included), else rolled back and done item by item.
        An item with ``busy=interrupt`` locks the children it interrupts after their
        parent, so the whole may lose a deadlock to a worker's batch: then it runs
        again (``stint.store.deadlock``; the idempotency keys make that safe anyway)."""
        return await retried_on_deadlock(operation, lambda: self._enqueue_once(items, operation))

    async def _enqueue_once(
        self, items: Sequence[EnqueueItem], operation: str
    ) -> list[EnqueueResult]:
        async with guarded(operation, self._config), self._pool.connection() as conn:
            try:
                async with conn.pipeline() as pipeline, conn.transaction():
                    read = await planned_enqueue(conn, self._config, items, pipeline)
                return await read()
            except NotPlanned:
                pass
            results: list[EnqueueResult] = []
            async with conn.transaction():
                for index, item in enumerate(items):
                    try:
                        results.append(await _enqueue_item(conn, self._config, item))
                    except StoreError as exc:
                        if len(items) > 1:
                            exc.context.setdefault("item", index)
                        raise
            return results

    async def sessions_create(self, *, tenant: str | None = None, pin: str | None = None) -> UUID:
        """A new idle session with no turns, if ``tenant``'s session limit admits it
        (``SessionLimitReached`` otherwise: nothing is written)."""
        async with (
            guarded("sessions_create", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            limits = await effective_limits(conn, tenant=tenant)
            new = await _create_session(conn, limits, tenant=tenant, pin=pin, key=None)
        assert new is not None  # without a creation key the insert always returns its row
        return new.id

    async def events_after(
        self, *, session_id: UUID, after: int, limit: int = 500, tenant: str | None = None
    ) -> list[Event]:
        """Events of a session with seq > after, in order (the catch-up read)."""
        params = {"session_id": session_id, "after": after, "limit": limit, "tenant": tenant}
        async with guarded("events_after", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, Event, "events_after", **params)

    async def events_page(
        self,
        *,
        session_id: UUID,
        after: int,
        max_bytes: int,
        limit: int = 500,
        tenant: str | None = None,
    ) -> list[PagedEvent]:
        """Events with seq > after, in order, whose payloads' JSON adds up to at most
        ``max_bytes`` (the first always included): a stream's page, bounded in memory."""
        params = {
            "session_id": session_id,
            "after": after,
            "limit": limit,
            "max_bytes": max_bytes,
            "tenant": tenant,
        }
        async with guarded("events_page", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, PagedEvent, "events_page", **params)

    async def events_bounds(
        self, *, session_id: UUID, tenant: str | None = None
    ) -> LogBounds | None:
        """The session's first and last seqs, or None when it does not exist (or is
        not ``tenant``'s)."""
        params = {"session_id": session_id, "tenant": tenant}
        async with guarded("events_bounds", self._config), self._pool.connection() as conn:
            return await fetch_optional(conn, LogBounds, "events_bounds", **params)

    async def sessions_get(
        self, *, session_id: UUID, tenant: str | None = None
    ) -> SessionRecord | None:
        """One session, or None when it does not exist (or is not ``tenant``'s)."""
        async with guarded("sessions_get", self._config), self._pool.connection() as conn:
            return await fetch_optional(
                conn, SessionRecord, "sessions_get", session_id=session_id, tenant=tenant
            )

    async def sessions_list(
        self,
        *,
        tenant: str,
        statuses: list[SessionStatus] | None = None,
        pin: str | None = None,
        before: tuple[datetime, UUID] | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """One page of ``tenant``'s sessions, newest first. ``before`` is the
        (created_at, id) of the previous page's last row: a keyset, so a page
        costs the same however deep the client has paged, and rows created
        meanwhile never shift the pages that follow."""
        before_at, before_id = before if before is not None else (None, None)
        async with guarded("sessions_list", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn,
                SessionRecord,
                "sessions_list",
                tenant=tenant,
                statuses=[str(s) for s in statuses or []],
                pin=pin,
                before_created_at=before_at,
                before_id=before_id,
                limit=limit,
            )

    async def turns_get(
        self, *, session_id: UUID, turn_id: UUID, tenant: str | None = None
    ) -> TurnRecord | None:
        """One turn of a session with its output or error, or None."""
        async with guarded("turns_get", self._config), self._pool.connection() as conn:
            return await fetch_optional(
                conn,
                TurnRecord,
                "turns_get",
                session_id=session_id,
                turn_id=turn_id,
                tenant=tenant,
            )

    async def turns_list(
        self, *, session_id: UUID, after_seq: int = 0, limit: int = 50, tenant: str | None = None
    ) -> list[TurnRecord]:
        """A session's turns with seq > after_seq, in order (keyset paging)."""
        async with guarded("turns_list", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn,
                TurnRecord,
                "turns_list",
                session_id=session_id,
                after_seq=after_seq,
                limit=limit,
                tenant=tenant,
            )

    async def tenant_status(self, *, tenant: str) -> TenantStatus:
        """``tenant``'s sessions by status and queue, and the fleet's live capacity."""
        async with guarded("tenant_status", self._config), self._pool.connection() as conn:
            counts = await fetch_all(conn, _StatusCount, "sessions_count_by_status", tenant=tenant)
            turns = await fetch_all(conn, _StatusCount, "turns_count_open", tenant=tenant)
            summary = await fetch_one(conn, _QueueSummary, "sessions_queue_summary", tenant=tenant)
            capacity = await fetch_one(
                conn, _Capacity, "workers_capacity", live_seconds=_LIVE_SECONDS
            )
        return TenantStatus(
            sessions={c.status: c.count for c in counts},
            queued_turns=sum(c.count for c in turns if c.status == TurnStatus.QUEUED),
            oldest_ready_age=summary.oldest_ready_age,
            live_workers=capacity.live_workers,
            live_slots=capacity.live_slots,
        )

    async def session_status(self, *, session_id: UUID) -> str:
        """The session's status; ``UnknownSession`` when there is no such session."""
        async with guarded("sessions_find", self._config), self._pool.connection() as conn:
            found = await fetch_optional(
                conn, _FoundSession, "sessions_find", session_id=session_id
            )
        if found is None:
            raise UnknownSession(session=session_id)
        return found.status

    async def status(self) -> StatusSummary:
        """Workers (dead when their heartbeat outlived their lease), sessions by
        status, unfinished turns by status, oldest ready age, and ready sessions
        no live worker will run (none alive, or none accepting their pin), and
        every provider quota scope with its counters."""
        async with guarded("status", self._config), self._pool.connection() as conn:
            workers = await fetch_all(conn, WorkerRow, "workers_list", live_seconds=_LIVE_SECONDS)
            counts = await fetch_all(conn, _StatusCount, "sessions_count_by_status", tenant=None)
            turns = await fetch_all(conn, _StatusCount, "turns_count_open", tenant=None)
            summary = await fetch_one(conn, _QueueSummary, "sessions_queue_summary", tenant=None)
            blocked = await fetch_one(
                conn, _ReadyBlocked, "sessions_ready_unaccepted", live_seconds=_LIVE_SECONDS
            )
            quotas = await fetch_all(conn, QuotaScope, "quota_list", scope=None)
        open_turns = {c.status: c.count for c in turns}
        return StatusSummary(
            workers=workers,
            sessions={c.status: c.count for c in counts},
            queued_turns=open_turns.get(TurnStatus.QUEUED, 0),
            running_turns=open_turns.get(TurnStatus.RUNNING, 0),
            parked_turns=open_turns.get(TurnStatus.PARKED, 0),
            oldest_ready_age=summary.oldest_ready_age,
            live_workers=blocked.live_workers,
            ready_without_worker=blocked.without_worker,
            ready_unaccepted=blocked.unaccepted,
            quotas=quotas,
        )
