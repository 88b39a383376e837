"""The reliability soak: real workers under a bounded random mix of faults.

Sessions arrive over a few minutes while a fault injector, every few seconds,
picks one of: kill -9 a worker (a replacement starts), SIGSTOP a worker past
its lease, restart PostgreSQL (fast, or immediate stop + start), or switch a
worker's TCP proxy to delay, blackhole or reset. Afterwards every fault is
restored, the run quiesces, and Stint's checkers judge it, with the faults
that touched each session as the allowance for retries. Recovery time is
measured per fault: for a worker fault, until every lease the victim held has
a new epoch; for a server-wide fault, until a turn finishes again.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from stint.lab.processes import spawn_worker
from stint.lab.proxy import FaultProxy
from stint.ops.checks import CheckReport, run_checks
from stint.ops.stats import percentile
from stint.postgres.throwaway import ThrowawayCluster
from stint.store.client import ClientStore
from stint.store.probe import ProbeStore
from stint.store.vocabulary import TurnStatus

__all__ = ["FaultRecord", "Soak", "SoakPlan"]

_POLL_S = 0.05
FAULT_KINDS = (
    "kill9",
    "sigstop",
    "pg_restart_fast",
    "pg_stop_immediate",
    "proxy_delay",
    "proxy_blackhole",
    "proxy_reset",
)


@dataclass(frozen=True)
class SoakPlan:
    """How big and how long: bounded in count and time, reproducible by seed."""

    seed: int = 20261130
    workers: int = 3
    slots: int = 4
    sessions: int = 300
    arrival_seconds: float = 120.0
    lease_seconds: float = 2.0
    fault_every: tuple[float, float] = (4.0, 8.0)
    settle_seconds: float = 180.0


@dataclass
class FaultRecord:
    kind: str
    at: float  # epoch seconds (this machine's clock, which PostgreSQL shares)
    target: str
    touched: list[UUID] = field(default_factory=list)
    recovery_s: float | None = None


@dataclass
class _Worker:
    name: str
    proxy: FaultProxy
    proc: subprocess.Popen[bytes]


class Soak:
    """Drive one soak against ``cluster`` with workers behind their own proxies."""

    def __init__(
        self,
        plan: SoakPlan,
        *,
        cluster: ThrowawayCluster,
        client: ClientStore,
        probe: ProbeStore,
        env: dict[str, str],
        dbname: str,
        logs: Path,
    ) -> None:
        self.plan = plan
        self.cluster = cluster
        self.client = client
        self.probe = probe
        self.env = env
        self.dbname = dbname
        self.logs = logs
        self.rng = random.Random(plan.seed)
        self.workers: list[_Worker] = []
        self.faults: list[FaultRecord] = []
        self.acknowledged: list[UUID] = []
        self._generation = 0

    # -- workers -------------------------------------------------------------

    async def start_worker(self, proxy: FaultProxy | None = None) -> _Worker:
        if proxy is None:
            proxy = FaultProxy("127.0.0.1", self.cluster.port)
            await proxy.start()
        self._generation += 1
        name = f"soak-w{self._generation}"
        conninfo = f"host=127.0.0.1 port={proxy.port} dbname={self.dbname} user=postgres"
        proc = spawn_worker(
            env={**self.env, "STINT_DATABASE_URL": conninfo, "STINT_WORKER_ID": name},
            args=["--slots", str(self.plan.slots)],
            log_path=self.logs / f"{name}.log",
        )
        worker = _Worker(name, proxy, proc)
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[_Worker]:
        return [w for w in self.workers if w.proc.poll() is None]

    # -- arrivals ------------------------------------------------------------

    async def produce(self) -> None:
        """Sessions arrive evenly over the arrival window, one to three turns each."""
        gap = self.plan.arrival_seconds / self.plan.sessions
        for i in range(self.plan.sessions):
            session_id = None
            for t in range(self.rng.randint(1, 3)):
                turn_input = {"min_wait_ms": self.rng.randint(50, 400)}

                async def enqueue(
                    s: UUID | None = session_id, k: str = f"{i}-{t}", inp: Any = turn_input
                ) -> Any:
                    return await self.client.turns_enqueue(
                        session_id=s, idempotency_key=k, turn_input=inp
                    )

                result = await self._retrying(enqueue)
                session_id = result.session_id
            assert session_id is not None
            self.acknowledged.append(session_id)
            await asyncio.sleep(gap)

    async def _retrying(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """Producers retry through server restarts; the idempotency key makes it safe."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return await call()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    # -- faults --------------------------------------------------------------

    async def inject(self, until: float) -> None:
        while time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(*self.plan.fault_every))
            kind = self.rng.choice(FAULT_KINDS)
            await getattr(self, f"_fault_{kind}")()

    async def _held(self, owner: str) -> dict[UUID, int]:
        return dict(await self._retrying(lambda: self.probe.sessions_held_by(owner=owner)))

    async def _worker_fault(self, kind: str, act: Callable[[_Worker], Awaitable[None]]) -> None:
        live = self.live_workers()
        if not live:
            return
        victim = self.rng.choice(live)
        held = await self._held(victim.name)
        record = FaultRecord(kind, time.time(), victim.name, list(held))
        self.faults.append(record)
        started = time.monotonic()
        await act(victim)
        await self._until_reowned(held)
        record.recovery_s = round(time.monotonic() - started, 3) if held else None

    async def _until_reowned(self, held: dict[UUID, int]) -> None:
        """Every lease the victim held was taken over or given back (a new epoch)."""
        deadline = time.monotonic() + 120
        while held and time.monotonic() < deadline:
            still = await self._retrying(lambda: self.probe.sessions_owned_since(held))
            if not still:
                return
            await asyncio.sleep(_POLL_S)

    async def _fault_kill9(self) -> None:
        async def kill(victim: _Worker) -> None:
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            await self.start_worker(victim.proxy)

        await self._worker_fault("kill9", kill)

    async def _fault_sigstop(self) -> None:
        async def stop(victim: _Worker) -> None:
            victim.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(self.plan.lease_seconds + 1)  # the fault's length, not a sync
            victim.proc.send_signal(signal.SIGCONT)

        await self._worker_fault("sigstop", stop)

    async def _fault_proxy_blackhole(self) -> None:
        async def blackhole(victim: _Worker) -> None:
            victim.proxy.set_mode("blackhole")
            await asyncio.sleep(self.plan.lease_seconds + 2)  # the outage's length
            victim.proxy.set_mode("pass")

        await self._worker_fault("proxy_blackhole", blackhole)

    async def _fault_proxy_reset(self) -> None:
        async def reset(victim: _Worker) -> None:
            victim.proxy.set_mode("reset")
            victim.proxy.set_mode("pass")

        await self._worker_fault("proxy_reset", reset)

    async def _fault_proxy_delay(self) -> None:
        async def delay(victim: _Worker) -> None:
            victim.proxy.set_mode("delay", delay_ms=150, jitter_ms=100)
            await asyncio.sleep(3)  # the slow spell's length
            victim.proxy.set_mode("pass")

        await self._worker_fault("proxy_delay", delay)

    async def _server_fault(self, kind: str, act: Callable[[], None]) -> None:
        touched = await self._retrying(self.probe.sessions_in_flight)
        record = FaultRecord(kind, time.time(), "postgresql", list(touched))
        self.faults.append(record)
        await asyncio.to_thread(act)
        restored = time.time()
        started = time.monotonic()
        deadline = started + 120
        while time.monotonic() < deadline:
            finished = await self._retrying(lambda: self.probe.turns_finished_after(restored))
            if finished or not touched:
                break
            await asyncio.sleep(_POLL_S)
        record.recovery_s = round(time.monotonic() - started, 3)

    async def _fault_pg_restart_fast(self) -> None:
        await self._server_fault("pg_restart_fast", lambda: self.cluster.restart(mode="fast"))

    async def _fault_pg_stop_immediate(self) -> None:
        def bounce() -> None:
            self.cluster.stop(mode="immediate")
            time.sleep(2)  # the outage's length
            self.cluster.start()

        await self._server_fault("pg_stop_immediate", bounce)

    # -- the end -------------------------------------------------------------

    async def quiesce(self) -> None:
        """Every fault restored; wait until no unfinished turn remains."""
        for worker in self.workers:
            worker.proxy.set_mode("pass")
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGCONT)
        if not self.live_workers():
            await self.start_worker()
        deadline = time.monotonic() + self.plan.settle_seconds
        while await self._retrying(self.probe.sessions_in_flight):
            if time.monotonic() > deadline:
                raise TimeoutError("the soak did not quiesce in time")
            await asyncio.sleep(0.2)

    def faults_per_session(self) -> dict[UUID, int]:
        counts: Counter[UUID] = Counter()
        for fault in self.faults:
            counts.update(fault.touched)
        return dict(counts)

    async def judge(self, pool: Any, journals: Path) -> CheckReport:
        return await run_checks(pool, journals=journals, faults=self.faults_per_session())

    def figures(self, report: CheckReport, turns: int, seconds: float) -> dict[str, Any]:
        recoveries = [f.recovery_s for f in self.faults if f.recovery_s is not None]
        by_name = {c.name: c for c in report.checks}
        statuses = by_name["no_lost_or_stuck_turn"].evidence["turns_by_status"]
        lost = sum(n for status, n in statuses.items() if not TurnStatus(status).terminal)
        duplicated = len(by_name["no_duplicate_effects"].evidence["duplicates"])
        return {
            "seed": self.plan.seed,
            "duration_s": round(seconds, 1),
            "sessions": len(self.acknowledged),
            "turns": turns,
            "faults_injected": len(self.faults),
            "faults_by_kind": dict(Counter(f.kind for f in self.faults)),
            "recoveries_measured": len(recoveries),
            "recovery_p50_s": percentile(recoveries, 50),
            "recovery_p99_s": percentile(recoveries, 99),
            "recovery_max_s": max(recoveries, default=None),
            "turns_by_status": statuses,
            "lost_turns": lost,
            "duplicated_effects": duplicated,
            "checks_passed": report.passed,
        }
