"""Run one load case end to end with real worker processes.

Seed the sessions; start W ``worker --slots S`` processes and burst one turn
per session at the same moment (the *cold* interval, as the seed measured);
then, with the workers warm and idle, burst one more turn per session (the
*warm* interval, whose CPU is divided by its turns); leave the workers idle a
moment (their idle CPU); fill every slot with a turn that waits in its tool and
read the CPU of waiting (the *hold*, scripted harness only); SIGTERM the
workers and time their idle drain; judge the run with Stint's invariant checks
plus the load-specific ones. Every figure comes from PostgreSQL audit
timestamps or from the processes themselves.
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

from stint.lab.backends import CaseDatabase, LoadBackends, close_case
from stint.lab.costs import CostMeter, Window, costs, load_average
from stint.lab.environment import environment
from stint.lab.figures import max_concurrent_turns, phase_figures, timeline
from stint.lab.model import CaseReport, CaseSpec, Costs
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.sampler import Sampler
from stint.lab.workload import Workload, workload
from stint.ops.checks import Check, run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.enqueue_batch import EnqueueItem
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = [
    "WORKER_SETTINGS",
    "burst",
    "burst_deadline",
    "run_case",
    "until_finished",
    "until_registered",
]

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
IDLE_S = 1.5
"""How long the workers sit idle (nothing queued) while their idle CPU is read."""
HOLD_WAIT_MS = 3000
"""The hold phase's turns wait this long in their tool ..."""
HOLD_WINDOW_S = 1.5
"""... and the CPU of waiting is read over this window once every one has started."""

Progress = Callable[[str, int, int], None]
"""progress(phase, finished, total): called as turns finish."""


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def burst(
    client: ClientStore, sessions: list[UUID], turn_input: dict[str, Any], phase: str
) -> float:
    """One turn for each session, enqueued in one transaction (``turns_enqueue_many``),
    as a producer with a batch sends it; returns the seconds the enqueue took."""
    started = time.perf_counter()
    await client.turns_enqueue_many(
        [
            EnqueueItem(idempotency_key=f"{phase}-{sid}", turn_input=turn_input, session_id=sid)
            for sid in sessions
        ]
    )
    return time.perf_counter() - started


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
    spec: CaseSpec,
    report: CaseReport,
    concurrent: int,
    pids: list[int],
    hold: tuple[int, int],
) -> list[Check]:
    samples = report.samples
    sampled = samples.max_active_sessions if samples else None
    left = [pid for pid in pids if psutil.pid_exists(pid) and _not_zombie(pid)]
    phases = [p for p in (report.cold, report.warm) if p is not None]
    held, held_succeeded = hold
    return [
        Check(
            "every_turn_succeeded",
            bool(phases)
            and all(p.succeeded == p.turns == spec.sessions for p in phases)
            and held_succeeded == held,
            {
                "phases": {
                    name: (asdict(p) if p else None)
                    for name, p in (("cold", report.cold), ("warm", report.warm))
                },
                "hold": {"turns": held, "succeeded": held_succeeded},
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
        kept = await close_case(database, cgroup, case_dir, failed=failed)
        if failed:
            report.diagnostics = f"worker logs and workspace in {case_dir}; database: {kept}"
    return report


async def _until_running(probe: ProbeStore, count: int, deadline: float) -> None:
    # The workers start the turns: the sessions table is the only signal to poll.
    while (await probe.turns_progress()).running_sessions < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the hold phase's {count} turns did not all start in time")
        await asyncio.sleep(_POLL_S)


async def _hold(
    spec: CaseSpec,
    client: ClientStore,
    probe: ProbeStore,
    meter: CostMeter,
    sessions: list[UUID],
    procs: list[subprocess.Popen[bytes]],
    progress: Progress,
) -> tuple[Window | None, int]:
    """Fill every slot with a turn waiting in its tool; the CPU window while all
    of them wait (None when one ended inside it), and how many were queued."""
    held = sessions[: spec.total_slots]
    await burst(client, held, {"min_wait_ms": HOLD_WAIT_MS}, "hold")
    await _until_running(probe, len(held), burst_deadline(spec))
    start = meter.read()
    await asyncio.sleep(HOLD_WINDOW_S)
    window = Window(start, meter.read())
    still = (await probe.turns_progress()).running_sessions
    await until_finished(
        probe,
        target=2 * spec.sessions + len(held),
        offset=2 * spec.sessions,
        deadline=burst_deadline(spec) + HOLD_WAIT_MS / 1000,
        phase="hold",
        progress=progress,
        procs=procs,
    )
    return (window if still >= len(held) else None), len(held)


async def until_registered(probe: ProbeStore, workers: int, deadline: float) -> None:
    # Other processes register themselves: the table is the only signal to poll.
    while await probe.workers_running() < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {workers} workers registered in time")
        await asyncio.sleep(_POLL_S)


def _costs(
    spec: CaseSpec,
    report: CaseReport,
    warm: Window,
    idle: Window,
    hold: Window | None,
    held: int,
    loadavg: list[float],
) -> Costs | None:
    if report.warm is None:
        return None
    return costs(
        workers=spec.workers,
        turns=report.warm.turns,
        turns_per_s=report.warm.turns_per_s,
        warm=warm,
        idle=idle,
        hold=hold,
        hold_busy_slots=held or None,
        load_average=loadavg,
    )


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
    meter = CostMeter(database.postmaster_pid)
    loadavg = load_average()
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
        meter.leave_out(await probe.backend_pids(application=ROLE_CLI))
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
        meter.track([p.pid for p in procs])
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
        await until_registered(probe, spec.workers, burst_deadline(spec))
        warm_start = meter.read()
        report.warm_enqueue_ms = round(
            1000 * await burst(client, sessions, work.turn_input, "warm"), 2
        )
        await until_finished(
            probe,
            target=2 * spec.sessions,
            offset=spec.sessions,
            deadline=burst_deadline(spec),
            phase="warm",
            progress=progress,
            procs=procs,
        )
        warm = Window(warm_start, meter.read())
        await asyncio.sleep(IDLE_S)
        idle = Window(warm.end, meter.read())
        hold, held = (None, 0)
        if spec.harness == "scripted":
            hold, held = await _hold(spec, client, probe, meter, sessions, procs, progress)
        drain, report.worker_exit_codes = _stop_and_time_drain(procs)
        report.idle_drain_s = round(drain, 3)
        samples = await sampler.stop()
        report.samples = replace(
            samples, worker_cpu_seconds=round(_children_cpu_seconds() - cpu_before, 3)
        )
        timings = sorted(await probe.turns_timings(), key=lambda t: t.enqueued_at)
        n = spec.sessions
        report.cold = phase_figures(spec, timings[:n])
        report.warm = phase_figures(spec, timings[n : 2 * n])
        report.timeline = timeline(timings[n : 2 * n])
        report.costs = _costs(spec, report, warm, idle, hold, held, loadavg)
        invariants = await run_checks(pool, journals=workspace / "journals", faults={})
        hold_turns = timings[2 * n :]
        succeeded = sum(1 for t in hold_turns if t.status == "succeeded")
        load = _load_checks(
            spec,
            report,
            max_concurrent_turns(timings),
            [p.pid for p in procs],
            (held, succeeded),
        )
        extra = work.checks(spec, len(timings))
        report.checks = [asdict(c) for c in [*invariants.checks, *load, *extra]]
    finally:
        await sampler.stop()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await pool.close()
