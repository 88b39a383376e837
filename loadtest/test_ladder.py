"""The memory ladder (``pytest loadtest --run-load -k ladder``): one worker with
1, 2, 4 ... 64 slots, then 1 ... 8 workers of 4 slots, each a full load case
(every check applies); what one more slot and one more worker cost, into
docs/load/ladder.md."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.ladder import Rung, marginal, write_ladder
from stint.lab.model import CaseSpec
from stint.lab.runner import run_case

pytestmark = [pytest.mark.load, pytest.mark.long_run("ladder")]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "load"
SLOTS = (1, 2, 4, 8, 16, 32, 64)
WORKERS = (1, 2, 3, 4, 5, 6, 7, 8)


async def test_ladder_of_slots_and_workers(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    backends = LoadBackends()
    specs = [CaseSpec(1, s, 2 * s, 250) for s in SLOTS] + [
        CaseSpec(w, 4, 8 * w, 250) for w in WORKERS
    ]
    rungs: list[Rung] = []
    failed: list[str] = []
    try:
        for spec in specs:
            report = await run_case(spec, backends, tmp_path, lambda *_: None)
            if not report.passed:
                failed.append(f"{spec.label}: {report.diagnostics}")
            print(spec.label, report.samples)
            rungs.append(Rung.of(spec, report))
    finally:
        backends.close()
    write_ladder(
        DOCS,
        rungs,
        command=shlex.join(["pytest", *request.config.invocation_params.args]),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        backend=backends.describe(),
    )
    assert not failed, failed
    per_slot = marginal([r for r in rungs if r.workers == 1], "slots")
    assert per_slot is not None  # measured (its size is a figure in the report, not a test)
