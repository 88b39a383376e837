"""The batch enqueue's plan: the statements of many turns sent together.

Queued one after another, each turn of a batch costs the single enqueue's round
trips (create or lock its session, look its key up, read its tenant's limits,
insert). Here the statements that do not depend on each other go out together
in a pipeline, for every turn of the batch at once: the session locks (in
session id order, so two batches never deadlock), key look-ups, the new
sessions (one statement for all of them) and limits reads in one round trip,
then the inserts with the COMMIT: one statement per turn of an existing
session, one for the first turns of all the new sessions. The checks between
are the single enqueue's, made in Python in item order, counting the batch's
own turns.

Safe under READ COMMITTED as the single enqueue is: each statement of a
pipeline takes its snapshot when it starts, after the statements before it
ended, so a key look-up sent after its session's lock sees every turn committed
before that lock was granted, and nothing can add one until the transaction
ends; each insert runs under its session's lock too.

What the plan does not cover is left to the single enqueue's statements, item
by item, in the same transaction (the plan's writes rolled back first, under a
savepoint): a tenant with admission limits (their counts are serialised per
turn by an advisory lock), a new session of a tenant with a session limit,
``busy=interrupt``, a session key that an earlier
enqueue already used, one key twice in a batch, and a session asked for under
two tenant scopes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

from psycopg import AsyncConnection, AsyncPipeline, AsyncRawCursor
from psycopg.rows import TupleRow, class_row
from psycopg.types.json import Jsonb

from stint.errors import StintError
from stint.store.admission import EffectiveLimits, check_session_queue
from stint.store.config import StoreConfig
from stint.store.errors import IdempotencyConflict, SessionBusy, StoreError, UnknownSession
from stint.store.fetch import run_numbered
from stint.store.models import EnqueueResult
from stint.store.vocabulary import BusyStrategy

__all__ = ["EnqueueItem", "KeyedTurn", "LockedSession", "NotPlanned", "planned_enqueue"]


@dataclass(frozen=True)
class EnqueueItem:
    """One turn of a batch enqueue: the single enqueue's arguments
    (``ClientStore.turns_enqueue`` says what each means)."""

    idempotency_key: str
    turn_input: dict[str, Any]
    session_id: UUID | None = None
    tenant: str | None = None
    pin: str | None = None
    timeout_seconds: float | None = None
    busy: BusyStrategy = BusyStrategy.ENQUEUE
    within_tenant: str | None = None
    session_key: str | None = None
    traceparent: str | None = None


class NotPlanned(StintError):
    """The batch needs what the plan does not cover (module doc): enqueue it item by item."""


@dataclass(frozen=True)
class LockedSession:
    """A session as ``sessions_lock_for_enqueue`` reads it, locked."""

    tenant: str | None
    queued_turns: int
    last_turn_seq: int
    lease_owner: str | None
    lease_live: bool


@dataclass(frozen=True)
class KeyedTurn:
    """The turn an earlier enqueue queued with this key (``turns_find_by_key``)."""

    id: UUID
    seq: int
    same_input: bool


@dataclass(frozen=True)
class _Created:
    id: UUID


@dataclass(frozen=True)
class _First:
    """A first turn that ``turns_insert_first`` inserted."""

    session_id: UUID
    id: UUID
    seq: int


@dataclass(frozen=True)
class _Inserted:
    id: UUID
    seq: int
    notified: bool


@dataclass
class _Session:
    """A session as the batch changes it: its tenant, unfinished turns, last seq."""

    tenant: str | None
    queued: int
    last_seq: int


_Cursor = AsyncRawCursor[Any]


async def _send(
    conn: AsyncConnection[TupleRow], name: str, row: type[Any], **params: Any
) -> _Cursor:
    """Queue one statement in the pipeline (an interleaving test may pause it)."""
    return await run_numbered(conn, name, params, class_row(row))


async def planned_enqueue(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    items: Sequence[EnqueueItem],
    pipeline: AsyncPipeline,
) -> Callable[[], Awaitable[list[EnqueueResult]]]:
    """Queue ``items`` by the plan (module doc) in the caller's transaction, begun
    inside ``pipeline``: the first statements go out with the BEGIN, and the
    inserts are left queued, to go with the COMMIT. Returns what reads the
    results, in item order, once the transaction has ended. A refusal raises
    the single enqueue's error with ``item`` set; ``NotPlanned`` when the batch
    needs the single enqueue's way (the caller rolls back and does that)."""
    if any(item.busy is BusyStrategy.INTERRUPT for item in items):
        raise NotPlanned
    scopes: dict[UUID, str | None] = {}
    for item in items:
        sid = item.session_id
        if sid is not None and scopes.setdefault(sid, item.within_tenant) != item.within_tenant:
            raise NotPlanned
    keys = [(item.session_id, item.idempotency_key) for item in items if item.session_id]
    if len(set(keys)) != len(keys):
        raise NotPlanned
    ordered = sorted(scopes.items(), key=lambda s: str(s[0]))
    locks = {
        sid: await _send(
            conn, "sessions_lock_for_enqueue", LockedSession, session_id=sid, tenant=scope
        )
        for sid, scope in ordered
    }
    session_limits = {
        sid: await _send(conn, "admission_effective_for_session", EffectiveLimits, session_id=sid)
        for sid, _ in ordered
    }
    keyed = [
        None
        if item.session_id is None
        else await _send(
            conn,
            "turns_find_by_key",
            KeyedTurn,
            session_id=item.session_id,
            idempotency_key=item.idempotency_key,
            input=Jsonb(item.turn_input),
            timeout_seconds=item.timeout_seconds,
            busy=str(item.busy),
        )
        for item in items
    ]
    new_ids = {index: uuid4() for index, item in enumerate(items) if item.session_id is None}
    creating = (
        await _send(
            conn,
            "sessions_create_many",
            _Created,
            sessions=Jsonb(
                [
                    {
                        "id": str(new_ids[index]),
                        "tenant": items[index].tenant,
                        "pin": items[index].pin,
                        "creation_key": items[index].session_key,
                    }
                    for index in new_ids
                ]
            ),
        )
        if new_ids
        else None
    )
    tenant_limits = {
        t: await _send(conn, "admission_effective", EffectiveLimits, tenant=t)
        for t in {item.tenant for item in items if item.session_id is None}
    }
    await pipeline.sync()
    sessions: dict[UUID, _Session] = {}
    limits: dict[UUID, EffectiveLimits] = {}
    for sid, lock in locks.items():
        found = await lock.fetchone()
        if found is None:
            raise _named(UnknownSession(session=sid), items, _first(items, sid))
        sessions[sid] = _Session(found.tenant, found.queued_turns, found.last_turn_seq)
        limits[sid] = await _limits(session_limits[sid])
    by_tenant = {t: await _limits(cur) for t, cur in tenant_limits.items()}
    if any(
        lim.tenant_scoped or lim.global_backlog is not None
        for lim in (*limits.values(), *by_tenant.values())
    ):
        raise NotPlanned  # admission counts are serialised turn by turn
    if any(lim.max_sessions is not None for lim in by_tenant.values()):
        # A tenant's session count is serialised by its lock (admit_session): the
        # sessions this plan created are rolled back and made item by item.
        raise NotPlanned
    created = {row.id for row in await creating.fetchall()} if creating is not None else set()
    if len(created) != len(new_ids):
        raise NotPlanned  # a session key was used before: found by key, item by item
    results: list[EnqueueResult | tuple[UUID, _Cursor] | UUID] = []
    first_turns: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if index in new_ids:
            sid = new_ids[index]
            try:
                check_session_queue(
                    by_tenant[item.tenant], session_id=sid, queued=0, tenant=item.tenant
                )
            except StoreError as exc:
                raise _named(exc, items, index) from None
            first_turns.append(_first_turn(sid, item))
            results.append(sid)
            continue
        cursor = keyed[index]
        assert item.session_id is not None and cursor is not None
        sid = item.session_id
        existing = await cursor.fetchone()
        if existing is not None:
            if not existing.same_input:
                conflict = IdempotencyConflict(session=sid, idempotency_key=item.idempotency_key)
                raise _named(conflict, items, index)
            results.append(EnqueueResult(sid, existing.id, existing.seq, created=False))
            continue
        try:
            insert = await _insert(conn, config, item, sessions[sid], sid, limits[sid])
        except StoreError as exc:
            raise _named(exc, items, index) from None
        results.append((sid, insert))
    firsts = (
        await _send(
            conn,
            "turns_insert_first",
            _First,
            turns=Jsonb(first_turns),
            work_channel=config.work_channel,
        )
        if first_turns
        else None
    )

    async def read() -> list[EnqueueResult]:
        first = {row.session_id: row for row in await firsts.fetchall()} if firsts else {}
        return [await _result(r, first) for r in results]

    return read


