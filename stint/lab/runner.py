"""Run one load case end to end with real worker processes.

Seed the sessions; start W ``worker --slots S`` processes and burst one turn
per session at the same moment (the *cold* interval, as the seed measured);
then, with the workers warm and idle, burst one more turn per session (the
*warm* interval); SIGTERM the workers and time their idle drain; judge the run
with Stint's invariant checks plus the load-specific ones. Every figure comes
from PostgreSQL audit timestamps or from the processes themselves.
"""

from __future__ import annotations

import asyncio
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil

from stint.lab.backends import CaseDatabase, LoadBackends
from stint.lab.environment import environment
from stint.lab.figures import max_concurrent_turns, phase_figures, timeline
from stint.lab.model import CaseReport, CaseSpec
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.sampler import Sampler
from stint.lab.workload import Workload, workload
from stint.ops.checks import Check, run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["WORKER_SETTINGS", "burst", "burst_deadline", "run_case", "until_finished"]

# What the workers run with, as in the seed measurement: 250 ms polling, 30 s
# leases, 5 s database deadlines. Passed explicitly so the report states them.
WORKER_SETTINGS = {
    "STINT_POLL_INTERVAL": "0.25",
    "STINT_LEASE_SECONDS": "30",
    "STINT_STATEMENT_TIMEOUT": "5",
    "STINT_LOCK_TIMEOUT": "5",
    "STINT_AUTO_MIGRATE": "false",
    "STINT_LOG_LEVEL": "info",
}
_POLL_S = 0.05
_EXIT_TIMEOUT_S = 60.0

Progress = Callable[[str, int, int], None]
"""progress(phase, finished, total): called as turns finish."""


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def burst(
    client: ClientStore, sessions: list[UUID], turn_input: dict[str, Any], phase: str
) -> None:
    await asyncio.gather(
        *(
            client.turns_enqueue(
                session_id=sid,
                idempotency_key=f"{phase}-{sid}",
                turn_input=turn_input,
            )
            for sid in sessions
        )
    )


