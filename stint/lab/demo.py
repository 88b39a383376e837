"""``stint-lab demo``: the README's first command, end to end on real processes.

On the embedded PostgreSQL (or STINT_DATABASE_URL), in a schema of its own
that each run resets: start W ``worker --slots S`` processes, burst-enqueue one
scripted turn per session, show progress, then judge the run with the same
checks as the load test and print the figures from database timestamps.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from dataclasses import replace

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from stint.config.settings import Settings
from stint.config.target import resolve_store_config, workspace_dir
from stint.lab.processes import spawn_worker, stop_workers
from stint.ops.checks import run_checks
from stint.ops.stats import percentile
from stint.postgres.scratch import reset_schema
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["run_demo"]

DEMO_SCHEMA = "stint_demo"
_TURN_INPUT = {"min_wait_ms": 250}
_POLL_SECONDS = 0.2


async def run_demo(settings: Settings, *, workers: int, slots: int, sessions: int) -> int:
    console = Console(stderr=True)
    config = replace(resolve_store_config(settings), schema=DEMO_SCHEMA)
    await reset_schema(config)
    workspace = workspace_dir(settings) / "demo"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    console.print(
        f"demo: {workers} workers x {slots} slots, {sessions} sessions, "
        f"{_TURN_INPUT['min_wait_ms']} ms tool wait; schema {DEMO_SCHEMA}, workspace {workspace}"
    )
    env = {
        "STINT_DATABASE_URL": config.conninfo,
        "STINT_SCHEMA": DEMO_SCHEMA,
        "STINT_WORKSPACE": str(workspace),
    }
    procs = [
        spawn_worker(env=env, args=["--slots", str(slots)], log_path=workspace / f"worker{i}.log")
        for i in range(workers)
    ]
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=4)
    try:
        client = ClientStore(config, pool)
        await asyncio.gather(
            *(
                client.turns_enqueue(
                    session_id=None,
                    idempotency_key=f"demo-{i}",
                    turn_input=_TURN_INPUT,
                )
                for i in range(sessions)
            )
        )
        await _show_progress(ProbeStore(config, pool), console, sessions, procs)
        codes = stop_workers(procs)
        report = await run_checks(pool, journals=workspace / "journals")
        timings = await ProbeStore(config, pool).turns_timings()
    finally:
        stop_workers(procs)
        await pool.close()
    e2e = [t.end_to_end for t in timings]
    span = max(t.finished_at for t in timings) - min(t.enqueued_at for t in timings)
    ok = sum(1 for t in timings if t.status == "succeeded")
    by_name = {c.name: c for c in report.checks}
    dupes = len(by_name["no_duplicate_effects"].evidence["duplicates"])
    gaps = len(by_name["contiguous_event_cursors"].evidence["gaps"])
    print(f"turns: {ok}/{sessions} succeeded in {span:.2f}s ({len(timings) / span:.2f} turns/s)")
    print(f"end-to-end p50 {percentile(e2e, 50):.3f}s  p95 {percentile(e2e, 95):.3f}s")
    print(f"duplicate effects: {dupes}  cursor gaps: {gaps}  checks passed: {report.passed}")
    print(f"workers exited with {codes}; logs in {workspace}")
    return 0 if report.passed and ok == sessions and all(c == 0 for c in codes) else 1


async def _show_progress(
    probe: ProbeStore, console: Console, total: int, procs: list[subprocess.Popen[bytes]]
) -> None:
    columns = (
        TextColumn("turns"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[active]} running"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("turns", total=total, active=0)
        while True:
            state = await probe.turns_progress()
            progress.update(task, completed=state.finished, active=state.running_sessions)
            if state.finished >= total:
                return
            dead = [p.pid for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"worker process(es) {dead} exited early; see their logs")
            await asyncio.sleep(_POLL_SECONDS)
