"""Child sessions: spawned by a turn, reported back to their parent (SQL: ``sql/children.sql``).

A spawn is one fenced statement of the parent's lease holder, through the
worker's batches: the child, its first turn, the link and the committed spawn
step are written together or not at all, so a replay finds the same child
(``children_spawn_many``, SQL ``sql/children_many.sql``: N children and their
N steps in one statement, the limits judged for the whole batch). Once a cancel
or an interrupt of the spawning turn has committed, a spawn is refused
(``TurnStopRequested``, nothing written): its child could not be cascaded to. A
child's end is reported to its parent by a transaction of its own (the child's
worker right after the finish, or any worker's sweep after a crash), which
locks the link, then the parent: never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from stint.store.batch import StatementBatcher
from stint.store.config import StoreConfig
from stint.store.errors import ChildRefused, TurnStopRequested
from stint.store.fenced import run_fenced
from stint.store.fetch import fetch_all, fetch_optional
from stint.store.models import Claim, ControlRequest
from stint.store.pool import Pool
from stint.store.translate import guarded
from stint.store.vocabulary import ControlAction

__all__ = [
    "ChildLink",
    "ChildStore",
    "Descendant",
    "NewChild",
    "NewChildren",
    "SpawnedChild",
    "SpawnedTurn",
    "children_cascading",
    "children_interrupting",
]


@dataclass(frozen=True)
class NewChild:
    """What ``ctx.spawn`` asks for: the child's first turn and where it may run."""

    input: Any
    pin: str | None = None
    timeout_seconds: float | None = None
    on_cancel: str = "cascade"


@dataclass(frozen=True)
class NewChildren:
    """What ``ctx.spawn_many`` asks for: one first turn per child (each with its
    step key and request digest, in the same order), and where they may run."""

    step_keys: Sequence[str]
    digests: Sequence[str]
    inputs: Sequence[Any]
    pin: str | None = None
    timeout_seconds: float | None = None
    on_cancel: str = "cascade"


@dataclass(frozen=True)
class SpawnedChild:
    child_id: UUID
    child_turn_id: UUID


@dataclass(frozen=True)
class ChildLink:
    """One child of a session, as the API and ``stint show`` list it."""

    child_id: UUID
    parent_turn_id: UUID
    step_key: str
    child_turn_id: UUID
    on_cancel: str
    created_at: datetime
    status: str | None  # the child turn's status (its end, once reported)
    reported_at: datetime | None


@dataclass(frozen=True)
class Descendant:
    """One session below another in its tree: its parent, policy, spawned turn's status."""

    parent_id: UUID
    child_id: UUID
    status: str | None
    on_cancel: str
    level: int


@dataclass(frozen=True)
class _Spawned:
    refused: str | None
    max_depth: int | None
    max_fanout: int | None
    max_sessions: int | None
    tenant: str | None
    control: str | None  # refused = 'stopped': the cancel or interrupt asked of the turn
    control_reason: str | None
    child_id: UUID | None
    child_turn_id: UUID | None
    notified: bool | None


@dataclass(frozen=True)
class _SpawnedMany:
    refused: str | None
    max_depth: int | None
    max_fanout: int | None
    max_sessions: int | None
    tenant: str | None
    control: str | None  # refused = 'stopped': the cancel or interrupt asked of the turn
    control_reason: str | None
    child_ids: list[UUID] | None
    child_turn_ids: list[UUID] | None
    notified: bool | None


@dataclass(frozen=True)
class _Ended:
    parent_id: UUID
    child_id: UUID


@dataclass(frozen=True)
class _Reported:
    parent_id: UUID
    notified: bool | None


@dataclass(frozen=True)
class _Locked:
    id: UUID


@dataclass(frozen=True)
class _Cascading:
    child_id: UUID


@dataclass(frozen=True)
class SpawnedTurn:
    """A child an interrupt goes on to: the child session and the turn it was spawned with."""

    child_id: UUID
    child_turn_id: UUID


