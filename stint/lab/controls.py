"""``python -m stint.lab.controls``: what the session controls cost, as figures.

1. Cancel latency: a worker runs N gated turns; each is cancelled in turn with
   ``stint cancel``'s code path; latency = the turn.cancelled event's database
   time minus the moment the request was made (same machine, same clock).
2. Ask to slot reuse: a 1-slot worker; a turn asks and parks while another
   session waits; latency = the waiting turn's turn.started minus the
   approval.requested event.
3. Parked sessions: P sessions parked on a question through real workers;
   their rows and bytes, and the claim statement's time with them present
   (against the same with none parked).
Writes ``docs/load/controls.json`` and ``docs/load/controls.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import uvloop

from stint.lab.environment import DOCS, environment
from stint.lab.processes import spawn_worker, stop_workers
from stint.ops.stats import percentile
from stint.postgres.scratch import ScratchDatabases, ScratchTarget
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.controls import ControlStore
from stint.store.pool import Pool, open_pool
from stint.store.probe import ProbeStore
from stint.store.vocabulary import ControlAction
from stint.store.worker_store import SqlWorkerStore

__all__ = ["main"]

_POLL_S = 0.002
_BATCH = 16


async def _until(probe: Callable[[], Awaitable[bool]], what: str, within: float = 600) -> None:
    async with asyncio.timeout(within):
        # The state changes in other processes: polling the database is the signal.
        while not await probe():  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)


def _ms(values: list[float]) -> dict[str, float | None]:
    def pick(pct: float) -> float | None:
        found = percentile(values, pct)
        return None if found is None else round(found * 1000, 1)

    return {"n": len(values), "p50_ms": pick(50), "p95_ms": pick(95), "max_ms": pick(100)}


class Bench:
    def __init__(self, target: ScratchTarget, pool: Pool, workspace: Path) -> None:
        self.config: StoreConfig = target.config
        self.client = ClientStore(self.config, pool)
        self.probe = ProbeStore(self.config, pool)
        self.controls = ControlStore(self.config, pool)
        self.runtime = SqlWorkerStore(self.config, pool, concurrency=1)
        self.env = {
            "STINT_DATABASE_URL": self.config.conninfo,
            "STINT_SCHEMA": self.config.schema,
            "STINT_WORKSPACE": str(workspace),
            "STINT_AUTO_MIGRATE": "false",
            "STINT_LOG_LEVEL": "warning",
        }

    async def _kind_count(self, kind: str) -> int:
        return len(await self.probe.event_times(kind=kind))

    async def cancel_latency(self, count: int) -> dict[str, Any]:
        worker = spawn_worker(env=self.env, args=["--slots", str(count)])
        try:
            sessions = [
                (
                    await self.client.turns_enqueue(
                        session_id=None,
                        idempotency_key="c",
                        turn_input={"min_wait_ms": 0, "gate": "never"},
                    )
                ).session_id
                for _ in range(count)
            ]

            async def all_running() -> bool:
                return await self._kind_count("tool.returned") >= count

            await _until(all_running, "every turn running")
            requested: dict[UUID, float] = {}
            for done, sid in enumerate(sessions, start=1):
                requested[sid] = time.time()
                await self.controls.control(
                    session_id=sid, action=ControlAction.CANCEL, reason="bench"
                )

                async def landed(n: int = done) -> bool:
                    return await self._kind_count("turn.cancelled") >= n

                await _until(landed, "the cancel landed")
            cancelled = await self.probe.event_times(kind="turn.cancelled")
        finally:
            stop_workers([worker])
        return _ms([cancelled[sid] - requested[sid] for sid in sessions])

    async def ask_to_slot_reuse(self, pairs: int) -> dict[str, Any]:
        worker = spawn_worker(env=self.env, args=["--slots", "1"])
        latencies = []
        try:
            for _ in range(pairs):
                asker = await self.client.turns_enqueue(
                    session_id=None,
                    idempotency_key="a",
                    turn_input={"min_wait_ms": 0, "ask": "ok?"},
                )
                waiter = await self.client.turns_enqueue(
                    session_id=None,
                    idempotency_key="w",
                    turn_input={"min_wait_ms": 0},
                )

                async def waiter_started(sid: UUID = waiter.session_id) -> bool:
                    return sid in await self.probe.event_times(kind="turn.started")

                await _until(waiter_started, "the waiting session started")
                asked = await self.probe.event_times(kind="approval.requested")
                started = await self.probe.event_times(kind="turn.started")
                latencies.append(started[waiter.session_id] - asked[asker.session_id])
        finally:
            stop_workers([worker])
        return _ms(latencies)

    async def claim_times(self, ready: int) -> dict[str, Any]:
        """Time the claim statement alone: ``ready`` sessions claimed one at a time."""
        for _ in range(ready):
            await self.client.turns_enqueue(session_id=None, idempotency_key="r", turn_input={})
        await self.probe.table_footprint()  # VACUUM (ANALYZE) first, as autovacuum would
        times = []
        for _ in range(ready):
            started = time.perf_counter()
            await self.runtime.turns_claim(owner="probe", pins=[], limit=1, lease_seconds=60)
            times.append(time.perf_counter() - started)
        return _ms(times)

    async def park(self, count: int) -> dict[str, Any]:
        worker = spawn_worker(env=self.env, args=["--slots", "32"])
        started = time.monotonic()
        try:
            for first in range(0, count, _BATCH):  # bounded: the pool has 16 connections
                await asyncio.gather(
                    *(
                        self.client.turns_enqueue(
                            session_id=None,
                            idempotency_key="p",
                            turn_input={"min_wait_ms": 0, "ask": "approve?"},
                        )
                        for _ in range(min(_BATCH, count - first))
                    )
                )

            async def all_parked() -> bool:
                return (await self.client.status()).sessions.get("parked", 0) >= count

            await _until(all_parked, "every session parked", within=1800)
            seconds = time.monotonic() - started
        finally:
            stop_workers([worker])
        footprint = await self.probe.table_footprint()
        return {
            "parked_sessions": count,
            "seconds_to_park_all": round(seconds, 1),
            "tables": {t.name: {"rows": t.rows, "bytes": t.bytes} for t in footprint},
            "total_bytes": sum(t.bytes for t in footprint),
        }


async def _measure(cancels: int, pairs: int, parked: int) -> dict[str, Any]:
    template = ThrowawayTemplate(durable=True)
    cluster = template.new_cluster()
    try:
        scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
        await scratch.prepare()
        results: dict[str, Any] = {}
        for name in ("controls", "baseline"):
            target = await scratch.create()
            pool = await open_pool(target.config, ROLE_CLI, min_size=2, max_size=16)
            bench = Bench(target, pool, Path(tempfile.mkdtemp(prefix="stint-controls-")))
            try:
                if name == "controls":
                    results["cancel_latency"] = await bench.cancel_latency(cancels)
                    results["ask_to_slot_reuse"] = await bench.ask_to_slot_reuse(pairs)
                    results["parked"] = await bench.park(parked)
                    results["claim_with_parked"] = await bench.claim_times(100)
                else:
                    results["claim_without_parked"] = await bench.claim_times(100)
            finally:
                await pool.close()
        return results
    finally:
        template.cleanup()


def _markdown(report: dict[str, Any]) -> str:
    r = report["results"]
    park = r["parked"]
    rows = "\n".join(
        f"| {label} | {_row(r[key])}"
        for label, key in (
            ("cancel: request to `turn.cancelled` (running turn, NOTIFY path)", "cancel_latency"),
            ("ask: `approval.requested` to the next `turn.started` (1 slot)", "ask_to_slot_reuse"),
            (f"claim statement, {park['parked_sessions']} parked sessions", "claim_with_parked"),
            ("claim statement, no parked sessions", "claim_without_parked"),
        )
    )
    tables = "\n".join(
        f"| {name} | {t['rows']} | {t['bytes'] / 2**20:.1f} MiB |"
        for name, t in park["tables"].items()
    )
    return f"""# Session controls: measured costs

