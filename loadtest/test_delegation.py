"""The delegation benchmark (``pytest loadtest --run-load -k delegation``): one parent
delegates 64 children to 1 worker x 16 slots and to 4 workers x 16, then a ladder of
N = 1, 2, 4 ... 64 concurrent children (three repetitions) for the marginal RSS per
child, beside the seed's audit64; figures into docs/load/delegation.md."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.delegation import DelegationCase, DelegationResult, run_delegation, write_delegation
from stint.lab.environment import environment
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool

pytestmark = [pytest.mark.load, pytest.mark.long_run("delegation")]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "load"
CASES = (DelegationCase(1, 16, 64, 1000), DelegationCase(4, 16, 64, 1000))
LADDER = (1, 2, 4, 8, 16, 32, 64)
REPETITIONS = 3


async def _run(backends: LoadBackends, case: DelegationCase, work: Path) -> DelegationResult:
    database = await backends.open_case(case.label)
    pool = await open_pool(database.target.config, ROLE_CLI, min_size=1, max_size=2)
    try:
        return await run_delegation(case, database.target, pool, work / case.label)
    finally:
        await pool.close()
        await database.close()


async def test_one_parent_delegates_its_children(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    backends = LoadBackends()
    try:
        cases = [await _run(backends, case, tmp_path) for case in CASES]
        ladder = [
            await _run(backends, DelegationCase(1, 64, n, 3000), tmp_path / f"rep{rep}")
            for rep in range(REPETITIONS)
            for n in LADDER
        ]
    finally:
        backends.close()
    write_delegation(
        DOCS,
        cases,
        ladder,
        command=shlex.join(["pytest", *request.config.invocation_params.args]),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        environment=environment(),
    )
    for result in [*cases, *ladder]:
        assert result.parent_status == "succeeded", result
        assert result.completed == result.case.children, result
        # The joining parent holds no slot (it runs while it spawns, not while it joins).
        assert result.parent_held_slot_while_joining == 0, result