async def until_finished(
    probe: ProbeStore,
    *,
    target: int,
    offset: int,
    deadline: float,
    phase: str,
    progress: Progress,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """Poll until ``target`` turns (cumulative) have finished; fail on a dead
    worker or past the deadline."""
    while True:
        finished = (await probe.turns_progress()).finished
        progress(phase, finished - offset, target - offset)
        if finished >= target:
            return
        dead = [p.pid for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"worker(s) {dead} exited during the {phase} burst")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{phase} burst: {finished - offset}/{target - offset} finished")
        await asyncio.sleep(_POLL_S)


def burst_deadline(spec: CaseSpec) -> float:
    """Generous: ten times the physical minimum, at least a minute."""
    minimum = spec.sessions / spec.physical_limit
    return time.monotonic() + max(60.0, 10 * minimum)


def _stop_and_time_drain(procs: list[subprocess.Popen[bytes]]) -> tuple[float, list[int]]:
    """SIGTERM every worker; seconds until the last one exited, and the exit codes."""
    started = time.monotonic()
    codes = stop_workers(procs, timeout=_EXIT_TIMEOUT_S)
    return time.monotonic() - started, codes


def _load_checks(
    spec: CaseSpec, report: CaseReport, concurrent: int, pids: list[int]
) -> list[Check]:
    samples = report.samples
    sampled = samples.max_active_sessions if samples else None
    left = [pid for pid in pids if psutil.pid_exists(pid) and _not_zombie(pid)]
    phases = [p for p in (report.cold, report.warm) if p is not None]
    return [
        Check(
            "every_turn_succeeded",
            bool(phases) and all(p.succeeded == p.turns == spec.sessions for p in phases),
            {
                "phases": {
                    name: (asdict(p) if p else None)
                    for name, p in (("cold", report.cold), ("warm", report.warm))
                }
            },
        ),
        Check(
            "active_sessions_within_slots",
            concurrent <= spec.total_slots and (sampled is None or sampled <= spec.total_slots),
            {
                "total_slots": spec.total_slots,
                "max_concurrent_turns_from_audit_times": concurrent,
                "max_active_sessions_sampled": sampled,
            },
        ),
        Check(
            "workers_exited_cleanly",
            all(code == 0 for code in report.worker_exit_codes),
            {"exit_codes": report.worker_exit_codes},
        ),
        Check("no_process_left_running", not left, {"still_running": left}),
    ]


def _not_zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def run_case(
    spec: CaseSpec, backends: LoadBackends, work_dir: Path, progress: Progress
) -> CaseReport:
    """Run one case; on failure keep its diagnostics and say where they are."""
    case_dir = work_dir / spec.label
    shutil.rmtree(case_dir, ignore_errors=True)
    workspace = case_dir / "workspace"
    workspace.mkdir(parents=True)
    database = await backends.open_case(spec.label)
    report = CaseReport(
        spec=spec,
        backend=database.backend,
        environment=environment(),
        configuration=dict(WORKER_SETTINGS),
    )
    cgroup = backends.worker_cgroup(spec.label)
    failed = True
    try:
        procs_files = cgroup.procs_files if cgroup is not None else []
        with workload(spec) as work:
            report.configuration.update(work.configuration)
            await _measure(spec, database, report, workspace, case_dir, procs_files, progress, work)
        failed = not report.passed
    except Exception as exc:  # a failed case is reported, with its diagnostics kept
        report.checks.append(
            asdict(Check("case_completed", False, {"error": f"{type(exc).__name__}: {exc}"}))
        )
    finally:
        kept = await database.close(keep=failed)
        if cgroup is not None:
            cgroup.remove()
        if failed:
            report.diagnostics = f"worker logs and workspace in {case_dir}; database: {kept}"
        else:
            shutil.rmtree(case_dir, ignore_errors=True)
    return report


async def _until_registered(probe: ProbeStore, workers: int, deadline: float) -> None:
    # Other processes register themselves: the table is the only signal to poll.
    while await probe.workers_running() < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {workers} workers registered in time")
        await asyncio.sleep(_POLL_S)


async def _measure(
    spec: CaseSpec,
    database: CaseDatabase,
    report: CaseReport,
    workspace: Path,
    case_dir: Path,
    cgroup_procs: list[Path],
    progress: Progress,
    work: Workload,
) -> None:
    config = database.target.config
    # Opened before the burst, so admission does not wait for new connections.
    pool = await open_pool(config, ROLE_CLI, min_size=8, max_size=8)
    client = ClientStore(config, pool)
    probe = ProbeStore(config, pool)
    sampler = Sampler(probe, database.memory_peak_mib, database.oom_kills)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sessions = [await client.sessions_create() for _ in range(spec.sessions)]
        env: dict[str, str] = {
            **WORKER_SETTINGS,
            "STINT_DATABASE_URL": config.conninfo,
            "STINT_SCHEMA": config.schema,
            "STINT_WORKSPACE": str(workspace),
            **work.env,
        }
        sampler.start()
        cpu_before = _children_cpu_seconds()
        procs = [
            spawn_worker(
                env=env,
                args=["--slots", str(spec.slots)],
                log_path=case_dir / f"worker{i}.log",
                cgroup_procs=cgroup_procs,
            )
            for i in range(spec.workers)
        ]
        sampler.track(procs)
        await burst(client, sessions, work.turn_input, "cold")
        await until_finished(
            probe,
            target=spec.sessions,
            offset=0,
            deadline=burst_deadline(spec),
            phase="cold",
            progress=progress,
            procs=procs,
        )
        await _until_registered(probe, spec.workers, burst_deadline(spec))
        await burst(client, sessions, work.turn_input, "warm")
        await until_finished(
            probe,
            target=2 * spec.sessions,
            offset=spec.sessions,
            deadline=burst_deadline(spec),
            phase="warm",
            progress=progress,
            procs=procs,
        )
        drain, report.worker_exit_codes = _stop_and_time_drain(procs)
        report.idle_drain_s = round(drain, 3)
        samples = await sampler.stop()
        report.samples = replace(
            samples, worker_cpu_seconds=round(_children_cpu_seconds() - cpu_before, 3)
        )
        timings = sorted(await probe.turns_timings(), key=lambda t: t.enqueued_at)
        report.cold = phase_figures(spec, timings[: spec.sessions])
        report.warm = phase_figures(spec, timings[spec.sessions :])
        report.timeline = timeline(timings[spec.sessions :])
        invariants = await run_checks(pool, journals=workspace / "journals", faults={})
        load = _load_checks(spec, report, max_concurrent_turns(timings), [p.pid for p in procs])
        extra = work.checks(spec, len(timings))
        report.checks = [asdict(c) for c in [*invariants.checks, *load, *extra]]
    finally:
        await sampler.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await pool.close()
