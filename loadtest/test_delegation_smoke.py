"""A tiny delegation tree in the regular suite, so the benchmark's machinery cannot
rot: a root spawns 3 children in one statement, each spawns 2 grandchildren, on
1 worker x 4 slots; every node ends, no joining parent holds a slot, the checks
pass and the report renders each level."""

from __future__ import annotations

from pathlib import Path

from stint.lab.backends import LoadBackends
from stint.lab.delegation import DelegationCase, run_delegation
from stint.lab.delegation_report import update_delegation
from stint.lab.environment import environment
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool


async def test_a_tiny_tree_completes_level_by_level_and_reports(tmp_path: Path) -> None:
    case = DelegationCase(1, 4, 3, 50, grandchildren=2)
    backends = LoadBackends(settings=None)
    try:
        database = await backends.open_case(case.label)
        pool = await open_pool(database.target.config, ROLE_CLI, min_size=1, max_size=2)
        try:
            result = await run_delegation(
                case, database.target, pool, tmp_path / "work",
                postmaster=database.postmaster_pid(),
            )  # fmt: skip
        finally:
            await pool.close()
            await database.close()
    finally:
        backends.close()
    assert result.parent_status == "succeeded", result
    assert result.levels == [
        {"level": 1, "spawned": 3, "ended": 3, "succeeded": 3},
        {"level": 2, "spawned": 6, "ended": 6, "succeeded": 6},
    ]
    assert result.completed == case.nodes == 9
    assert result.parent_held_slot_while_joining == 0
    assert result.checks_passed, result.failed_checks
    assert result.peak_running_children >= 1
    assert all(seconds is not None for seconds in result.phases.values()), result.phases
    page = update_delegation(
        tmp_path / "report",
        "trees",
        [result],
        command="smoke",
        generated_at="now",
        environment=environment(),
    ).read_text()
    assert (
        "| 1x4, 3 x 2 of 50 ms, one statement per parent | 9/9 (L1 3/3 ok, 3 ended; L2 6/6 ok"
        in page
    )