Made by `{report["command"]}` on {report["generated_at"]} (durable throwaway PostgreSQL,
real `worker` processes, {report["environment"]["cpus"]} CPUs). Latencies use the database
clock for the event and the same machine's clock for the request.

| figure | n | p50 | p95 | max |
| --- | --- | --- | --- | --- |
{rows}

{park["parked_sessions"]} sessions parked on a question through real workers in
{park["seconds_to_park_all"]} s cost only rows: {park["total_bytes"] / 2**20:.1f} MiB in all,
no slot, no connection, no process.

| table | rows | size |
| --- | --- | --- |
{tables}
"""


def _row(figures: dict[str, Any]) -> str:
    cells = [str(figures["n"])] + [f"{figures[k]} ms" for k in ("p50_ms", "p95_ms", "max_ms")]
    return " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.controls", description=__doc__)
    parser.add_argument("--cancels", type=int, default=20, help="cancels to time (20)")
    parser.add_argument("--pairs", type=int, default=10, help="ask/slot-reuse pairs (10)")
    parser.add_argument("--parked", type=int, default=10_000, help="sessions to park (10000)")
    args = parser.parse_args(argv)
    results = uvloop.run(_measure(args.cancels, args.pairs, args.parked))
    report = {
        "schema_version": 1,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python -m stint.lab.controls " + " ".join(argv or sys.argv[1:]),
        "environment": environment(),
        "results": results,
    }
    (DOCS / "load").mkdir(parents=True, exist_ok=True)
    (DOCS / "load" / "controls.json").write_text(json.dumps(report, indent=2) + "\n")
    (DOCS / "load" / "controls.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
