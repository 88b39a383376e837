from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.config import ROLE_CLI
from stint.store.errors import MigrationChecksumMismatch, MigrationError
from stint.store.migrate import applied_migrations, migrate, migration_files
from stint.store.pool import Pool, open_pool
from tests.integration.catalog import describe, unindexed_foreign_keys

EXPECTED = Path(__file__).with_name("expected_schema.json")


async def test_schema_matches_the_expected_catalog(db: ScratchTarget, pool: Pool) -> None:
    """The migrated catalog is exactly the reviewed one in expected_schema.json.

    To change the schema, add a migration, then regenerate the file with
    STINT_WRITE_EXPECTED_SCHEMA=1 and review the diff.
    """
    actual = await describe(pool, db.config.schema)
    if os.environ.get("STINT_WRITE_EXPECTED_SCHEMA"):
        EXPECTED.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert actual == json.loads(EXPECTED.read_text())
    assert actual["unlogged"] == []
    assert set(actual["tables"]) == {
        "conversation_messages",
        "schema_migrations",
        "workers",
        "sessions",
        "turns",
        "events",
        "steps",
        "api_keys",
        "maintenance",
        "leaders",
        "stats_samples",
        "quota_scopes",
        "quota_reservations",
        "admission_limits",
        "dashboard_sessions",
        "schedules",
        "schedule_ticks",
        "webhook_endpoints",
        "webhook_deliveries",
        "waits",
        "signals",
        "children",
    }


async def test_every_foreign_key_is_checked_through_an_index(db: ScratchTarget, pool: Pool) -> None:
    """Retention deletes turns and sessions' history: a key without an index
    turns each deleted row into a scan of the referencing table (the scale soak
    found prune_turns timing out that way, the turns table never pruned)."""
    assert await unindexed_foreign_keys(pool, db.config.schema) == []


async def test_second_run_is_a_noop(db: ScratchTarget) -> None:
    assert await migrate(db.config) == []
    labels = [m.label for m in await applied_migrations(db.config)]
    assert labels == [m.label for m in migration_files()]


async def test_changed_checksum_is_refused(db: ScratchTarget, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(Path(__file__).parents[2] / "migrations", folder)
    config = replace(db.config, schema="edited")
    await migrate(config, folder)
    first = sorted(folder.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited after it was applied\n")
    with pytest.raises(MigrationChecksumMismatch, match="changed after it was applied"):
        await migrate(config, folder)


async def test_unknown_applied_migration_is_refused(db: ScratchTarget, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    only_first = migration_files()[0]
    (folder / f"{only_first.label}.sql").write_text(only_first.text)
    (folder / "0002_extra.sql").write_text("CREATE TABLE extra (x int);\n")
    config = replace(db.config, schema="newer")
    await migrate(config, folder)
    (folder / "0002_extra.sql").unlink()
    with pytest.raises(MigrationError, match="does not know"):
        await migrate(config, folder)


async def test_concurrent_migrators_apply_each_file_once(db: ScratchTarget) -> None:
    config = replace(db.config, schema="raced")
    results = await asyncio.gather(*(migrate(config) for _ in range(4)))
    applied = [m.label for result in results for m in result]
    assert sorted(applied) == [m.label for m in migration_files()]
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM schema_migrations")
            assert await cur.fetchone() == (len(migration_files()),)
    finally:
        await pool.close()


def test_bad_file_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "1_init.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"0001_name\.sql"):
        migration_files(tmp_path)
