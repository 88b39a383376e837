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
    ConfigError,
    ConnectionFailed,
    ConnectionRejected,
    DatabaseError,
    Deadlocked,
    InvalidInput,
    LockTimeout,
    QueryTimeout,
)
from stint.store.redaction import mask_quoted

__all__ = ["conninfo_parsing", "guarded", "translated"]

# What the server (or libpq, before sending anything) says when a connection can
# never succeed as configured: retrying only delays the real cause. Anything else
# (refused, unreachable, starting up, too many clients) may pass, and is retried.
_REJECTIONS = (
    "password authentication failed",
    "authentication failed for user",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "is not permitted to log in",
    "permission denied for database",
    "invalid connection option",
    "invalid integer value",
    "invalid sslmode value",
    "invalid port number",
)


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


def _connection_message(exc: psycopg.Error) -> str:
    """libpq's whole connection complaint on one line (the last line alone is a hint)."""
    return mask_quoted(str(exc), None) or type(exc).__name__


def _is_rejection(exc: psycopg.Error) -> bool:
    """A connection attempt refused for good (connection errors carry no SQLSTATE)."""
    if not isinstance(exc, psycopg.OperationalError) or exc.sqlstate is not None:
        return False
    text = str(exc)
    return any(marker in text for marker in _REJECTIONS)


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
    except pg_errors.DeadlockDetected as exc:
        raise Deadlocked(operation=operation, server=_server_message(exc)) from exc
    except PoolTimeout as exc:
        raise ConnectionFailed(
            "no database connection became available in time", operation=operation
        ) from exc
    except psycopg.Error as exc:
        if _is_rejection(exc):
            raise ConnectionRejected(
                f"PostgreSQL refused the connection: {_connection_message(exc)}",
                operation=operation,
            ) from exc
        if _is_bad_value(exc):
            raise InvalidInput(
                "PostgreSQL cannot hold a value of this request; nothing was written",
                operation=operation,
                server=_server_message(exc),
            ) from exc
        if _is_connection_loss(exc):
            server = _connection_message(exc) if exc.sqlstate is None else _server_message(exc)
            raise ConnectionFailed(operation=operation, server=server) from exc
        raise DatabaseError(
            operation=operation, sqlstate=exc.sqlstate, server=_server_message(exc)
        ) from exc


@contextmanager
def conninfo_parsing(source: str, *, shown: str, password: str | None) -> Iterator[None]:
    """Turn libpq's refusal of a connection string into a ``ConfigError`` that
    names ``source`` and shows only ``shown`` (the string, password masked)."""
    try:
        yield
    except psycopg.ProgrammingError as exc:
        reason = mask_quoted(str(exc), password)
        raise ConfigError(f"{source} is malformed: {reason}", given=shown) from None


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