def _first_turn(session_id: UUID, item: EnqueueItem) -> dict[str, Any]:
    """One element of ``turns_insert_first``'s ``turns``."""
    return {
        "session_id": str(session_id),
        "idempotency_key": item.idempotency_key,
        "input": item.turn_input,
        "timeout_seconds": item.timeout_seconds,
        "traceparent": item.traceparent,
        "busy": str(item.busy),
    }


async def _result(
    planned: EnqueueResult | tuple[UUID, _Cursor] | UUID, first: dict[UUID, _First]
) -> EnqueueResult:
    """An item's result: found by its key, inserted on its session, or the first
    turn of the session the batch made for it."""
    if isinstance(planned, EnqueueResult):
        return planned
    if isinstance(planned, UUID):
        row = first[planned]
        return EnqueueResult(planned, row.id, row.seq, created=True)
    return await _inserted(*planned)


async def _insert(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    item: EnqueueItem,
    session: _Session,
    sid: UUID,
    limits: EffectiveLimits,
) -> _Cursor:
    """The single enqueue's checks for one new turn, counting the batch's turns
    before it, then its insert, queued (not synced)."""
    check_session_queue(limits, session_id=sid, queued=session.queued, tenant=session.tenant)
    if session.queued and item.busy is BusyStrategy.REJECT:
        raise SessionBusy(
            f"session busy ({session.queued} turn(s) in progress or queued); nothing was written"
        )
    session.queued += 1
    session.last_seq += 1
    return await _send(
        conn,
        "turns_insert",
        _Inserted,
        session_id=sid,
        seq=session.last_seq,
        idempotency_key=item.idempotency_key,
        input=Jsonb(item.turn_input),
        timeout_seconds=item.timeout_seconds,
        traceparent=item.traceparent,
        busy=str(item.busy),
        work_channel=config.work_channel,
    )


async def _inserted(session_id: UUID, cursor: _Cursor) -> EnqueueResult:
    row: _Inserted | None = await cursor.fetchone()
    assert row is not None
    return EnqueueResult(session_id, row.id, row.seq, created=True)


def _named(exc: StoreError, items: Sequence[EnqueueItem], index: int) -> StoreError:
    """``exc`` naming the item it refused (``item``), when there are several."""
    if len(items) > 1:
        exc.context.setdefault("item", index)
    return exc


def _first(items: Sequence[EnqueueItem], session_id: UUID) -> int:
    return next(i for i, item in enumerate(items) if item.session_id == session_id)


async def _limits(cursor: _Cursor) -> EffectiveLimits:
    found: EffectiveLimits | None = await cursor.fetchone()
    return found or EffectiveLimits(None, None, None, None, None)
