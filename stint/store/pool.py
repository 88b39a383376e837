"""Connection pools whose connections carry the schema, the deadlines and a role name.

Every connection Stint opens goes through here, so every statement has a
deadline (statement, lock and idle-in-transaction timeouts) and an
``application_name`` that tells an operator which part of a worker holds it.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from stint.store.config import StoreConfig
from stint.store.translate import translated

__all__ = ["Pool", "connect", "open_pool", "session_settings"]

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


def _ms(seconds: float) -> sql.Literal:
    return sql.Literal(f"{round(seconds * 1000)}ms")


def session_settings(config: StoreConfig) -> sql.Composed:
    """The SET statements every connection runs once, composed with identifiers."""
    return sql.SQL(
        "SET search_path TO {schema}; SET statement_timeout = {st}; SET lock_timeout = {lt}; "
        "SET idle_in_transaction_session_timeout = {it}"
    ).format(
        schema=sql.Identifier(config.schema),
        st=_ms(config.statement_timeout),
        lt=_ms(config.lock_timeout),
        it=_ms(config.idle_in_transaction_timeout),
    )


def _connect_kwargs(config: StoreConfig, role: str) -> dict[str, Any]:
    return {
        "autocommit": True,
        "application_name": role,
        "connect_timeout": max(1, round(config.connect_timeout)),
    }


async def connect(config: StoreConfig, role: str) -> AsyncConnection[TupleRow]:
    """One configured autocommit connection outside any pool (listener, migrator, CLI)."""
    with translated(f"connect {role}"):
        conn = await AsyncConnection.connect(config.conninfo, **_connect_kwargs(config, role))
        try:
            await conn.execute(session_settings(config))
        except BaseException:
            await conn.close()
            raise
    return conn


async def open_pool(config: StoreConfig, role: str, *, min_size: int, max_size: int) -> Pool:
    """Open a pool and wait until its first connection works."""
    settings = session_settings(config)

    async def configure(conn: AsyncConnection[TupleRow]) -> None:
        await conn.execute(settings)

    pool: Pool = AsyncConnectionPool(
        config.conninfo,
        min_size=min_size,
        max_size=max_size,
        kwargs=_connect_kwargs(config, role),
        configure=configure,
        open=False,
        name=role,
        timeout=config.connect_timeout,
    )
    with translated(f"open pool {role}"):
        try:
            await pool.open(wait=True, timeout=config.connect_timeout)
        except BaseException:
            await pool.close()
            raise
    return pool
