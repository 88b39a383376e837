"""The delegation benchmark (``pytest loadtest --run-load -k delegation``), beside the
seed's audit64; figures into docs/load/delegation.md, one part per test:

- ``-k one_parent``: one parent delegates 64 children to 1 worker x 16 slots and to
  4 workers x 16, spawned in one statement (``ctx.spawn_many``) and, the before
  figure, one statement per child;
- ``-k tree``: a tree of 32 children x 31 grandchildren (1,024 sessions) on 4 x 16
  and 1 x 16;
- ``-k ladder``: N = 1, 2, 4 ... 64 concurrent children (three repetitions) for the
  marginal RSS per child.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.delegation import DelegationCase, DelegationResult, run_delegation
from stint.lab.delegation_report import update_delegation
from stint.lab.environment import environment
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool

pytestmark = [pytest.mark.load, pytest.mark.long_run("delegation")]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "load"
CASES = (
    DelegationCase(1, 16, 64, 1000, spawn="one"),
    DelegationCase(1, 16, 64, 1000),
    DelegationCase(4, 16, 64, 1000, spawn="one"),
    DelegationCase(4, 16, 64, 1000),
)
TREES = (DelegationCase(4, 16, 32, 1000, grandchildren=31), DelegationCase(1, 16, 32, 1000, 31))
LADDER = (1, 2, 4, 8, 16, 32, 64)
REPETITIONS = 3


async def _run(backends: LoadBackends, case: DelegationCase, work: Path) -> DelegationResult:
    database = await backends.open_case(case.label)
    pool = await open_pool(database.target.config, ROLE_CLI, min_size=1, max_size=2)
    try:
        return await run_delegation(
            case, database.target, pool, work / case.label, postmaster=database.postmaster_pid()
        )
    finally:
        await pool.close()
        await database.close()


async def _run_all(cases: list[DelegationCase], work: Path) -> list[DelegationResult]:
    backends = LoadBackends()
    try:
        return [await _run(backends, case, work / str(n)) for n, case in enumerate(cases)]
    finally:
        backends.close()


def _write(part: str, results: list[DelegationResult], request: pytest.FixtureRequest) -> None:
    update_delegation(
        DOCS,
        part,
        results,
        command=shlex.join(["pytest", *request.config.invocation_params.args]),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        environment=environment(),
    )


def _assert_complete(result: DelegationResult) -> None:
    assert result.parent_status == "succeeded", result
    assert result.completed == result.case.nodes, result
    assert all(lv["ended"] == lv["spawned"] for lv in result.levels), result
    # A joining parent holds no slot (it runs while it spawns, not while it joins).
    assert result.parent_held_slot_while_joining == 0, result
    assert result.checks_passed, result.failed_checks


async def test_one_parent_delegates_its_children(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    results = await _run_all(list(CASES), tmp_path)
    _write("cases", results, request)
    for result in results:
        _assert_complete(result)


async def test_a_tree_of_a_thousand_children_on_two_levels(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    results = await _run_all(list(TREES), tmp_path)
    _write("trees", results, request)
    for result in results:
        _assert_complete(result)
        assert [lv["spawned"] for lv in result.levels] == [32, 32 * 31]


async def test_the_marginal_rss_per_child_ladder(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cases = [DelegationCase(1, 64, n, 3000) for _ in range(REPETITIONS) for n in LADDER]
    results = await _run_all(cases, tmp_path)
    _write("ladder", results, request)
    for result in results:
        _assert_complete(result)
