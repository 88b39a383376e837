"""Connection pools whose connections carry the schema, the deadlines and a role name.

Every connection Stint opens goes through here, so every statement has a
deadline (statement, lock and idle-in-transaction timeouts) and an
``application_name`` that tells an operator which part of a worker holds it.

After an outage the pools come back fast and hand out no dead connection:

- a lost connection is replaced by attempts at most ``reconnect_max`` seconds
  apart, for as long as it takes (psycopg_pool's own backoff doubles without a
  bound and gives up after five minutes: a 70 s outage left a worker idle for
  48 s after PostgreSQL was back);
- a connection is checked on its way out of the pool when its socket has
  something to say while idle (a server that restarted or killed it sent its
  goodbye and closed: one ``poll`` call finds it, no round trip), and every
  connection older than a dead one found that way is checked with a round trip,
  so the first requests after a restart do not fail on connections that died
  with the old server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import weakref
from collections.abc import Callable
from typing import Any

from psycopg import AsyncConnection, OperationalError, sql
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from stint.store.config import StoreConfig
from stint.store.errors import ConnectionFailed, ConnectionRejected
from stint.store.fetch import execute
from stint.store.translate import translated

__all__ = [
    "Pool",
    "StintPool",
    "connect",
    "open_pool",
    "ping",
    "session_settings",
    "wait_for_database",
    "wait_reachable",
]

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

log = logging.getLogger("stint.store")

_RETRY_FIRST_S = 0.1
_NEVER_GIVE_UP_S = 10 * 365 * 86400.0  # a pool keeps trying to reconnect for good


class _CappedAttempt(AttemptWithBackoff):
    """psycopg_pool's reconnect backoff, starting at 0.1 s and never above ``cap``."""

    INITIAL_DELAY = _RETRY_FIRST_S

    def __init__(self, *, timeout: float, cap: float) -> None:
        super().__init__(timeout=timeout)
        self._cap = cap

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self._cap)


def _has_input(conn: AsyncConnection[TupleRow]) -> bool:
    """Has an idle connection's server sent something (an error, a close)?"""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError, OperationalError):
        return True  # no usable socket: the round-trip check decides


class StintPool(AsyncConnectionPool[AsyncConnection[TupleRow]]):
    """A pool that reconnects at most ``reconnect_max`` apart, forever, and
    checks on borrow the connections an outage may have killed (module doc)."""

    def __init__(self, conninfo: str, *, reconnect_max: float, **kwargs: Any) -> None:
        self._reconnect_max = reconnect_max
        self._generation = 0  # bumped each time a borrowed connection is found dead
        self._born: weakref.WeakKeyDictionary[AsyncConnection[TupleRow], int] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__(
            conninfo, check=self._check_on_borrow, reconnect_timeout=_NEVER_GIVE_UP_S, **kwargs
        )

    def born(self, conn: AsyncConnection[TupleRow]) -> None:
        """Note a new connection's generation (called when it is configured)."""
        self._born[conn] = self._generation

    async def _check_on_borrow(self, conn: AsyncConnection[TupleRow]) -> None:
        stale = self._born.get(conn, -1) < self._generation
        if not stale and not _has_input(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if not stale:  # the first dead one: every older one is suspect now
                self._generation += 1
                log.info("pool %s: a pooled connection died; checking the older ones", self.name)
            raise
        self._born[conn] = self._generation

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        # psycopg_pool starts each reconnect with a fresh attempt and reuses it on
        # every retry: ours caps the delay between them.
        if attempt is None:
            attempt = _CappedAttempt(timeout=self.reconnect_timeout, cap=self._reconnect_max)
        await super()._add_connection(attempt, growing=growing)


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
            delay = min(delay * 2, config.reconnect_max)
        else:
            await conn.close()
            return


async def wait_for_database(
    config: StoreConfig,
    role: str,
    *,
    stop: asyncio.Event,
    on_failure: Callable[[str], None] = lambda _: None,
    log_every: float = 10.0,
) -> bool:
    """Connect once, retrying for as long as it takes, until the database answers
    (True) or ``stop`` is set (False): a worker started during an outage waits
    for the database instead of exiting. A rejection (bad password, missing
    database or role) raises ``ConnectionRejected`` at once: waiting cannot help.
    One warning when the wait begins and one every ``log_every`` seconds;
    ``on_failure`` hears every attempt's reason (for the readiness probe)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    next_log = started
    delay = _RETRY_FIRST_S
    while not stop.is_set():
        try:
            conn = await connect(config, role)
        except ConnectionRejected:
            raise
        except ConnectionFailed as exc:
            reason = str(exc.context.get("server", exc.message))
            on_failure(reason)
            now = loop.time()
            if now >= next_log:
                log.warning(
                    "waiting for PostgreSQL (%.0fs so far; SIGTERM stops): %s",
                    now - started,
                    reason,
                    extra={"waited_s": round(now - started, 1)},
                )
                next_log = now + log_every
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
            delay = min(delay * 2, config.reconnect_max)
        else:
            await conn.close()
            waited = loop.time() - started
            if waited > 1.0:
                log.info("PostgreSQL answered after %.1fs", waited, extra={"waited_s": waited})
            return True
    return False


async def open_pool(
    config: StoreConfig, role: str, *, min_size: int, max_size: int, wait: bool = True
) -> Pool:
    """Open a pool once the server is known to accept us, and wait for its first connection.
    ``wait=False`` (with ``min_size=0``): connect nothing now, each connection when first
    needed; a service on such a pool meets an unreachable or full server as a failed
    statement it retries, not as a failed start."""
    if wait:
        await wait_reachable(config, role)
    settings = session_settings(config)

    async def configure(conn: AsyncConnection[TupleRow]) -> None:
        await conn.execute(settings)
        pool.born(conn)

    pool = StintPool(
        config.conninfo,
        reconnect_max=config.reconnect_max,
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
            await pool.open(wait=wait, timeout=config.connect_timeout)
        except BaseException:
            await pool.close()
            raise
    return pool


async def ping(pool: Pool, *, within: float) -> str | None:
    """Does the database answer through ``pool`` within ``within`` seconds? None
    when it does, else why not (for readiness probes: the truth within a second)."""
    try:
        with translated("ping"):
            async with asyncio.timeout(within), pool.connection(timeout=within) as conn:
                await execute(conn, "ping")
    except TimeoutError:
        return f"the database did not answer within {within:g}s"
    except Exception as exc:  # a readiness answer, never a crash
        return str(exc)
    return None
