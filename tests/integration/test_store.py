from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.config import ROLE_WORKER, StoreConfig
from stint.store.errors import (
    ConnectionFailed,
    DatabaseError,
    InvalidInput,
    LockTimeout,
    QueryTimeout,
)
from stint.store.pool import Pool, open_pool
from stint.store.translate import translated


async def test_pooled_connections_carry_schema_timeouts_and_role(db: ScratchTarget) -> None:
    config = replace(
        db.config, statement_timeout=1.5, lock_timeout=0.25, idle_in_transaction_timeout=7
    )
    pool = await open_pool(config, ROLE_WORKER, min_size=2, max_size=2)
    try:
        for _ in range(2):
            async with pool.connection() as conn:
                shown = {}
                for name in (
                    "search_path",
                    "statement_timeout",
                    "lock_timeout",
                    "idle_in_transaction_session_timeout",
                    "application_name",
                ):
                    cur = await conn.execute("SELECT current_setting(%s)", [name])
                    row = await cur.fetchone()
                    assert row is not None
                    shown[name] = row[0]
        assert shown == {
            "search_path": db.config.schema,
            "statement_timeout": "1500ms",
            "lock_timeout": "250ms",
            "idle_in_transaction_session_timeout": "7s",
            "application_name": "stint-worker-pool",
        }
    finally:
        await pool.close()


async def test_statement_timeout_is_translated(db: ScratchTarget) -> None:
    pool = await open_pool(
        replace(db.config, statement_timeout=0.1), ROLE_WORKER, min_size=1, max_size=1
    )
    try:
        with pytest.raises(QueryTimeout) as caught, translated("sleepy"):
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_sleep(5)")
        assert isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
        assert "sleepy" in str(caught.value)
    finally:
        await pool.close()


async def test_lock_timeout_is_translated(db: ScratchTarget, pool: Pool) -> None:
    short = await open_pool(
        replace(db.config, lock_timeout=0.1), ROLE_WORKER, min_size=1, max_size=1
    )
    try:
        async with pool.connection() as holder, holder.transaction():
            await holder.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(LockTimeout), translated("blocked"):
                async with short.connection() as conn:
                    await conn.execute("SELECT count(*) FROM sessions")
    finally:
        await short.close()


async def test_constraint_violation_is_a_database_error(pool: Pool) -> None:
    with pytest.raises(DatabaseError) as caught, translated("bad insert"):
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO sessions (status) VALUES ('sleeping')")
    assert caught.value.context["sqlstate"] == "23514"


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        ("INSERT INTO sessions (status) VALUES ('sleeping')", "sessions_status_check"),
        ("INSERT INTO sessions (status, depth) VALUES ('idle', -1)", "sessions_depth_check"),
        ("INSERT INTO sessions (status) VALUES ('ready')", "sessions_check2"),
        ("INSERT INTO sessions (status) VALUES ('running')", "sessions_check"),
        (
            "WITH s AS (INSERT INTO sessions DEFAULT VALUES RETURNING id) "
            "INSERT INTO turns (session_id, seq, idempotency_key, input, traceparent) "
            "SELECT id, 1, 'k', '{}', 'not-a-traceparent' FROM s",
            "turns_traceparent_check",
        ),
        (
            "WITH s AS (INSERT INTO sessions DEFAULT VALUES RETURNING id) "
            "INSERT INTO events (session_id, seq, kind, payload) "
            "SELECT id, 1, 'turn.unheard_of', '{}' FROM s",
            "events_kind_check",
        ),
        (
            "INSERT INTO quota_scopes (scope, rpm, tpm, concurrency, window_seconds) "
            "VALUES ('a scope with spaces', 1, 1, 1, 60)",
            "quota_scopes_scope_check",
        ),
    ],
)
async def test_row_checks_name_the_condition_a_row_breaks(
    pool: Pool, statement: str, constraint: str
) -> None:
    """The per-turn tables' checks run in one function per table (migration 0016) and
    still fail as a CHECK constraint does: SQLSTATE 23514, the condition's own name."""
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        async with pool.connection() as conn:
            await conn.execute(statement)
    assert caught.value.diag.constraint_name == constraint
    assert f'violates check constraint "{constraint}"' in str(caught.value)


@pytest.mark.parametrize(
    ("statement", "value"),
    [
        ("SELECT %s::text", "a\x00b"),  # refused by the driver, no SQLSTATE
        ("SELECT %s::real", 1e-300),  # 22003 numeric value out of range
        ("SELECT %s::jsonb", '"\\u0000"'),  # 22P05 untranslatable character
    ],
)
async def test_a_value_postgres_cannot_hold_is_invalid_input(
    pool: Pool, statement: str, value: object
) -> None:
    """Not a lost connection (which callers retry) nor a server fault: bad input."""
    with pytest.raises(InvalidInput) as caught, translated("bad value"):
        async with pool.connection() as conn:
            await conn.execute(statement, [value])
    assert "bad value" in str(caught.value)


async def test_unreachable_server_fails_without_leaking_the_password() -> None:
    config = StoreConfig(
        conninfo="host=127.0.0.1 port=9 dbname=x user=u password=hunter2", connect_timeout=2
    )
    with pytest.raises(ConnectionFailed) as caught:
        await open_pool(config, ROLE_WORKER, min_size=1, max_size=1)
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(caught.value.context)
