"""Prove a sizing: run a configuration at the stated rate and turn length.

W real ``worker --slots S`` processes on a throwaway PostgreSQL take turns that
arrive as a Poisson process at the stated rate, each waiting the stated active
seconds in its tool, for a bounded time. Time can be scaled: at ``time_scale``
10, 20-second turns wait 2 seconds and arrive 10 times as fast, so the busy
slots (rate x seconds) are the same and a ten-minute load takes one. The run
says whether the configuration *held*: no turn waited longer than the bound
for a slot, from its enqueue to its start (database clock). Beside it: the
busy slots sampled, each worker's CPU and peak memory, PostgreSQL's CPU, and
the usual invariant checks. Polling, leases and claims are not scaled, so the
workers' background CPU weighs ten times less against the turns than it would
at the real rate; the turns' own CPU weighs ten times more.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil

from stint.lab.arrivals import poisson, produce
from stint.lab.backends import LoadBackends, close_case
from stint.lab.costs import CostMeter, Window, load_average
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.runner import WORKER_SETTINGS, until_finished, until_registered
from stint.ops.checks import run_checks
from stint.ops.stats import percentile
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.errors import StoreError
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["DEFAULT_BOUND_S", "ValidationPlan", "ValidationRun", "validate"]

DEFAULT_BOUND_S = 1.0
"""Held: no turn waited longer than this for a slot (four poll intervals; a free
slot claims a queued turn in tens of milliseconds)."""
_SAMPLE_S = 0.25
_CONCURRENCY = 6
_SESSIONS_PER_BUSY_SLOT = 4  # a session's next turn comes long after its last ended
_MIB = 2**20


@dataclass(frozen=True)
class ValidationPlan:
    """One configuration at one workload, for ``seconds`` of arrivals (run time)."""

    label: str
    workers: int
    slots: int
    rate: float
    turn_seconds: float
    time_scale: float = 1.0
    seconds: float = 60.0
    seed: int = 1
    bound_s: float = DEFAULT_BOUND_S

    @property
    def run_rate(self) -> float:
        return self.rate * self.time_scale

    @property
    def run_turn_ms(self) -> int:
        return max(1, round(1000 * self.turn_seconds / self.time_scale))

    @property
    def busy_slots(self) -> float:
        """Little's law, the same at any time scale."""
        return self.rate * self.turn_seconds

    @property
    def total_slots(self) -> int:
        return self.workers * self.slots


