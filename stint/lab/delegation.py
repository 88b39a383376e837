"""The delegation benchmark: one parent turn spawns N children and joins them.

Beside the seed's audit64 (Pixir: one agent delegating 64 workers; 6.5 MiB of
RSS per extra concurrent child, 96.8 MiB for process-per-worker), on Stint's
own primitives: each child is a session with one scripted turn (one journaled
effect, then ``min_wait_ms``), the parent waits slot-free (``ctx.join``). A
case reports completion, end-to-end time from the database clock against the
ideal (waves x child duration, every slot free for children), the most
children running at once (the parent holds no slot while it waits), and the
workers' peak RSS sampled every 50 ms. ``pytest loadtest --run-load -k
delegation`` runs the cases and a ladder and writes docs/load/delegation.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil

from stint.lab.fit import least_squares_slope
from stint.lab.processes import spawn_worker, stop_workers
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool

__all__ = ["DelegationCase", "DelegationResult", "run_delegation", "write_delegation"]

_SAMPLE_SECONDS = 0.05
_MIB = 1024 * 1024
_ENV = {
    "STINT_POLL_INTERVAL": "0.25",
    "STINT_LEASE_SECONDS": "30",
    "STINT_AUTO_MIGRATE": "false",
    "STINT_LOG_LEVEL": "warning",
}


@dataclass(frozen=True)
class DelegationCase:
    workers: int
    slots: int
    children: int
    child_ms: int

    @property
    def label(self) -> str:
        return f"{self.workers}x{self.slots}-n{self.children}-{self.child_ms}ms"

    @property
    def ideal_s(self) -> float:
        """Waves x child duration: every slot of the fleet runs children."""
        waves = math.ceil(self.children / (self.workers * self.slots))
        return waves * self.child_ms / 1000


@dataclass(frozen=True)
class DelegationResult:
    case: DelegationCase
    completed: int  # children whose turn succeeded
    parent_status: str
    end_to_end_s: float | None  # the parent turn: enqueued -> finished (database clock)
    ideal_s: float
    peak_running_children: int
    parent_held_slot_while_joining: int  # samples: running after its wait began, children ran
    peak_rss_mib_per_worker: list[float]
    peak_sum_rss_mib: float
    idle_sum_rss_mib: float  # the workers before the parent was queued

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.case.label}


async def _sample(pool: Pool, parent: UUID) -> tuple[int, bool]:
    """Children running now; whether the parent holds a slot although its join began."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM sessions WHERE parent_id = %(p)s AND status = 'running'),"
            " (SELECT status = 'running' FROM sessions WHERE id = %(p)s)"
            " AND EXISTS (SELECT FROM events WHERE session_id = %(p)s AND kind = 'wait.started')",
            {"p": parent},
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


async def _scalar(pool: Pool, sql: Any, *params: Any) -> Any:
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return None if row is None else row[0]


def _rss(procs: list[psutil.Process]) -> list[float]:
    found = []
    for proc in procs:
        try:
            found.append(proc.memory_info().rss / _MIB)
        except psutil.Error:
            found.append(0.0)
    return found


async def run_delegation(
    case: DelegationCase, target: ScratchTarget, pool: Pool, workspace: Path
) -> DelegationResult:
    """Start the workers, queue the parent, sample until it ended, stop the workers."""
    env = {
        **_ENV,
        "STINT_DATABASE_URL": target.conninfo,
        "STINT_SCHEMA": target.config.schema,
        "STINT_WORKSPACE": str(workspace),
    }
    await asyncio.to_thread(workspace.mkdir, parents=True, exist_ok=True)
    procs = [
        spawn_worker(
            env=env,
            args=["--slots", str(case.slots)],
            log_path=workspace / f"worker{i}.log",
        )
        for i in range(case.workers)
    ]
    watched = [psutil.Process(p.pid) for p in procs]
    try:
        # Registered workers are rows another process writes: there is no event to await.
        while await _scalar(pool, "SELECT count(*) FROM workers WHERE state = 'running'") < len(  # noqa: ASYNC110
            procs
        ):
            await asyncio.sleep(_SAMPLE_SECONDS)
        idle = sum(_rss(watched))
        queued = await ClientStore(target.config, pool).turns_enqueue(
            session_id=None,
            idempotency_key=f"delegation-{case.label}",
            turn_input={
                "min_wait_ms": 0,
                "spawn": {"count": case.children, "input": {"min_wait_ms": case.child_ms}},
            },
        )
        peaks = [0.0] * len(procs)
        peak_sum = 0.0
        peak_running = 0
        parent_held = 0  # samples where the parent ran after its join began, children running
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            sizes = _rss(watched)
            peaks = [max(a, b) for a, b in zip(peaks, sizes, strict=True)]
            peak_sum = max(peak_sum, sum(sizes))
            running, holding = await _sample(pool, queued.session_id)
            peak_running = max(peak_running, running)
            if running and holding:
                parent_held += 1
            if await _scalar(
                pool, "SELECT finished_at IS NOT NULL FROM turns WHERE id = %s", queued.turn_id
            ):
                break
            await asyncio.sleep(_SAMPLE_SECONDS)
        return await _result(
            case, pool, queued.session_id, queued.turn_id, peaks, peak_sum, peak_running,
            parent_held, idle,
        )  # fmt: skip
    finally:
        stop_workers(procs)


