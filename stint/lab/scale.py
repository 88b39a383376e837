"""The scale soak: 100,000 turns at a steady arrival rate, retention running.

What a long-lived deployment does to the hot path: history piles up (until
retention takes it), 10,000 sessions sit parked on questions, and the claim
and finish statements must cost the same at the end as at the start. Every
``window`` finished turns the run records the statements' mean times (from
pg_stat_statements), the queue's oldest wait, each worker's RSS, the tables'
sizes and PostgreSQL's CPU, so "flat" is a set of rows, not an adjective. The
end is judged by the usual checkers (no duplicate effect, contiguous logs from
their pruned heads, nothing lost).

The rate must be one the deployment sustains, or the soak measures a growing
backlog instead of a steady state: on the 2-core reference machine, with
PostgreSQL held to one CPU that also takes the enqueues, the scripted turn
saturates at about 145 turns/s (an offered 300/s gave 169/s enqueued, 145/s
finished, and a queue 18 s deep after 20,000 turns), so the default offers 120.
Each window reports what was enqueued beside what finished, so an overload shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from stint.lab.arrivals import evenly, produce
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.runner import WORKER_SETTINGS
from stint.lab.server_cpu import ServerCpu
from stint.ops.stats import percentile
from stint.store.client import ClientStore
from stint.store.errors import StoreError
from stint.store.probe import ProbeStore, StatementStat
from stint.store.worker_store import SqlWorkerStore

__all__ = ["PROBE_APPLICATION", "ScalePlan", "ScaleRun", "Window"]

PROBE_APPLICATION = "stint-load-probe"
"""The application_name of the soak's own probe connections: their server CPU is
the measurement's, reported apart from what the turns cost."""
_DAY = 86_400.0
_SAMPLE_SECONDS = 0.5
_PRODUCER_CONCURRENCY = 6  # of the producer's pool of 8 (the probe has its own)
# The statements whose cost must stay flat as history grows.
HOT = ("turns_claim", "turns_finish", "steps_start", "steps_finish", "leases_renew")


@dataclass(frozen=True)
class ScalePlan:
    """The run's shape; ``retain_seconds`` keeps history that long (then it is pruned)."""

    turns: int = 100_000
    workers: int = 4
    slots: int = 16
    rate: float = 120.0
    turns_per_session: int = 5
    parked: int = 10_000
    window: int = 10_000
    retain_seconds: float = 60.0
    prune_interval: float = 5.0

    @property
    def sessions(self) -> int:
        return -(-self.turns // self.turns_per_session)


@dataclass
class Window:
    """Figures of one window of finished turns."""

    finished: int
    seconds: float
    turns_per_s: float
    enqueued_per_s: float
    statements_ms: dict[str, float | None]
    oldest_ready_age_max_s: float | None
    worker_rss_mib: list[float]
    table_mib: dict[str, float]
    pg_cpu_seconds: float | None
    turns_per_pg_cpu_second: float | None
    pg_cpu_by_kind: dict[str, float] = field(default_factory=dict)
    turns_per_pg_cpu_second_without_probe: float | None = None
    statements_per_turn: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class ScaleRun:
    plan: ScalePlan
    windows: list[Window] = field(default_factory=list)
    parked_claim_ms: float | None = None
    queue_ages: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan),
            "claim_ms_with_parked_before_load": self.parked_claim_ms,
            "windows": [asdict(w) for w in self.windows],
            "queue_age_s": {
                "p50": percentile(self.queue_ages, 50),
                "p95": percentile(self.queue_ages, 95),
                "max": max(self.queue_ages, default=None),
            },
        }


_TOP_STATEMENTS = 15


def _per_turn(stats: dict[str, StatementStat], turns: int) -> dict[str, dict[str, float]]:
    """The statements that took the server's time in a window, most first: calls and
    execution milliseconds per finished turn (pg_stat_statements' own account)."""
    if turns <= 0:
        return {}
    ranked = sorted(stats.items(), key=lambda kv: -kv[1].calls * kv[1].mean_ms)
    return {
        name: {
            "calls": round(stat.calls / turns, 3),
            "exec_ms": round(stat.calls * stat.mean_ms / turns, 4),
        }
        for name, stat in ranked[:_TOP_STATEMENTS]
    }


