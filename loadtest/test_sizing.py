"""The sizing validation (``pytest loadtest --run-load -k sizing``): what
``stint size`` recommends for the stated workload, run at that workload against
a throwaway PostgreSQL, beside the same with one worker lost and with fewer
slots than the busy mean, to show where it stops holding. Writes sizing.json
and sizing.md into --report-dir."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.costs import load_average
from stint.lab.environment import environment, shown_path
from stint.lab.sizing_report import sizing_report, write_sizing_report
from stint.lab.sizing_run import ValidationPlan, ValidationRun, validate
from stint.ops.sizing import Sizing, Workload, size
from stint.ops.sizing_costs import cost_model

pytestmark = [pytest.mark.load, pytest.mark.long_run("sizing")]

_BELOW = 0.9
"""The fewer-slots run: this share of the busy mean, so it cannot keep up."""


def _plans(sizing: Sizing, *, time_scale: float, seconds: float) -> list[ValidationPlan]:
    chosen = sizing.recommended
    assert chosen is not None, sizing.rule
    w = sizing.workload
    base = ValidationPlan(
        "recommended",
        chosen.workers,
        chosen.slots_per_worker,
        rate=w.rate,
        turn_seconds=w.turn_seconds,
        time_scale=time_scale,
        seconds=seconds,
    )
    plans = [base]
    if chosen.workers > 1:
        plans.append(replace(base, label="one worker lost", workers=chosen.workers - 1))
    fewer = max(1, math.floor(_BELOW * sizing.slots.busy / chosen.workers))
    plans.append(replace(base, label="fewer slots", slots=fewer))
    return plans


def _sizing(config: pytest.Config, matrix_path: Path) -> Sizing:
    """What ``stint size`` answers for the options' workload (its defaults otherwise)."""
    workload = Workload(
        rate=float(config.getoption("--size-rate")),
        turn_seconds=float(config.getoption("--size-turn-seconds")),
    )
    return size(cost_model(json.loads(matrix_path.read_text())), workload)


def _write(config: pytest.Config, report: dict[str, Any]) -> Path:
    return write_sizing_report(Path(str(config.getoption("--report-dir"))).resolve(), report)


async def test_the_recommendation_holds_and_fewer_slots_do_not(
    tmp_path: Path, request: pytest.FixtureRequest, load_report_lines: list[str]
) -> None:
    config = request.config
    matrix_path = Path(str(config.getoption("--size-report")))
    sizing = _sizing(config, matrix_path)
    workload = sizing.workload
    plans = _plans(
        sizing,
        time_scale=float(config.getoption("--time-scale")),
        seconds=float(config.getoption("--size-seconds")),
    )
    started = load_average()
    backends = LoadBackends()
    runs: list[ValidationRun] = []
    try:
        for plan in plans:
            runs.append(await validate(plan, backends, tmp_path))
            print(plan.label, runs[-1].as_json())
    finally:
        backends.close()
    report = sizing_report(
        sizing=sizing.as_json(),
        size_command=(
            f"stint size --report {matrix_path} --rate {workload.rate:g} "
            f"--turn-seconds {workload.turn_seconds:g}"
        ),
        runs=runs,
        command=shlex.join(["pytest", *config.invocation_params.args]),
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"),
        load_average={"start": started, "end": load_average()},
        backend=backends.describe(),
        environment=environment(),
    )
    written = _write(config, report)
    verdicts = ", ".join(
        f"{r.plan.workers}x{r.plan.slots} {'held' if r.held else 'did not hold'}" for r in runs
    )
    load_report_lines.append(
        f"sizing validation: {verdicts}; report {shown_path(written.with_suffix('.md'))}"
    )
    failed = {r.plan.label: (r.failed_checks, r.diagnostics) for r in runs if r.failed_checks}
    assert not failed, failed
    assert runs[0].held, runs[0].as_json()
    # Fewer slots than the busy mean cannot keep up: its queue must have grown.
    assert not runs[-1].held, runs[-1].as_json()
