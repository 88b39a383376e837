"""Connection pools whose connections carry the schema, the deadlines and a role name.

Every connection Stint opens goes through here, so every statement has a
deadline (statement, lock and idle-in-transaction timeouts) and an
``application_name`` that tells an operator which part of a worker holds it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from stint.store.config import StoreConfig
from stint.store.errors import ConnectionFailed, ConnectionRejected
from stint.store.translate import translated

__all__ = ["Pool", "connect", "open_pool", "session_settings", "wait_reachable"]

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

log = logging.getLogger("stint.store")

_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 2.0


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


async def wait_reachable(config: StoreConfig, role: str) -> None:
    """Connect once, retrying until ``connect_timeout`` only while retrying can help.

    A rejection (bad password, missing database or role, bad option) fails at
    once with the server's own reason; an unreachable or starting server is
    retried with one log line per attempt. Opening a pool first through here
    keeps psycopg_pool from logging a multi-line warning per failed attempt and
    then raising a bare "pool timeout".
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.connect_timeout
    delay = _RETRY_FIRST_S
    attempt = 0
    while True:
        attempt += 1
        try:
            conn = await connect(config, role)
        except ConnectionRejected:
            raise
        except ConnectionFailed as exc:
            if loop.time() + delay >= deadline:
                raise ConnectionFailed(
                    f"PostgreSQL was not reachable within {config.connect_timeout:g}s "
                    "(STINT_CONNECT_TIMEOUT)",
                    operation=f"connect {role}",
                    attempts=attempt,
                    last_error=exc.context.get("server", exc.message),
                ) from exc
            if attempt == 1:
                log.warning(
                    "PostgreSQL not reachable yet; retrying for up to %gs: %s",
                    config.connect_timeout,
                    exc,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_S)
        else:
            await conn.close()
            return


async def open_pool(config: StoreConfig, role: str, *, min_size: int, max_size: int) -> Pool:
    """Open a pool once the server is known to accept us, and wait for its first connection."""
    await wait_reachable(config, role)
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
