"""Isolated, disposable Stint databases for tests and load-test cases.

Two ways to isolate: on a throwaway server we own, each target is a database
copied from a migrated template database (fast: a file copy inside PostgreSQL);
on a server we were only given a URL for, each target is a schema of its own,
migrated on creation and dropped afterwards, and nothing else is touched.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.migrate import migrate
from stint.store.queries import query
from stint.store.translate import translated

__all__ = ["ScratchDatabases", "ScratchSchemas", "ScratchTarget", "reset_schema"]


@dataclass(frozen=True)
class ScratchTarget:
    """One isolated place to run Stint: its config, and what to drop afterwards."""

    config: StoreConfig
    database: str | None = None

    @property
    def conninfo(self) -> str:
        return self.config.conninfo


def _with_dbname(conninfo: str, dbname: str) -> str:
    params = conninfo_to_dict(conninfo)
    params["dbname"] = dbname
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


async def _admin(conninfo: str, statement: str, **names: str) -> None:
    composed = sql.SQL(query(statement)).format(**{k: sql.Identifier(v) for k, v in names.items()})
    with translated(statement):
        async with await AsyncConnection.connect(
            conninfo, autocommit=True, application_name=ROLE_CLI
        ) as conn:
            await conn.execute(composed)


class ScratchDatabases:
    """Per-target databases copied from one migrated template database."""

    def __init__(self, base: StoreConfig, *, template: str = "stint_template") -> None:
        self._base = base
        self._template = template

    async def prepare(self) -> None:
        """Create and migrate the template database (once per server)."""
        await _admin(self._base.conninfo, "admin_drop_database", name=self._template)
        await _admin(self._base.conninfo, "admin_create_database", name=self._template)
        await migrate(
            replace(self._base, conninfo=_with_dbname(self._base.conninfo, self._template))
        )

    async def create(self) -> ScratchTarget:
        name = f"stint_{secrets.token_hex(6)}"
        await _admin(
            self._base.conninfo,
            "admin_create_database_from_template",
            name=name,
            template=self._template,
        )
        config = replace(self._base, conninfo=_with_dbname(self._base.conninfo, name))
        return ScratchTarget(config=config, database=name)

    async def drop(self, target: ScratchTarget) -> None:
        if target.database:
            await _admin(self._base.conninfo, "admin_drop_database", name=target.database)


class ScratchSchemas:
    """Per-target schemas in a database we do not own; only our schemas are dropped."""

    def __init__(self, base: StoreConfig) -> None:
        self._base = base

    async def prepare(self) -> None:
        """Nothing to prepare: each schema is migrated when it is created."""

    async def create(self) -> ScratchTarget:
        config = replace(self._base, schema=f"stint_t_{secrets.token_hex(6)}")
        await migrate(config)
        return ScratchTarget(config=config)

    async def drop(self, target: ScratchTarget) -> None:
        await _admin(target.conninfo, "admin_drop_schema", name=target.config.schema)


async def reset_schema(config: StoreConfig) -> None:
    """Drop ``config.schema`` with everything in it, then migrate it afresh."""
    await _admin(config.conninfo, "admin_drop_schema", name=config.schema)
    await migrate(config)