async def _result(
    case: DelegationCase,
    pool: Pool,
    parent: UUID,
    turn_id: UUID,
    peaks: list[float],
    peak_sum: float,
    peak_running: int,
    parent_held: int,
    idle: float,
) -> DelegationResult:
    completed = await _scalar(
        pool,
        "SELECT count(*) FROM children c JOIN turns t ON t.id = c.child_turn_id "
        "WHERE c.parent_id = %s AND t.status = 'succeeded'",
        parent,
    )
    status = await _scalar(pool, "SELECT status FROM turns WHERE id = %s", turn_id)
    seconds = await _scalar(
        pool,
        "SELECT extract(epoch FROM finished_at - enqueued_at)::float8 FROM turns WHERE id = %s",
        turn_id,
    )
    return DelegationResult(
        case=case,
        completed=int(completed),
        parent_status=str(status),
        end_to_end_s=None if seconds is None else round(float(seconds), 3),
        ideal_s=case.ideal_s,
        peak_running_children=peak_running,
        parent_held_slot_while_joining=parent_held,
        peak_rss_mib_per_worker=[round(p, 1) for p in peaks],
        peak_sum_rss_mib=round(peak_sum, 1),
        idle_sum_rss_mib=round(idle, 1),
    )


def marginal_rss_per_child(ladder: list[DelegationResult]) -> float | None:
    """MiB of the workers' peak sum RSS per extra concurrent child (least squares)."""
    points = [(float(r.case.children), r.peak_sum_rss_mib) for r in ladder]
    slope = least_squares_slope(points)
    return None if slope is None else round(slope, 3)


def write_delegation(
    out_dir: Path,
    cases: list[DelegationResult],
    ladder: list[DelegationResult],
    *,
    command: str,
    generated_at: str,
    environment: dict[str, Any],
) -> Path:
    """docs/load/delegation.json (the data) and delegation.md (rendered from it)."""
    per_child = marginal_rss_per_child(ladder)
    data = {
        "schema": 1,
        "generated_at": generated_at,
        "command": command,
        "environment": environment,
        "marginal_rss_mib_per_concurrent_child": per_child,
        "seed": {"pixir_mib_per_child": 6.5, "process_per_worker_mib_per_child": 96.8},
        "cases": [r.as_json() for r in cases],
        "ladder": [r.as_json() for r in ladder],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "delegation.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# Delegation: one parent, many children",
        "",
        f"Generated {generated_at} by:",
        "",
        "```",
        command,
        "```",
        "",
        "One parent turn spawns its children (`ctx.spawn`) and joins them (`ctx.join`),",
        "waiting slot-free; each child is a session with one scripted turn (one journaled",
        "effect, then its wait). End-to-end is the parent turn's enqueue to finish (database",
        "clock); the ideal is waves x child duration with every slot running children.",
        f"Machine: {environment.get('cpus')} CPUs shared with other work; figures are one run.",
        "",
        "| case | completed | parent | end-to-end | ideal | most children at once "
        "| parent held a slot while joining (samples) | peak RSS per worker | peak sum RSS "
        "| idle sum RSS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cases:
        lines.append(
            f"| {r.case.workers}x{r.case.slots}, {r.case.children} children of "
            f"{r.case.child_ms} ms | {r.completed}/{r.case.children} | {r.parent_status} | "
            f"{r.end_to_end_s} s | {r.ideal_s} s | {r.peak_running_children} | "
            f"{r.parent_held_slot_while_joining} | "
            f"{', '.join(f'{p} MiB' for p in r.peak_rss_mib_per_worker)} | "
            f"{r.peak_sum_rss_mib} MiB | {r.idle_sum_rss_mib} MiB |"
        )
    lines += [
        "",
        "The parent runs while it spawns (one statement per child, one after another) and",
        "holds no slot from its join on (the column counts samples where it did: none is",
        "the claim). Children start while later ones are still being spawned, so when",
        "spawning all of them takes about as long as a child runs, fewer than the fleet's",
        "slots run at once and end-to-end exceeds the one-wave ideal. The parent wakes once,",
        "when its last child's end is reported (the report wakes a claimer by NOTIFY), and",
        "replays its spawns from the journal before it reads the children's ends.",
        "",
        "## Marginal RSS per concurrent child",
        "",
        "One worker with 64 slots; N children at once (each waits long enough that all N",
        "run together), three repetitions per N; the slope of the workers' peak RSS over N:",
        "",
        f"**{per_child} MiB per concurrent child** (the seed: Pixir 6.5 MiB, process per",
        "worker 96.8 MiB). A child here is a session row, a turn and a slot's task in one",
        "worker process, not a process or an agent runtime of its own.",
        "",
        "| children at once | peak RSS | completed | end-to-end |",
        "|---|---|---|---|",
    ]
    for r in ladder:
        lines.append(
            f"| {r.case.children} | {r.peak_sum_rss_mib} MiB | {r.completed}/{r.case.children} "
            f"| {r.end_to_end_s} s |"
        )
    lines += ["", "Full figures: [delegation.json](delegation.json).", ""]
    path = out_dir / "delegation.md"
    path.write_text("\n".join(lines))
    return path
