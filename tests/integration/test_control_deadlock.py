"""A control's cascade locks the parent's session row, then each child's; a worker's
group-commit batch locks the rows of its statements in session-id order, so it may
hold a child and want its parent. PostgreSQL ends one of the two: a control that
loses runs again (``stint.store.deadlock``) and does what was asked, once."""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest
from psycopg import AsyncConnection
from psycopg import errors as pg_errors

from stint.postgres.scratch import ScratchTarget
from stint.store.controls import ControlStore
from stint.store.errors import DatabaseError, Deadlocked
from stint.store.pool import Pool
from stint.store.translate import translated
from stint.store.vocabulary import ControlAction
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import parent_running, spawn_child
from tests.polling import wait_until
from tests.workers import fetch


async def _waiting_for_a_lock(pool: Pool, holder_pid: int) -> bool:
    rows = await fetch(
        pool,
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s",
        holder_pid,
    )
    return bool(rows[0][0])


async def test_a_cancel_that_loses_a_deadlock_to_a_batch_runs_again_and_ends_both(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    parent, claim, turn = await parent_running(db.config, pool, runtime)
    child = await spawn_child(runtime, claim, turn, 0)  # queued, claimed by nobody
    controls = ControlStore(db.config, pool)
    # As a worker's batch would: the child's row first, then (below) the parent's. Its
    # own deadlock_timeout is long, so the cancel (waiting first, 1 s) is the one ended.
    async with pool.connection() as batch, batch.transaction():
        await batch.execute("SET LOCAL deadlock_timeout = '30s'")
        await batch.execute("SELECT FROM sessions WHERE id = %s FOR UPDATE", (child.child_id,))
        cancel = asyncio.create_task(
            controls.control(
                session_id=parent.session_id, action=ControlAction.CANCEL, reason="stop"
            )
        )
        await wait_until(
            lambda: _waiting_for_a_lock(pool, batch.info.backend_pid),
            what="the cancel waiting for the child's row",
        )
        await batch.execute(
            "UPDATE sessions SET updated_at = now() WHERE id = %s", (parent.session_id,)
        )
    result = await cancel
    assert result.active_turn == parent.turn_id
    statuses = await fetch(
        pool,
        "SELECT s.id, t.status, s.control FROM turns t JOIN sessions s ON s.id = t.session_id"
        " WHERE t.id IN (%s, %s)",
        parent.turn_id,
        child.child_turn_id,
    )
    assert {(UUID(str(row[0])), row[1], row[2]) for row in statuses} == {
        (parent.session_id, "running", "cancel"),  # asked of its live worker
        (child.child_id, "cancelled", None),  # queued: ended in the database
    }
    # Once, not twice: the ended try wrote nothing.
    requested = await fetch(
        pool,
        "SELECT count(*) FROM events WHERE session_id = %s AND kind = 'control.requested'",
        parent.session_id,
    )
    assert requested == [(1,)]


async def test_postgresql_s_deadlock_error_is_typed(db: ScratchTarget) -> None:
    """``Deadlocked``: a ``DatabaseError`` (the API's 503, retry later), the cause kept."""
    async with await AsyncConnection.connect(db.conninfo) as one:
        with pytest.raises(Deadlocked) as raised, translated("probe"):
            await one.execute(
                "DO $$ BEGIN RAISE EXCEPTION 'made up' USING ERRCODE = 'deadlock_detected'; END $$"
            )
    assert isinstance(raised.value, DatabaseError)
    assert isinstance(raised.value.__cause__, pg_errors.DeadlockDetected)
    assert "operation=probe" in str(raised.value)
