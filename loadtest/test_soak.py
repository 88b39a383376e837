"""The reliability soak (``pytest loadtest --run-load -k soak``)."""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stint.lab.processes import stop_workers
from stint.lab.reliability import write_reliability
from stint.lab.soak import Soak, SoakPlan
from stint.postgres.scratch import ScratchDatabases
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

pytestmark = [pytest.mark.load, pytest.mark.long_run("soak")]


async def test_soak_random_faults_lose_and_duplicate_nothing(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A few hundred sessions over a few minutes under random faults: all checkers pass.
    STINT_SOAK_SEED, STINT_SOAK_SESSIONS and STINT_SOAK_SECONDS resize it."""
    plan = SoakPlan(
        seed=int(os.environ.get("STINT_SOAK_SEED", SoakPlan.seed)),
        sessions=int(os.environ.get("STINT_SOAK_SESSIONS", SoakPlan.sessions)),
        arrival_seconds=float(os.environ.get("STINT_SOAK_SECONDS", SoakPlan.arrival_seconds)),
    )
    template = ThrowawayTemplate(durable=True)
    cluster = template.new_cluster()
    soak: Soak | None = None
    try:
        scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
        await scratch.prepare()
        target = await scratch.create()
        assert target.database is not None
        pool = await open_pool(target.config, ROLE_CLI, min_size=1, max_size=4)
        workspace = tmp_path / "workspace"
        env = {
            "STINT_SCHEMA": target.config.schema,
            "STINT_WORKSPACE": str(workspace),
            "STINT_LEASE_SECONDS": str(plan.lease_seconds),
            "STINT_POLL_INTERVAL": "0.1",
            "STINT_STATEMENT_TIMEOUT": "2",
            "STINT_CONNECT_TIMEOUT": "2",
            "STINT_DRAIN_SECONDS": "5",
            "STINT_AUTO_MIGRATE": "false",
        }
        soak = Soak(
            plan,
            cluster=cluster,
            client=ClientStore(target.config, pool),
            probe=ProbeStore(target.config, pool),
            env=env,
            dbname=target.database,
            logs=tmp_path,
        )
        for _ in range(plan.workers):
            await soak.start_worker()
        started = time.monotonic()
        producer = asyncio.create_task(soak.produce())
        await soak.inject(until=started + plan.arrival_seconds)
        await producer
        await soak.quiesce()
        stop_workers([w.proc for w in soak.workers])
        report = await soak.judge(pool, workspace / "journals")
        timings = await ProbeStore(target.config, pool).turns_timings()
        figures = soak.figures(report, len(timings), time.monotonic() - started)
        command = shlex.join(["pytest", *request.config.invocation_params.args])
        write_reliability(
            figures, command=command, generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        )
        await pool.close()
        assert report.passed, report.as_json()
        assert figures["lost_turns"] == 0 and figures["duplicated_effects"] == 0
    finally:
        if soak is not None:
            stop_workers([w.proc for w in soak.workers])
            for worker in soak.workers:
                await worker.proxy.stop()
        template.cleanup()
