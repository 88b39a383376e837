"""Read a schema's shape from the PostgreSQL catalog, for the migration test."""

from __future__ import annotations

from typing import Any

from stint.store.pool import Pool

_COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')
FROM information_schema.columns
WHERE table_schema = %(schema)s
ORDER BY table_name, ordinal_position
"""

_CONSTRAINTS = """
SELECT rel.relname, con.contype, pg_get_constraintdef(con.oid)
FROM pg_constraint con
JOIN pg_class rel ON rel.oid = con.conrelid
JOIN pg_namespace ns ON ns.oid = rel.relnamespace
WHERE ns.nspname = %(schema)s
ORDER BY 1, 2, 3
"""

_INDEXES = """
SELECT tablename, indexname, regexp_replace(indexdef, ' ON [a-z_]+\\.', ' ON ')
FROM pg_indexes
WHERE schemaname = %(schema)s
ORDER BY 1, 2
"""

# The schema's functions, by name: the tables' row checks live in them (0016).
_FUNCTIONS = """
SELECT p.proname, pg_get_function_identity_arguments(p.oid), p.prosrc
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
ORDER BY 1, 2
"""

_UNLOGGED = """
SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relpersistence <> 'p'
"""


# Foreign keys whose referencing columns lead no index of their table: deleting a
# referenced row (retention) then checks the key with a scan of the whole table.
_UNINDEXED_KEYS = """
SELECT con.conrelid::regclass::text, con.conname
FROM pg_constraint con
JOIN pg_namespace ns ON ns.oid = con.connamespace
WHERE ns.nspname = %(schema)s AND con.contype = 'f'
  AND NOT EXISTS (
      SELECT FROM pg_index i
      WHERE i.indrelid = con.conrelid
        AND (SELECT array_agg(k ORDER BY k) FROM unnest(con.conkey) AS k)
            = (SELECT array_agg(k ORDER BY k)
               FROM unnest((i.indkey::int2[])[0:cardinality(con.conkey) - 1]) AS k))
ORDER BY 1, 2
"""


async def unindexed_foreign_keys(pool: Pool, schema: str) -> list[tuple[str, str]]:
    """(table, constraint) of each foreign key that no index can check."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(_UNINDEXED_KEYS, {"schema": schema})).fetchall()
    return [(table, name) for table, name in rows]


async def describe(pool: Pool, schema: str) -> dict[str, Any]:
    """Tables with their columns, constraints and indexes, as plain lists, and the
    schema's functions with their source, by name."""
    params = {"schema": schema}
    async with pool.connection() as conn:
        columns = await (await conn.execute(_COLUMNS, params)).fetchall()
        constraints = await (await conn.execute(_CONSTRAINTS, params)).fetchall()
        indexes = await (await conn.execute(_INDEXES, params)).fetchall()
        unlogged = await (await conn.execute(_UNLOGGED, params)).fetchall()
        functions = await (await conn.execute(_FUNCTIONS, params)).fetchall()
    tables: dict[str, Any] = {}
    for table, column, dtype, nullable, default in columns:
        entry = tables.setdefault(table, {"columns": [], "constraints": [], "indexes": []})
        entry["columns"].append(
            f"{column} {dtype}{'' if nullable == 'YES' else ' NOT NULL'}"
            + (f" DEFAULT {default}" if default else "")
        )
    for table, kind, definition in constraints:
        tables[table]["constraints"].append(f"{kind}: {definition}")
    for table, name, definition in indexes:
        tables[table]["indexes"].append(f"{name}: {definition.replace(f'{schema}.', '')}")
    return {
        "tables": tables,
        "unlogged": [r[0] for r in unlogged],
        "functions": {f"{name}({arguments})": source for name, arguments, source in functions},
    }