class ScaleDriver:
    """Runs the plan against one migrated database; ``run`` returns the figures."""

    def __init__(
        self,
        plan: ScalePlan,
        *,
        client: ClientStore,
        probe: ProbeStore,
        runtime: SqlWorkerStore,
        env: dict[str, str],
        logs: Path,
        postmaster: Callable[[], int | None],
        cgroup_procs: list[Path],
        progress: Callable[[str], None],
    ) -> None:
        self.plan = plan
        self.client = client
        self.probe = probe
        self.runtime = runtime
        self.env = {
            **WORKER_SETTINGS,
            **env,
            "STINT_RETAIN_EVENTS_DAYS": str(plan.retain_seconds / _DAY),
            "STINT_RETAIN_TURNS_DAYS": str(plan.retain_seconds / _DAY),
            "STINT_PRUNE_INTERVAL": str(plan.prune_interval),
        }
        self.logs = logs
        self.postmaster = postmaster
        self.cgroup_procs = cgroup_procs
        self.progress = progress
        self.procs: list[Any] = []
        self.enqueued = 0

    async def run(self) -> ScaleRun:
        result = ScaleRun(self.plan)
        seeded = await self.probe.sessions_seed_parked(self.plan.parked)
        self.progress(f"{seeded} parked sessions seeded")
        result.parked_claim_ms = await self._claim_ms_now()
        sessions = [await self.client.sessions_create() for _ in range(self.plan.sessions)]
        self.procs = [
            spawn_worker(
                env=self.env,
                args=["--slots", str(self.plan.slots)],
                log_path=self.logs / f"worker{i}.log",
                cgroup_procs=self.cgroup_procs,
            )
            for i in range(self.plan.workers)
        ]
        producer = asyncio.create_task(self._produce(sessions))
        try:
            await self._watch(result, producer)
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
            stop_workers(self.procs)
        return result

    async def _claim_ms_now(self) -> float | None:
        """The claim's mean time over a few empty claims (nothing ready: the
        statement's cost with only parked and idle sessions around)."""
        await self.probe.statements_reset()
        for _ in range(50):
            await self.runtime.turns_claim(owner="probe", pins=[], limit=4, lease_seconds=30)
        stats = await self.probe.statements_mean(["turns_claim"])
        return round(stats["turns_claim"].mean_ms, 3) if "turns_claim" in stats else None

    async def _produce(self, sessions: list[Any]) -> None:
        """Enqueue at a steady rate, round robin over the sessions (``arrivals``)."""
        await produce(
            evenly(self.plan.rate, self.plan.turns),
            lambda n: self._enqueue(sessions[n % len(sessions)], n),
            concurrency=_PRODUCER_CONCURRENCY,
        )

    async def _enqueue(self, session: Any, n: int) -> None:
        while True:
            try:
                await self.client.turns_enqueue(
                    session_id=session, idempotency_key=f"t{n}", turn_input={"min_wait_ms": 0}
                )
                self.enqueued += 1
                return
            except StoreError as exc:
                self.progress(f"enqueue retried: {exc}")
                await asyncio.sleep(0.1)

    async def _watch(self, result: ScaleRun, producer: asyncio.Task[None]) -> None:
        await self.probe.statements_reset()
        window_start = time.monotonic()
        cpu_start = await self._server_cpu()
        base = 0
        enqueued_base = self.enqueued
        oldest: list[float] = []
        peak_rss: dict[int, float] = {}
        while base < self.plan.turns:
            await asyncio.sleep(_SAMPLE_SECONDS)
            if producer.done() and producer.exception() is not None:
                raise RuntimeError("the producer failed") from producer.exception()
            dead = [p.pid for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"worker(s) {dead} exited during the scale run")
            age = (await self.probe.queue_age()).oldest_ready_age
            if age is not None:
                oldest.append(age)
                result.queue_ages.append(age)
            for proc in self.procs:
                with contextlib.suppress(psutil.Error):
                    rss = psutil.Process(proc.pid).memory_info().rss / 2**20
                    peak_rss[proc.pid] = max(peak_rss.get(proc.pid, 0.0), rss)
            finished = await self._finished_count()
            if finished - base < self.plan.window and finished < self.plan.turns:
                continue
            now = time.monotonic()
            cpu = await self._server_cpu()
            by_kind = {} if cpu is None or cpu_start is None else cpu.since(cpu_start)
            used = round(sum(by_kind.values()), 2) if by_kind else None
            turns_cost = used - by_kind.get(PROBE_APPLICATION, 0.0) if used else None
            every = await self.probe.statements_by_name()
            stats = {name: every[name] for name in HOT if name in every}
            tables = await self.probe.table_sizes()
            turns = finished - base
            result.windows.append(
                Window(
                    finished=finished,
                    seconds=round(now - window_start, 2),
                    turns_per_s=round(turns / (now - window_start), 1),
                    enqueued_per_s=round((self.enqueued - enqueued_base) / (now - window_start), 1),
                    statements_ms={
                        name: round(stats[name].mean_ms, 3) if name in stats else None
                        for name in HOT
                    },
                    oldest_ready_age_max_s=round(max(oldest), 3) if oldest else None,
                    worker_rss_mib=[
                        round(peak_rss[p.pid], 1) for p in self.procs if p.pid in peak_rss
                    ],
                    table_mib={t.name: round(t.bytes / 2**20, 2) for t in tables},
                    pg_cpu_seconds=used,
                    turns_per_pg_cpu_second=round(turns / used, 1) if used else None,
                    pg_cpu_by_kind={
                        kind: round(seconds, 2)
                        for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1])
                    },
                    turns_per_pg_cpu_second_without_probe=(
                        round(turns / turns_cost, 1) if turns_cost else None
                    ),
                    statements_per_turn=_per_turn(every, turns),
                )
            )
            self.progress(f"{finished}/{self.plan.turns} turns: {result.windows[-1]}")
            base, window_start, cpu_start, oldest, peak_rss = finished, now, cpu, [], {}
            enqueued_base = self.enqueued
            await self.probe.statements_reset()

    async def _server_cpu(self) -> ServerCpu | None:
        """Every server process's CPU clock now, named (None: no postmaster to read)."""
        postmaster = self.postmaster()
        if postmaster is None:
            return None
        return ServerCpu.read(postmaster, await self.probe.backend_kinds())

    async def _finished_count(self) -> int:
        """Finished turns so far, pruned ones included (they finished too)."""
        progress = await self.probe.turns_progress()
        return progress.finished + await self.probe.turns_pruned()
