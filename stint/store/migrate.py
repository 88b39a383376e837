"""Forward-only schema migrations: numbered SQL files, each applied once, in order.

Each file runs in its own transaction under a transaction-level advisory lock
keyed by the schema, so workers that start together never race: the first
applies, the others wait, then find nothing left to do. Applied files are
recorded with a SHA-256 checksum; a file changed after it was applied stops the
runner, because the database no longer matches what the code believes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.errors import MigrationChecksumMismatch, MigrationError
from stint.store.fetch import fetch_all, fetch_one
from stint.store.pool import Pool, connect
from stint.store.queries import query
from stint.store.translate import guarded, translated

__all__ = [
    "Migration",
    "applied_migrations",
    "migrate",
    "migration_files",
    "migrations_pending",
]

_FILE_NAME = re.compile(r"(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    """One numbered migration file."""

    version: int
    name: str
    checksum: str
    text: str = ""

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def _migrations_dir() -> Path:
    """Inside a wheel the files ship as ``stint/store/_migrations``; in a checkout they
    are the top-level ``migrations/`` folder."""
    packaged = Path(__file__).with_name("_migrations")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def migration_files(directory: Path | None = None) -> list[Migration]:
    """The migration files in version order; refuses gaps and stray names."""
    folder = directory or _migrations_dir()
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _FILE_NAME.fullmatch(path.name)
        if not match:
            raise MigrationError("migration file name must look like 0001_name.sql", file=path.name)
        data = path.read_bytes()
        found.append(
            Migration(
                version=int(match["version"]),
                name=match["name"],
                checksum=hashlib.sha256(data).hexdigest(),
                text=data.decode("utf-8"),
            )
        )
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise MigrationError(
                "migration versions must be 1..N without gaps", file=migration.label
            )
    if not found:
        raise MigrationError("no migration files found", folder=str(folder))
    return found


def _check_applied(applied: list[Migration], known: dict[int, Migration]) -> None:
    for row in applied:
        mine = known.get(row.version)
        if mine is None:
            raise MigrationError(
                "the database has a migration this version of Stint does not know; "
                "upgrade Stint before running it against this schema",
                migration=row.label,
            )
        if mine.checksum != row.checksum:
            raise MigrationChecksumMismatch(
                "an applied migration file was changed after it was applied; restore the "
                "file or write a new numbered migration instead",
                migration=row.label,
                recorded=row.checksum[:12],
                on_disk=mine.checksum[:12],
            )


@dataclass(frozen=True)
class _Present:
    present: bool


@dataclass(frozen=True)
class _Applied:
    version: int
    name: str
    checksum: str


async def migrations_pending(config: StoreConfig, pool: Pool) -> list[str]:
    """The migrations this code knows that the database has not applied (a
    readiness check: a plain read through ``pool``, no lock and no DDL, so a
    role without CREATE rights can ask). Raises like ``migrate`` when the
    database has an unknown or changed migration."""
    files = migration_files()
    async with guarded("migrations_pending", config), pool.connection() as conn:
        table = await fetch_one(conn, _Present, "migrations_table_exists")
        rows = await fetch_all(conn, _Applied, "migrations_applied") if table.present else []
    applied = [Migration(version=r.version, name=r.name, checksum=r.checksum) for r in rows]
    _check_applied(applied, {m.version: m for m in files})
    versions = {m.version for m in applied}
    return [m.label for m in files if m.version not in versions]


async def _locked_applied(conn: AsyncConnection[TupleRow], schema: str) -> list[Migration]:
    """Inside an open transaction: take the lock, make sure the table exists, read it."""
    await conn.execute(query("migrations_limits"))
    await conn.execute(query("migrations_lock"), {"schema": schema})
    await conn.execute(
        sql.SQL(query("migrations_ensure_table")).format(schema=sql.Identifier(schema))
    )
    cur = await conn.execute(query("migrations_applied"))
    return [Migration(version=v, name=n, checksum=c) for v, n, c in await cur.fetchall()]


async def migrate(config: StoreConfig, directory: Path | None = None) -> list[Migration]:
    """Apply every pending migration; return the ones this call applied."""
    files = migration_files(directory)
    known = {m.version: m for m in files}
    done: list[Migration] = []
    conn = await connect(config, ROLE_CLI)
    try:
        while True:
            with translated("migrate"):
                async with conn.transaction():
                    applied = await _locked_applied(conn, config.schema)
                    _check_applied(applied, known)
                    versions = {m.version for m in applied}
                    pending = [m for m in files if m.version not in versions]
                    if not pending:
                        return done
                    nxt = pending[0]
                    await conn.execute(nxt.text)  # a shipped file, trusted like a literal
                    await conn.execute(
                        query("migrations_record"),
                        {"version": nxt.version, "name": nxt.name, "checksum": nxt.checksum},
                    )
            done.append(nxt)
    finally:
        await conn.close()


async def applied_migrations(config: StoreConfig) -> list[Migration]:
    """What the database records as applied (empty when the schema is new)."""
    conn = await connect(config, ROLE_CLI)
    try:
        with translated("read migrations"):
            async with conn.transaction():
                return await _locked_applied(conn, config.schema)
    finally:
        await conn.close()
