"""The scale soak (``pytest loadtest --run-load -k scale``): 100,000 turns over
4 workers x 16 slots with 10,000 parked sessions and retention running; figures
per 10,000 turns into docs/load/scale.md. STINT_SCALE_TURNS and STINT_SCALE_RATE
resize it."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.scale import PROBE_APPLICATION, ScaleDriver, ScalePlan
from stint.lab.scale_report import write_scale
from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore
from stint.store.worker_store import SqlWorkerStore

pytestmark = [pytest.mark.load, pytest.mark.long_run("scale")]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "load"


def _command(request: pytest.FixtureRequest) -> str:
    """The command as run, with the STINT_SCALE_* settings that shaped it."""
    settings = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("STINT_SCALE_")]
    return shlex.join([*settings, "pytest", *request.config.invocation_params.args])


async def test_scale_soak_keeps_the_hot_path_flat_as_history_grows(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    plan = ScalePlan()
    plan = replace(
        plan,
        turns=int(os.environ.get("STINT_SCALE_TURNS", plan.turns)),
        rate=float(os.environ.get("STINT_SCALE_RATE", plan.rate)),
        window=min(plan.window, max(1, int(os.environ.get("STINT_SCALE_TURNS", plan.turns)) // 5)),
    )
    backends = LoadBackends(settings={"shared_preload_libraries": "pg_stat_statements"})
    database = await backends.open_case("scale")
    cgroup = backends.worker_cgroup("scale")
    config = database.target.config
    pool = await open_pool(config, ROLE_CLI, min_size=4, max_size=8)
    # The probe on connections of its own: their server CPU is reported apart.
    probe_pool = await open_pool(config, PROBE_APPLICATION, min_size=1, max_size=2)
    workspace = tmp_path / "workspace"
    try:
        probe = ProbeStore(config, probe_pool)
        driver = ScaleDriver(
            plan,
            client=ClientStore(config, pool),
            probe=probe,
            runtime=SqlWorkerStore(config, pool, concurrency=1),
            env={
                "STINT_DATABASE_URL": config.conninfo,
                "STINT_SCHEMA": config.schema,
                "STINT_WORKSPACE": str(workspace),
            },
            logs=tmp_path,
            postmaster=database.postmaster_pid,
            cgroup_procs=cgroup.procs_files if cgroup is not None else [],
            progress=print,
        )
        run = await driver.run()
        report = await run_checks(pool, journals=workspace / "journals")
        failed = [c.name for c in report.checks if not c.passed]
        figures = {
            **run.as_json(),
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": _command(request),
            "backend": backends.describe(),
            "checks": report.as_json(),
            "checks_summary": "all passed" if not failed else f"FAILED: {', '.join(failed)}",
        }
        write_scale(DOCS, figures)
        assert report.passed, failed
    finally:
        await probe_pool.close()
        await pool.close()
        await database.close(keep=False)
        if cgroup is not None:
            cgroup.remove()
        backends.close()
