"""The client's side of the store: enqueue turns, read event logs, report status."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.config import StoreConfig
from stint.store.controls import stop_active_turn
from stint.store.errors import IdempotencyConflict, QueueFull, SessionBusy, UnknownSession
from stint.store.models import (
    EnqueueResult,
    Event,
    StatusSummary,
    TurnProgress,
    TurnTiming,
    WorkerRow,
)
from stint.store.pool import Pool
from stint.store.queries import query
from stint.store.translate import guarded

__all__ = ["BUSY_STRATEGIES", "ClientStore"]

BUSY_STRATEGIES = ("enqueue", "reject", "interrupt")

# A worker whose heartbeat is older than this is not counted as live by status.
_LIVE_SECONDS = 90.0


class ClientStore:
    """Data access for producers, followers and operators."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def turns_enqueue(
        self,
        *,
        session_id: UUID | None,
        idempotency_key: str,
        turn_input: dict[str, Any],
        tenant: str | None = None,
        pin: str | None = None,
        queue_limit: int,
        timeout_seconds: float | None = None,
        busy: str = "enqueue",
    ) -> EnqueueResult:
        """Queue one turn in one transaction; on any refusal nothing is written.

        The session row is locked first, so concurrent producers of one session
        are serialised and an idempotency key can never yield two turns. ``busy``
        says what to do when the session already has a turn in progress:
        ``enqueue`` behind it, ``reject`` the input, or ``interrupt`` the running
        turn and run the new one after it.
        """
        if busy not in BUSY_STRATEGIES:
            raise ValueError(f"busy must be one of {BUSY_STRATEGIES}, not {busy!r}")
        payload = Jsonb(turn_input)
        async with (
            guarded("turns_enqueue", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            if session_id is None:
                cur = await conn.execute(query("sessions_create"), {"tenant": tenant, "pin": pin})
                created_row = await cur.fetchone()
                assert created_row is not None
                sid: UUID = created_row[0]
                queued, last_seq, owner, lease_live = 0, 0, None, False
            else:
                sid = session_id
                cur = await conn.execute(query("sessions_lock_for_enqueue"), {"session_id": sid})
                locked = await cur.fetchone()
                if locked is None:
                    raise UnknownSession(session=sid)
                queued, last_seq, owner, lease_live = locked
                cur = await conn.execute(
                    query("turns_find_by_key"),
                    {"session_id": sid, "idempotency_key": idempotency_key, "input": payload},
                )
                existing = await cur.fetchone()
                if existing is not None:
                    turn_id, seq, same_input = existing
                    if not same_input:
                        raise IdempotencyConflict(session=sid, idempotency_key=idempotency_key)
                    return EnqueueResult(sid, turn_id, seq, created=False)
            if queued >= queue_limit:
                raise QueueFull(f"queue full ({queued} queued, limit {queue_limit})")
            if queued and busy == "reject":
                raise SessionBusy(
                    f"session busy ({queued} turn(s) in progress or queued); nothing was written"
                )
            cur = await conn.execute(
                query("turns_insert"),
                {
                    "session_id": sid,
                    "seq": last_seq + 1,
                    "idempotency_key": idempotency_key,
                    "input": payload,
                    "timeout_seconds": timeout_seconds,
                    "work_channel": self._config.work_channel,
                },
            )
            inserted = await cur.fetchone()
            assert inserted is not None
            if queued and busy == "interrupt":
                await stop_active_turn(
                    conn,
                    self._config,
                    session_id=sid,
                    action="interrupt",
                    reason="new input",
                    turn_id=None,
                    lease_owner=owner,
                    lease_live=bool(lease_live),
                )
            return EnqueueResult(sid, inserted[0], inserted[1], created=True)

    async def sessions_create(self, *, tenant: str | None = None, pin: str | None = None) -> UUID:
        """A new idle session with no turns (load tests seed these before the burst)."""
        async with guarded("sessions_create", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("sessions_create"), {"tenant": tenant, "pin": pin})
            row = await cur.fetchone()
        assert row is not None
        session_id: UUID = row[0]
        return session_id

    async def events_after(self, *, session_id: UUID, after: int, limit: int = 500) -> list[Event]:
        """Events of a session with seq > after, in order (the catch-up read)."""
        params = {"session_id": session_id, "after": after, "limit": limit}
        async with guarded("events_after", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("events_after"), params)
            return [Event(*row) for row in await cur.fetchall()]

    async def status(self) -> StatusSummary:
        """Workers, sessions by status, queued turns, oldest ready age."""
        async with guarded("status", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("workers_list"))
            workers = [WorkerRow(*row) for row in await cur.fetchall()]
            cur = await conn.execute(query("sessions_count_by_status"))
            sessions = {status: count for status, count in await cur.fetchall()}
            cur = await conn.execute(query("sessions_queue_summary"))
            summary = await cur.fetchone()
            cur = await conn.execute(
                query("sessions_ready_unaccepted"), {"live_seconds": _LIVE_SECONDS}
            )
            unaccepted = await cur.fetchone()
        assert summary is not None and unaccepted is not None
        return StatusSummary(
            workers=workers,
            sessions=sessions,
            queued_turns=int(summary[0]),
            oldest_ready_age=summary[1],
            ready_unaccepted=int(unaccepted[0]),
        )

    async def turns_progress(self) -> TurnProgress:
        async with guarded("turns_progress", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("turns_progress"))
            row = await cur.fetchone()
        assert row is not None
        return TurnProgress(*row)

    async def turns_timings(self) -> list[TurnTiming]:
        """Audit timings of every finished turn, oldest finish first."""
        async with guarded("turns_timings", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("turns_timings"))
            return [TurnTiming(*row) for row in await cur.fetchall()]

    async def statements_reset(self) -> None:
        """Start counting statements (pg_stat_statements must be preloaded)."""
        async with guarded("statements_reset", self._config), self._pool.connection() as conn:
            await conn.execute(query("statements_enable"))
            await conn.execute(query("statements_reset"))

    async def statements_calls(self, *, excluding: Sequence[str] = ()) -> int:
        """Statements run in this database since the reset, not counting the
        named store statements (a caller's own polling)."""
        params = {"excluded": [query(name) for name in excluding]}
        async with guarded("statements_calls", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("statements_calls"), params)
            row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def load_sample(self) -> tuple[int, int]:
        """Sessions running now, and worker connections open now."""
        async with guarded("load_sample", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("load_sample"))
            row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    async def workers_running(self) -> int:
        return await self._scalar("workers_running")

    async def _scalar(self, name: str) -> int:
        async with guarded(name, self._config), self._pool.connection() as conn:
            cur = await conn.execute(query(name))
            row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def table_footprint(self) -> dict[str, tuple[int, int]]:
        """Rows (planner estimate) and bytes of each table, after VACUUM (ANALYZE)."""
        async with guarded("table_footprint", self._config), self._pool.connection() as conn:
            await conn.execute(query("vacuum_analyze"))
            cur = await conn.execute(query("table_footprint"))
            return {name: (rows, size) for name, rows, size in await cur.fetchall()}

    async def event_times(self, *, kind: str) -> dict[UUID, float]:
        """When (database clock, epoch seconds) each session got an event of ``kind``."""
        async with guarded("event_times", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("event_times"), {"kind": kind})
            return {sid: at for sid, at in await cur.fetchall()}

    async def sessions_held_by(self, *, owner: str) -> dict[UUID, int]:
        """The leases ``owner`` holds now: session id to epoch."""
        async with guarded("sessions_held_by", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("sessions_held_by"), {"owner": owner})
            return {sid: epoch for sid, epoch in await cur.fetchall()}

    async def sessions_in_flight(self) -> list[UUID]:
        """Sessions with unfinished turns."""
        async with guarded("sessions_in_flight", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("sessions_in_flight"))
            return [row[0] for row in await cur.fetchall()]

    async def sessions_owned_since(self, held: dict[UUID, int]) -> set[UUID]:
        """Which of these leases are still held under the same epoch."""
        params = {"session_ids": list(held), "epochs": list(held.values())}
        async with guarded("sessions_owned_since", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("sessions_owned_since"), params)
            return {row[0] for row in await cur.fetchall()}

    async def turns_finished_after(self, moment: float) -> int:
        """Turns finished after ``moment`` (epoch seconds, database clock)."""
        async with guarded("turns_finished_after", self._config), self._pool.connection() as conn:
            cur = await conn.execute(query("turns_finished_after"), {"after": moment})
            row = await cur.fetchone()
        assert row is not None
        return int(row[0])