async def children_cascading(
    conn: AsyncConnection[TupleRow], *, session_id: UUID, turn_ids: list[UUID]
) -> list[UUID]:
    """Inside a cancel's transaction: the unfinished children of ``turn_ids`` whose
    policy is ``cascade``, whom the cancel goes on to."""
    rows = await fetch_all(
        conn, _Cascading, "children_cascading", session_id=session_id, turn_ids=turn_ids
    )
    return [row.child_id for row in rows]


async def children_interrupting(
    conn: AsyncConnection[TupleRow], *, session_id: UUID, turn_id: UUID | None
) -> list[SpawnedTurn]:
    """Inside an interrupt's transaction, before it ends anything: the children of
    ``turn_id`` (None: of the session's unfinished turns) spawned with ``cascade``
    whose spawned turn is unfinished, whom the interrupt goes on to."""
    return await fetch_all(
        conn, SpawnedTurn, "children_interrupting", session_id=session_id, turn_id=turn_id
    )


class ChildStore:
    """Spawning (fenced, batched) and reporting children's ends (own transactions)."""

    def __init__(self, config: StoreConfig, pool: Pool, batcher: StatementBatcher | None) -> None:
        self._config = config
        self._pool = pool
        self._batcher = batcher

    async def children_spawn(
        self, claim: Claim, *, turn_id: UUID, step_key: str, digest: str, child: NewChild
    ) -> SpawnedChild:
        """Start a child session under the parent's lease; ``ChildRefused`` (nothing
        written) when ``max_depth``, ``max_fanout`` or the tenant's ``max_sessions``
        refuses it; ``TurnStopRequested`` (nothing written) when a cancel or an
        interrupt of ``turn_id`` has committed (the worker then ends the turn as
        asked); ``LeaseLost`` when the fence fails. With a ``max_sessions`` limit
        the prelude takes the tenant's sessions lock first, as every creator of its
        sessions does."""
        assert self._batcher is not None, "spawning runs in a worker"
        spawned = await run_fenced(
            self._batcher,
            self._config,
            "children_spawn",
            claim,
            turn_id,
            (),
            _Spawned,
            prelude="children_lock_sessions",
            step_key=step_key,
            digest=digest,
            input=Jsonb(child.input),
            pin=child.pin,
            timeout_seconds=child.timeout_seconds,
            on_cancel=child.on_cancel,
        )
        _refuse_stopped(spawned, claim, turn_id, "children_spawn")
        if spawned.refused == "max_depth":
            assert spawned.max_depth is not None
            raise ChildRefused(
                f"child refused: max_depth limit of {spawned.max_depth} levels below a "
                "client's session",
                limit="max_depth",
                value=spawned.max_depth,
                session=claim.session_id,
            )
        if spawned.refused == "max_fanout":
            assert spawned.max_fanout is not None
            raise ChildRefused(
                f"child refused: max_fanout limit of {spawned.max_fanout} children per turn",
                limit="max_fanout",
                value=spawned.max_fanout,
                session=claim.session_id,
            )
        if spawned.refused == "max_sessions":
            assert spawned.max_sessions is not None
            owner = (
                f"tenant {spawned.tenant}"
                if spawned.tenant is not None
                else "sessions without a tenant"
            )
            raise ChildRefused(
                f"child refused: max_sessions limit of {spawned.max_sessions} sessions "
                f"reached for {owner}",
                limit="max_sessions",
                value=spawned.max_sessions,
                session=claim.session_id,
            )
        assert spawned.child_id is not None and spawned.child_turn_id is not None
        return SpawnedChild(spawned.child_id, spawned.child_turn_id)

    async def children_report(self, *, child_id: UUID | None = None) -> UUID | None:
        """Tell one parent that a child's turn ended (``child_id``'s, or any not yet
        reported): its parent's id, or None when there was nothing to report."""
        async with (
            guarded("children_report", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            ended = await fetch_optional(conn, _Ended, "children_take_ended", child_id=child_id)
            if ended is None:
                return None
            await fetch_optional(conn, _Locked, "children_lock_parent", parent_id=ended.parent_id)
            reported = await fetch_optional(
                conn,
                _Reported,
                "children_report",
                child_id=ended.child_id,
                events_channel=self._config.events_channel,
                work_channel=self._config.work_channel,
            )
        return None if reported is None else reported.parent_id

    async def children_list(self, *, session_id: UUID, tenant: str | None) -> list[ChildLink]:
        """A session's children, oldest first (another tenant's session: none)."""
        async with guarded("children_list", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn, ChildLink, "children_list", session_id=session_id, tenant=tenant
            )

    async def children_tree(self, *, session_id: UUID, limit: int = 10_000) -> list[Descendant]:
        """The session's descendants, level by level, at most ``limit``."""
        async with guarded("children_tree", self._config), self._pool.connection() as conn:
            return await fetch_all(
                conn, Descendant, "children_tree", session_id=session_id, limit=limit
            )

    async def children_spawn_many(
        self, claim: Claim, *, turn_id: UUID, children: NewChildren
    ) -> list[SpawnedChild]:
        """Start ``len(children.inputs)`` child sessions under the parent's lease in
        one statement, in order; ``ChildRefused`` (nothing written) when the whole
        batch would pass ``max_depth``, ``max_fanout`` or the tenant's ``max_sessions``
        (the prelude takes the tenant's sessions lock first, as for one spawn);
        ``TurnStopRequested`` (nothing written) when a cancel or an interrupt of
        ``turn_id`` has committed, as for one spawn."""
        assert self._batcher is not None, "spawning runs in a worker"
        count = len(children.inputs)
        assert count and len(children.step_keys) == len(children.digests) == count
        spawned = await run_fenced(
            self._batcher,
            self._config,
            "children_spawn_many",
            claim,
            turn_id,
            (),
            _SpawnedMany,
            prelude="children_lock_sessions",
            step_keys=list(children.step_keys),
            digests=list(children.digests),
            # One jsonb array, dumped once (as the events parameter), unpacked in SQL.
            inputs=Jsonb(list(children.inputs)),
            pin=children.pin,
            timeout_seconds=children.timeout_seconds,
            on_cancel=children.on_cancel,
        )
        _refuse_stopped(spawned, claim, turn_id, "children_spawn_many")
        _refuse_batch(spawned, claim, count)
        assert spawned.child_ids is not None and spawned.child_turn_ids is not None
        return [
            SpawnedChild(child_id, child_turn_id)
            for child_id, child_turn_id in zip(
                spawned.child_ids, spawned.child_turn_ids, strict=True
            )
        ]


def _refuse_stopped(
    spawned: _Spawned | _SpawnedMany, claim: Claim, turn_id: UUID, operation: str
) -> None:
    """``TurnStopRequested`` when the spawn was refused because a cancel or an
    interrupt of the spawning turn had committed first (nothing written)."""
    if spawned.refused != "stopped":
        return
    assert spawned.control is not None
    request = ControlRequest(ControlAction(spawned.control), turn_id, spawned.control_reason)
    raise TurnStopRequested(
        f"spawn refused: {request.action} of the turn requested",
        request=request,
        session=claim.session_id,
        operation=operation,
    )


def _refuse_batch(spawned: _SpawnedMany, claim: Claim, count: int) -> None:
    """``ChildRefused`` naming the limit ``children_spawn_many`` said no for, if any."""
    what = "child refused" if count == 1 else f"{count} children refused"
    if spawned.refused == "max_depth":
        assert spawned.max_depth is not None
        raise ChildRefused(
            f"{what}: max_depth limit of {spawned.max_depth} levels below a client's session",
            limit="max_depth",
            value=spawned.max_depth,
            session=claim.session_id,
        )
    if spawned.refused == "max_fanout":
        assert spawned.max_fanout is not None
        raise ChildRefused(
            f"{what}: max_fanout limit of {spawned.max_fanout} children per turn",
            limit="max_fanout",
            value=spawned.max_fanout,
            session=claim.session_id,
        )
    if spawned.refused == "max_sessions":
        assert spawned.max_sessions is not None
        owner = (
            f"tenant {spawned.tenant}"
            if spawned.tenant is not None
            else "sessions without a tenant"
        )
        raise ChildRefused(
            f"{what}: max_sessions limit of {spawned.max_sessions} sessions reached for {owner}",
            limit="max_sessions",
            value=spawned.max_sessions,
            session=claim.session_id,
        )
