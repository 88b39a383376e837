"""Run one named statement and read its rows as frozen dataclasses.

Every read in the store goes through these three, so a statement's columns
are always matched to a row class by name (``class_row``), never by position.
"""

from __future__ import annotations

from typing import Any, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import TupleRow, class_row

from stint.store.queries import query

__all__ = ["fetch_all", "fetch_one", "fetch_optional"]

R = TypeVar("R")


async def fetch_all(
    conn: AsyncConnection[TupleRow], row: type[R], name: str, **params: Any
) -> list[R]:
    """Every row of statement ``name``."""
    cur = conn.cursor(row_factory=class_row(row))
    await cur.execute(query(name), params or None)
    return await cur.fetchall()


async def fetch_optional(
    conn: AsyncConnection[TupleRow], row: type[R], name: str, **params: Any
) -> R | None:
    """The first row of statement ``name``, or None when it returned none."""
    cur = conn.cursor(row_factory=class_row(row))
    await cur.execute(query(name), params or None)
    return await cur.fetchone()


async def fetch_one(conn: AsyncConnection[TupleRow], row: type[R], name: str, **params: Any) -> R:
    """The row of a statement that always returns one (an aggregate, an INSERT)."""
    found = await fetch_optional(conn, row, name, **params)
    if found is None:
        raise AssertionError(f"statement {name} returned no row")
    return found