@dataclass
class ValidationRun:
    """What one configuration did under the plan's load."""

    plan: ValidationPlan
    turns: int = 0
    queue_age_s: dict[str, float | None] = field(default_factory=dict)
    queue_age_p95_by_third_s: list[float | None] = field(default_factory=list)
    oldest_ready_max_s: float | None = None
    busy_slots: dict[str, float | None] = field(default_factory=dict)
    worker_cpu_cores: list[float | None] = field(default_factory=list)
    worker_peak_rss_mib: list[float] = field(default_factory=list)
    postgres_cpu_cores: float | None = None
    failed_checks: list[str] = field(default_factory=list)
    load_average: list[float] = field(default_factory=list)
    diagnostics: str | None = None

    @property
    def held(self) -> bool:
        """Every turn started within the bound of its enqueue."""
        worst = self.queue_age_s.get("max")
        return self.turns > 0 and worst is not None and worst <= self.plan.bound_s

    def as_json(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "plan": {
                **asdict(plan),
                "total_slots": plan.total_slots,
                "busy_slots": plan.busy_slots,
                "run_rate": plan.run_rate,
                "run_turn_ms": plan.run_turn_ms,
            },
            "turns": self.turns,
            "queue_age_s": self.queue_age_s,
            "queue_age_p95_by_third_s": self.queue_age_p95_by_third_s,
            "oldest_ready_max_s": self.oldest_ready_max_s,
            "busy_slots": self.busy_slots,
            "worker_cpu_cores": self.worker_cpu_cores,
            "worker_peak_rss_mib": self.worker_peak_rss_mib,
            "postgres_cpu_cores": self.postgres_cpu_cores,
            "held": self.held,
            "checks_passed": not self.failed_checks,
            "failed_checks": self.failed_checks,
            "load_average": self.load_average,
            "diagnostics": self.diagnostics,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _ages(waits: list[float]) -> dict[str, float | None]:
    return {
        "p50": _round(percentile(waits, 50)),
        "p95": _round(percentile(waits, 95)),
        "max": _round(max(waits, default=None) if waits else None),
    }


@dataclass
class _Sampled:
    running: list[int] = field(default_factory=list)
    oldest: list[float] = field(default_factory=list)
    peak_rss: dict[int, float] = field(default_factory=dict)


async def _sample(probe: ProbeStore, procs: list[subprocess.Popen[bytes]], into: _Sampled) -> None:
    """Busy slots, the oldest ready session's age and each worker's RSS, until cancelled."""
    while True:
        with contextlib.suppress(StoreError):  # a missed sample; the checks judge correctness
            into.running.append((await probe.load_sample()).running_sessions)
            age = (await probe.queue_age()).oldest_ready_age
            into.oldest.append(age or 0.0)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                rss = psutil.Process(proc.pid).memory_info().rss / _MIB
                into.peak_rss[proc.pid] = max(into.peak_rss.get(proc.pid, 0.0), rss)
        await asyncio.sleep(_SAMPLE_S)


def _cores(window: Window) -> tuple[list[float | None], float | None]:
    seconds = window.seconds
    workers = [None if c is None else round(c / seconds, 4) for c in window.per_worker()]
    postgres = window.postgres()
    return workers, None if postgres is None else round(postgres / seconds, 4)


async def validate(plan: ValidationPlan, backends: LoadBackends, work_dir: Path) -> ValidationRun:
    """Run ``plan`` on a fresh database of ``backends``; logs stay in ``work_dir`` on failure."""
    case = work_dir / plan.label.replace(" ", "-")
    workspace = case / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    database = await backends.open_case(f"sizing-{plan.label}")
    cgroup = backends.worker_cgroup(f"sizing-{plan.label}")
    config = database.target.config
    pool = await open_pool(config, ROLE_CLI, min_size=_CONCURRENCY + 2, max_size=_CONCURRENCY + 2)
    client, probe = ClientStore(config, pool), ProbeStore(config, pool)
    run = ValidationRun(plan, load_average=load_average())
    procs: list[subprocess.Popen[bytes]] = []
    failed = True
    try:
        sessions_needed = math.ceil(plan.busy_slots) * _SESSIONS_PER_BUSY_SLOT + plan.total_slots
        sessions = [await client.sessions_create() for _ in range(sessions_needed)]
        env = {
            **WORKER_SETTINGS,
            "STINT_DATABASE_URL": config.conninfo,
            "STINT_SCHEMA": config.schema,
            "STINT_WORKSPACE": str(workspace),
        }
        procs = [
            spawn_worker(
                env=env,
                args=["--slots", str(plan.slots)],
                log_path=case / f"worker{i}.log",
                cgroup_procs=cgroup.procs_files if cgroup is not None else [],
            )
            for i in range(plan.workers)
        ]
        await until_registered(probe, plan.workers, time.monotonic() + 120)
        meter = CostMeter(database.postmaster_pid)
        meter.track([p.pid for p in procs])
        meter.leave_out(await probe.backend_pids(application=ROLE_CLI))
        sent = await _drive(plan, client, probe, meter, sessions, procs, run)
        await until_finished(
            probe,
            target=sent,
            offset=0,
            deadline=time.monotonic() + 3 * plan.seconds + 120,
            phase="backlog",
            progress=lambda *_: None,
            procs=procs,
        )
        stop_workers(procs)
        timings = sorted(await probe.turns_timings(), key=lambda t: t.enqueued_at)
        _figures(run, [t.queue_wait for t in timings], [t.status for t in timings])
        report = await run_checks(pool, journals=workspace / "journals", faults={})
        run.failed_checks = [c.name for c in report.checks if not c.passed]
        if run.turns != sent:
            run.failed_checks.append("every_turn_succeeded")
        failed = bool(run.failed_checks)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await pool.close()
        kept = await close_case(database, cgroup, case, failed=failed)
        if failed:
            run.diagnostics = f"worker logs in {case}; database: {kept}"
    return run


async def _drive(
    plan: ValidationPlan,
    client: ClientStore,
    probe: ProbeStore,
    meter: CostMeter,
    sessions: list[UUID],
    procs: list[subprocess.Popen[bytes]],
    run: ValidationRun,
) -> int:
    """The arrivals, with the samplers and the CPU window around them; turns sent."""
    sampled = _Sampled()
    sampler = asyncio.create_task(_sample(probe, procs, sampled))
    turn_input = {"min_wait_ms": plan.run_turn_ms}

    async def enqueue(n: int) -> None:
        await client.turns_enqueue(
            session_id=sessions[n % len(sessions)],
            idempotency_key=f"v{n}",
            turn_input=turn_input,
        )

    start = meter.read()
    try:
        sent = await produce(
            poisson(plan.run_rate, plan.seconds, plan.seed), enqueue, concurrency=_CONCURRENCY
        )
    finally:
        window = Window(start, meter.read())
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    run.worker_cpu_cores, run.postgres_cpu_cores = _cores(window)
    run.worker_peak_rss_mib = [
        round(sampled.peak_rss[p.pid], 1) for p in procs if p.pid in sampled.peak_rss
    ]
    running = [float(r) for r in sampled.running]
    run.busy_slots = {
        "mean": _round(sum(running) / len(running), 1) if running else None,
        "p95": percentile(running, 95),
        "max": max(running, default=None),
    }
    run.oldest_ready_max_s = _round(max(sampled.oldest, default=None))
    return sent


def _figures(run: ValidationRun, waits: list[float], statuses: list[str]) -> None:
    """Queue ages over all the turns and by thirds of the run (in enqueue order)."""
    run.turns = sum(1 for s in statuses if s == "succeeded")
    run.queue_age_s = _ages(waits)
    third = max(1, math.ceil(len(waits) / 3))
    run.queue_age_p95_by_third_s = [
        _round(percentile(waits[i : i + third], 95)) for i in range(0, len(waits), third)
    ][:3]
