"""The delegation benchmark: one root turn spawns children (and they, grandchildren)
and joins them.

Beside the seed's audit64 (Pixir: one agent delegating 64 workers; 6.5 MiB of
RSS per extra concurrent child, 96.8 MiB for process-per-worker), on Stint's
own primitives: each leaf is a session with one scripted turn (one journaled
effect, then ``min_wait_ms``); a parent spawns its children in one statement
(``ctx.spawn_many``, or one ``ctx.spawn`` each for the before figure) and
waits slot-free (``ctx.join``). A case reports completion per level, end-to-end
time from the database clock against the ideal (leaf waves x leaf duration),
the most descendants running at once, samples where a joining parent held a
slot, the workers' peak RSS and PostgreSQL's CPU, and ``stint check`` after.
``pytest loadtest --run-load -k delegation`` runs the cases, the tree and a
ladder and writes docs/load/delegation.md (stint/lab/delegation_report.py).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil

from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.server_cpu import pg_cpu_seconds
from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.probe import DelegationLevel, ProbeStore

__all__ = ["DelegationCase", "DelegationResult", "run_delegation"]

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
    """``children`` below the root, each with ``grandchildren`` of its own (0: one
    level); the leaves wait ``child_ms``, the parents none. ``spawn``: ``many``
    (one statement per parent) or ``one`` (one statement per child)."""

    workers: int
    slots: int
    children: int
    child_ms: int
    grandchildren: int = 0
    spawn: str = "many"

    @property
    def label(self) -> str:
        shape = f"n{self.children}" + (f"x{self.grandchildren}" if self.grandchildren else "")
        one = "-one-by-one" if self.spawn == "one" else ""
        return f"{self.workers}x{self.slots}-{shape}-{self.child_ms}ms{one}"

    @property
    def leaves(self) -> int:
        return self.children * self.grandchildren if self.grandchildren else self.children

    @property
    def nodes(self) -> int:
        """Sessions below the root: its children and theirs."""
        return self.children + self.children * self.grandchildren

    @property
    def ideal_s(self) -> float:
        """Leaf waves x leaf duration, every slot of the fleet running leaves: the
        parents above them run for no time of their own (no wait, one effect) and
        hold no slot while they join, so they add nothing to the ideal."""
        waves = math.ceil(self.leaves / (self.workers * self.slots))
        return waves * self.child_ms / 1000

    def root_input(self) -> dict[str, Any]:
        one = {"one_by_one": True} if self.spawn == "one" else {}
        below: dict[str, Any] = {"min_wait_ms": self.child_ms}
        if self.grandchildren:
            below = {
                "min_wait_ms": 0,
                "spawn": {"count": self.grandchildren, "input": below, **one},
            }
        return {"min_wait_ms": 0, "spawn": {"count": self.children, "input": below, **one}}


@dataclass(frozen=True)
class DelegationResult:
    case: DelegationCase
    completed: int  # sessions below the root whose spawned turn succeeded
    levels: list[dict[str, int]]  # per level: spawned, ended, succeeded
    parent_status: str
    end_to_end_s: float | None  # the root turn: enqueued -> finished (database clock)
    ideal_s: float
    phases: dict[str, float | None]  # where end-to-end went: DelegationPhases, rounded
    peak_running_children: int  # descendants running at once
    parent_held_slot_while_joining: int  # samples: a parent ran after its join began, a child ran
    peak_rss_mib_per_worker: list[float]
    peak_sum_rss_mib: float
    idle_sum_rss_mib: float  # the workers before the root was queued
    postgres_cpu_s: float | None  # the root queued -> ended (None: not a local server)
    checks_passed: bool
    failed_checks: list[str]
    load_1m: float  # the machine's 1-minute load average as the case began

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.case.label}


def _rss(procs: list[psutil.Process]) -> list[float]:
    found = []
    for proc in procs:
        try:
            found.append(proc.memory_info().rss / _MIB)
        except psutil.Error:
            found.append(0.0)
    return found


@dataclass
class _Samples:
    peaks: list[float]
    peak_sum: float = 0.0
    peak_running: int = 0
    parent_held: int = 0


async def run_delegation(
    case: DelegationCase,
    target: ScratchTarget,
    pool: Pool,
    workspace: Path,
    *,
    postmaster: int | None = None,
) -> DelegationResult:
    """Start the workers, queue the root, sample until it ended, stop the workers,
    then run ``stint check``'s checks on what they left."""
    env = {
        **_ENV,
        "STINT_DATABASE_URL": target.conninfo,
        "STINT_SCHEMA": target.config.schema,
        "STINT_WORKSPACE": str(workspace),
    }
    load_1m = os.getloadavg()[0]
    probe = ProbeStore(target.config, pool)
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
        while await probe.workers_running() < len(procs):  # noqa: ASYNC110
            await asyncio.sleep(_SAMPLE_SECONDS)
        idle = sum(_rss(watched))
        cpu_before = pg_cpu_seconds(postmaster)
        queued = await ClientStore(target.config, pool).turns_enqueue(
            session_id=None,
            idempotency_key=f"delegation-{case.label}",
            turn_input=case.root_input(),
        )
        samples = await _sample_until_done(probe, watched, queued.session_id, queued.turn_id)
        cpu_after = pg_cpu_seconds(postmaster)
    finally:
        stop_workers(procs)
    outcome = await probe.turn_outcome(turn_id=queued.turn_id)
    levels = await probe.delegation_levels(root=queued.session_id)
    phases = await probe.delegation_phases(root=queued.session_id, turn_id=queued.turn_id)
    report = await run_checks(pool, journals=workspace / "journals")
    used = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return DelegationResult(
        case=case,
        completed=sum(level.succeeded for level in levels),
        levels=[_level(level) for level in levels],
        parent_status=outcome.status,
        end_to_end_s=None if outcome.seconds is None else round(outcome.seconds, 3),
        ideal_s=case.ideal_s,
        phases={k: None if v is None else round(v, 3) for k, v in asdict(phases).items()},
        peak_running_children=samples.peak_running,
        parent_held_slot_while_joining=samples.parent_held,
        peak_rss_mib_per_worker=[round(p, 1) for p in samples.peaks],
        peak_sum_rss_mib=round(samples.peak_sum, 1),
        idle_sum_rss_mib=round(idle, 1),
        postgres_cpu_s=None if used is None else round(used, 2),
        checks_passed=report.passed,
        failed_checks=[check.name for check in report.checks if not check.passed],
        load_1m=round(load_1m, 2),
    )


async def _sample_until_done(
    probe: ProbeStore, watched: list[psutil.Process], root: UUID, turn_id: UUID
) -> _Samples:
    """Every 50 ms: the workers' RSS, descendants running, joining parents holding a slot."""
    samples = _Samples(peaks=[0.0] * len(watched))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        sizes = _rss(watched)
        samples.peaks = [max(a, b) for a, b in zip(samples.peaks, sizes, strict=True)]
        samples.peak_sum = max(samples.peak_sum, sum(sizes))
        now = await probe.delegation_sample(root=root)
        samples.peak_running = max(samples.peak_running, now.running)
        samples.parent_held += now.holding
        if (await probe.turn_outcome(turn_id=turn_id)).finished:
            break
        await asyncio.sleep(_SAMPLE_SECONDS)
    return samples


def _level(level: DelegationLevel) -> dict[str, int]:
    return {
        "level": level.level,
        "spawned": level.spawned,
        "ended": level.ended,
        "succeeded": level.succeeded,
    }
