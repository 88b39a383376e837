"""Translate psycopg errors into the store's error tree (the only place that does)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolTimeout

from stint.store.config import StoreConfig
from stint.store.errors import (
    ConnectionFailed,
    DatabaseError,
    InvalidInput,
    LockTimeout,
    QueryTimeout,
)

__all__ = ["guarded", "translated"]


def _server_message(exc: psycopg.Error) -> str:
    primary = exc.diag.message_primary
    if primary:
        return primary
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _is_bad_value(exc: psycopg.Error) -> bool:
    """A value PostgreSQL cannot hold: SQLSTATE class 22 (data exception: out of
    range, NUL in text or jsonb), or the driver refusing to send one (a
    DataError without SQLSTATE, e.g. NUL in a text parameter). The caller's
    input was at fault, not the connection."""
    state = exc.sqlstate
    return (state is not None and state.startswith("22")) or (
        state is None and isinstance(exc, psycopg.DataError)
    )


def _is_connection_loss(exc: psycopg.Error) -> bool:
    """Connection-level failures: no SQLSTATE, class 08, or an operator/crash shutdown."""
    if isinstance(exc, psycopg.InterfaceError):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state.startswith("57P")


@contextmanager
def translated(operation: str) -> Iterator[None]:
    """Re-raise driver errors from the block as typed store errors.

    The original stays as ``__cause__``. Messages carry the operation name and
    the server's primary message, never the connection string.
    """
    try:
        yield
    except pg_errors.QueryCanceled as exc:
        raise QueryTimeout(operation=operation, server=_server_message(exc)) from exc
    except pg_errors.LockNotAvailable as exc:
        raise LockTimeout(operation=operation, server=_server_message(exc)) from exc
    except PoolTimeout as exc:
        raise ConnectionFailed(
            "no database connection became available in time", operation=operation
        ) from exc
    except psycopg.Error as exc:
        if _is_bad_value(exc):
            raise InvalidInput(
                "PostgreSQL cannot hold a value of this request; nothing was written",
                operation=operation,
                server=_server_message(exc),
            ) from exc
        if _is_connection_loss(exc):
            raise ConnectionFailed(operation=operation, server=_server_message(exc)) from exc
        raise DatabaseError(
            operation=operation, sqlstate=exc.sqlstate, server=_server_message(exc)
        ) from exc


@asynccontextmanager
async def guarded(operation: str, config: StoreConfig) -> AsyncIterator[None]:
    """``translated`` plus a client-side deadline.

    ``statement_timeout`` is enforced by the server, so it cannot help when the
    server stops answering (a partition, a blackhole): then the client's own
    deadline (``StoreConfig.client_deadline``) ends the wait. psycopg first
    tries to cancel the statement, which may add a few seconds in a blackhole.
    """
    try:
        with translated(operation):
            async with asyncio.timeout(config.client_deadline):
                yield
    except TimeoutError as exc:
        raise QueryTimeout(
            "no answer from PostgreSQL before the client deadline",
            operation=operation,
            deadline_s=config.client_deadline,
        ) from exc
