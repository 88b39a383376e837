"""The quota soak (``pytest loadtest --run-load -k quota``): 100,000 turns through
provider quotas with a fast fake provider; figures into docs/load/quotas.md.
STINT_QUOTA_TURNS resizes it (the report says how many ran)."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.backends import LoadBackends
from stint.lab.environment import environment
from stint.lab.quota_report import write_quotas
from stint.lab.quota_soak import QuotaPlan, QuotaSoak
from stint.ops.checks import run_checks
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore
from stint.store.quotas import QuotaStore

pytestmark = [pytest.mark.load, pytest.mark.long_run("quota")]

DOCS = Path(__file__).resolve().parents[1] / "docs" / "load"


async def test_quota_soak_keeps_exact_books_under_binding_limits(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    plan = replace(QuotaPlan(), turns=int(os.environ.get("STINT_QUOTA_TURNS", QuotaPlan.turns)))
    backends = LoadBackends()
    database = await backends.open_case("quota")
    cgroup = backends.worker_cgroup("quota")
    config = database.target.config
    pool = await open_pool(config, ROLE_CLI, min_size=2, max_size=4)
    workspace = tmp_path / "workspace"
    try:
        soak = QuotaSoak(
            plan,
            probe=ProbeStore(config, pool),
            quotas=QuotaStore(config, pool),
            env={
                "STINT_DATABASE_URL": config.conninfo,
                "STINT_SCHEMA": config.schema,
                "STINT_WORKSPACE": str(workspace),
            },
            workdir=tmp_path,
            cgroup_procs=cgroup.procs_files if cgroup is not None else [],
            progress=print,
        )
        run = await soak.run()
        report = await run_checks(pool, journals=workspace / "journals")
        failed = [c.name for c in report.checks if not c.passed]
        figures = {
            **run.as_json(),
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": shlex.join(
                [
                    *(["STINT_QUOTA_TURNS=" + str(plan.turns)] if plan.turns != 100_000 else []),
                    "pytest",
                    *request.config.invocation_params.args,
                ]
            ),
            "backend": backends.describe(),
            "environment": environment(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "checks": report.as_json(),
            "checks_summary": "all passed" if not failed else f"FAILED: {', '.join(failed)}",
        }
        write_quotas(DOCS, figures)
        assert run.books_exact(), figures["scopes"]
        assert run.within_limits(), figures["provider_busiest_window"]
        assert report.passed, failed
    finally:
        await pool.close()
        await database.close(keep=False)
        if cgroup is not None:
            cgroup.remove()
        backends.close()
