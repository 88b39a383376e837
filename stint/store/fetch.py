"""Run one named statement and read its rows as frozen dataclasses.

Every statement the store runs goes through here (or through the batcher,
which sends the same numbered text), so a statement's columns are always
matched to a row class by name (``class_row``), never by position, and its
text is converted to ``$n`` placeholders once per process, not per execution
(see ``stint.store.queries``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from psycopg import AsyncConnection, AsyncRawCursor
from psycopg.rows import AsyncRowFactory, Row, TupleRow, class_row, tuple_row

from stint.store.interleave import current_gate
from stint.store.queries import numbered

__all__ = ["execute", "fetch_all", "fetch_one", "fetch_optional", "run_numbered"]

R = TypeVar("R")


async def run_numbered(
    conn: AsyncConnection[TupleRow],
    name: str,
    params: Mapping[str, Any],
    row_factory: AsyncRowFactory[Row],
    *,
    interleave: bool = True,
) -> AsyncRawCursor[Row]:
    """Send statement ``name`` with ``params``; the cursor holds its result.

    ``interleave=False`` inside a pipeline: the batch was one interleaving point."""
    if interleave and (gate := current_gate()) is not None:
        await gate(name)
    statement = numbered(name)
    cur = AsyncRawCursor(conn, row_factory=row_factory)
    await cur.execute(statement.encoded, statement.values(params))
    return cur


async def execute(
    conn: AsyncConnection[TupleRow], name: str, /, **params: Any
) -> AsyncRawCursor[TupleRow]:
    """Run statement ``name``; its rows, if any, as tuples."""
    return await run_numbered(conn, name, params, tuple_row)


async def fetch_all(
    conn: AsyncConnection[TupleRow], row: type[R], name: str, /, **params: Any
) -> list[R]:
    """Every row of statement ``name``."""
    cur = await run_numbered(conn, name, params, class_row(row))
    return await cur.fetchall()


async def fetch_optional(
    conn: AsyncConnection[TupleRow], row: type[R], name: str, /, **params: Any
) -> R | None:
    """The first row of statement ``name``, or None when it returned none."""
    cur = await run_numbered(conn, name, params, class_row(row))
    return await cur.fetchone()


async def fetch_one(
    conn: AsyncConnection[TupleRow], row: type[R], name: str, /, **params: Any
) -> R:
    """The row of a statement that always returns one (an aggregate, an INSERT)."""
    found = await fetch_optional(conn, row, name, **params)
    if found is None:
        raise AssertionError(f"statement {name} returned no row")
    return found
