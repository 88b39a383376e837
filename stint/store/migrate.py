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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.errors import DatabaseError, MigrationChecksumMismatch, MigrationError
from stint.store.fetch import execute, fetch_one
from stint.store.pool import Pool, connect
from stint.store.queries import query
from stint.store.translate import guarded, translated

__all__ = [
    "Migration",
    "applied_migrations",
    "check_schema",
    "migrate",
    "migration_files",
    "migrations_pending",
]

_INSUFFICIENT_PRIVILEGE = "42501"
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
class _SchemaState:
    schema_exists: bool
    table_exists: bool
    owned: bool


def _composed(name: str, **identifiers: str) -> sql.Composed:
    return sql.SQL(query(name)).format(**{k: sql.Identifier(v) for k, v in identifiers.items()})


async def _locked_applied(
    conn: AsyncConnection[TupleRow], schema: str, *, create: bool
) -> tuple[list[Migration], _SchemaState]:
    """Inside an open transaction: take the lock, read what is applied.

    With ``create``, a missing schema or migrations table is created; without,
    nothing is written and a missing table reads as nothing applied. DDL runs
    only when something is missing, so a role without CREATE on the database
    (the schema owner) or on the schema (the app role) can run a no-op.
    """
    await execute(conn, "migrations_limits")
    await execute(conn, "migrations_lock", schema=schema)
    state = await fetch_one(conn, _SchemaState, "migrations_schema_state", schema=schema)
    if not state.table_exists:
        if not create:
            return [], state
        if not state.schema_exists:
            with _privileges("create the schema", schema=schema):
                await conn.execute(_composed("migrations_create_schema", schema=schema))
        with _privileges("create the migrations table", schema=schema):
            await conn.execute(_composed("migrations_create_table", schema=schema))
        state = _SchemaState(schema_exists=True, table_exists=True, owned=True)
    return await _applied(conn), state


@contextmanager
def _privileges(doing: str, **context: str) -> Iterator[None]:
    """A permission failure while migrating says which role must do what instead."""
    try:
        with translated("migrate"):
            yield
    except DatabaseError as exc:
        if exc.context.get("sqlstate") != _INSUFFICIENT_PRIVILEGE:
            raise
        raise MigrationError(
            f"this role cannot {doing}: {exc.context.get('server')}; run `stint migrate` as "
            "the schema's owner role (a superuser creates the schema once: CREATE SCHEMA "
            "<schema> AUTHORIZATION <owner>)",
            **context,
        ) from exc


async def migrate(
    config: StoreConfig, directory: Path | None = None, *, app_role: str | None = None
) -> list[Migration]:
    """Apply every pending migration; return the ones this call applied.

    ``app_role``: afterwards, grant that role the worker/API privileges (DML on
    Stint's tables, nothing else), when this role owns the schema.
    """
    files = migration_files(directory)
    known = {m.version: m for m in files}
    done: list[Migration] = []
    conn = await connect(config, ROLE_CLI)
    try:
        while True:
            with translated("migrate"):
                async with conn.transaction():
                    applied, state = await _locked_applied(conn, config.schema, create=True)
                    _check_applied(applied, known)
                    versions = {m.version for m in applied}
                    pending = [m for m in files if m.version not in versions]
                    if not pending:
                        if app_role and state.owned:
                            with _privileges("grant the app role", role=app_role):
                                await conn.execute(
                                    _composed(
                                        "migrations_grant_app_role",
                                        schema=config.schema,
                                        role=app_role,
                                    )
                                )
                        return done
                    nxt = pending[0]
                    with _privileges("apply migrations", migration=nxt.label):
                        await conn.execute(nxt.text)  # a shipped file, trusted like a literal
                    await execute(
                        conn,
                        "migrations_record",
                        version=nxt.version,
                        name=nxt.name,
                        checksum=nxt.checksum,
                    )
            done.append(nxt)
    finally:
        await conn.close()


async def applied_migrations(config: StoreConfig) -> list[Migration]:
    """What the database records as applied (empty when the schema is new). Writes nothing."""
    conn = await connect(config, ROLE_CLI)
    try:
        with translated("read migrations"):
            async with conn.transaction():
                applied, _ = await _locked_applied(conn, config.schema, create=False)
                return applied
    finally:
        await conn.close()


async def check_schema(config: StoreConfig, directory: Path | None = None) -> list[Migration]:
    """Refuse to run on a schema that is behind (or ahead of) this version of Stint.

    For workers started with auto-migrate off (typically under a role that may
    not migrate): the error names the first missing migration.
    """
    files = migration_files(directory)
    applied = await applied_migrations(config)
    pending = _pending(files, applied)
    if pending:
        raise MigrationError(
            f"schema {config.schema} is missing migration {pending[0].label}"
            + (f" (and {len(pending) - 1} more)" if len(pending) > 1 else "")
            + "; run `stint migrate` as the schema's owner role, or start with "
            "STINT_AUTO_MIGRATE=true",
        )
    return applied


async def migrations_pending(config: StoreConfig, pool: Pool) -> list[str]:
    """The migrations this code knows that the database has not applied (a
    readiness check: a plain read through ``pool``, no lock and no DDL, so a
    role without CREATE rights can ask). Raises like ``migrate`` when the
    database has an unknown or changed migration."""
    files = migration_files()
    async with guarded("migrations_pending", config), pool.connection() as conn:
        state = await fetch_one(conn, _SchemaState, "migrations_schema_state", schema=config.schema)
        applied = await _applied(conn) if state.table_exists else []
    return [m.label for m in _pending(files, applied)]


def _pending(files: list[Migration], applied: list[Migration]) -> list[Migration]:
    """The files not applied yet; an unknown or changed applied migration raises."""
    _check_applied(applied, {m.version: m for m in files})
    versions = {m.version for m in applied}
    return [m for m in files if m.version not in versions]


async def _applied(conn: AsyncConnection[TupleRow]) -> list[Migration]:
    cur = await execute(conn, "migrations_applied")
    return [Migration(version=v, name=n, checksum=c) for v, n, c in await cur.fetchall()]
