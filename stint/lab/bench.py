"""``make bench``: zero-wait turns through real workers, reported as figures.

For each configuration (the scripted fixture at 1 worker x 32 slots and 2
workers x 4 slots, and the agents harness ``stint.agents:chat`` at 1 x 32, by
default): a fresh durable throwaway PostgreSQL; W real ``worker`` processes,
registered, then paused (SIGSTOP) while the turns are enqueued, then resumed
and measured until every turn finished. Figures: turns/s from PostgreSQL audit
times; worker CPU ms per turn and peak RSS per worker (psutil, sampled every 50
ms; the finished count every 250 ms) and USS per worker at the end (the
memory no other process shares); PostgreSQL's CPU ms per turn (the
postmaster and every backend, exited ones included) and from the two the CPU
ceiling: the turns/s this machine's cores could reach if the workers and
PostgreSQL used all of them and nothing waited; database statements per turn
from pg_stat_statements (each Stint statement is one round trip and one
autocommit transaction; claims, lease renewals and shutdown are included); how
often a statement waited for one of the worker's few pool connections and for
how long, scraped from each worker's ``/metrics`` at the end (so the workers
run as deployed: health port and metrics on). Writes ``docs/load/bench/latest.json``
and appends a line per configuration to ``docs/load/benchmarks.md``.

The agents harness runs the load test's turn (``LOAD_SCRIPT``: a model call
asking for the native journal tool, the tool, a model call for the reply)
against the fake OpenAI-compatible provider in a thread of this process, with
no latency, so its figures are the harness's own cost; each of its results
also gives its worker CPU per turn over the scripted fixture's at the same
workers x slots (``cpu_x_scripted``; issue 27's goal: at most 1.5).
``--worker-prefix`` starts each worker under a command that execs it
(``valgrind --tool=callgrind``: instruction counts, stable on a shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from stint.lab.bench_compare import comparison_lines, last_committed
from stint.lab.environment import DOCS
from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import LOAD_SCRIPT
from stint.lab.free_port import free_port
from stint.lab.processes import spawn_worker, stop_workers
from stint.lab.server_cpu import pg_cpu_seconds
from stint.lab.workload import AGENT_TURN_INPUT, AGENTS_HARNESS, agent_env
from stint.postgres.scratch import ScratchDatabases, ScratchTarget
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["main"]

SCHEMA_VERSION = 2  # 2: each result names its harness; agents results carry cpu_x_scripted
SCRIPTED = "scripted"
AGENTS = "agents"
_SAMPLE_SECONDS = 0.05
_SAMPLES_PER_POLL = 5
_TURNS_PER_SESSION = 10


@dataclass(frozen=True)
class BenchConfig:
    """One measured configuration: which harness, how many workers and slots each."""

    harness: str
    workers: int
    slots: int
    turns: int

    @property
    def label(self) -> str:
        shape = f"{self.workers}x{self.slots}"
        return shape if self.harness == SCRIPTED else f"{shape} {self.harness}"


@dataclass(frozen=True)
class BenchResult:
    harness: str
    workers: int
    slots: int
    turns: int
    turns_per_second: float
    cpu_ms_per_turn: float
    postgres_cpu_ms_per_turn: float
    cpu_ceiling_turns_per_second: float
    peak_rss_mib_per_worker: float
    uss_mib_per_worker: float
    statements_per_turn: float
    failed_turns: int
    pool_borrows_waited: float
    pool_wait_ms_per_turn: float
    cpu_x_scripted: float | None = None
    """Worker CPU per turn over the scripted fixture's in the same run and shape."""


@dataclass(frozen=True)
class PoolWait:
    """One worker's pool counters from its ``/metrics``."""

    borrows: float
    queued: float
    seconds: float


def _pool_wait(port: int) -> PoolWait:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return PoolWait(
        borrows=values.get("stint_pool_requests_total", 0.0),
        queued=values.get("stint_pool_requests_queued_total", 0.0),
        seconds=values.get("stint_pool_wait_seconds_total", 0.0),
    )


async def _enqueue_all(client: ClientStore, turns: int, turn_input: dict[str, Any]) -> None:
    sessions = max(1, turns // _TURNS_PER_SESSION)

    async def one_session(i: int) -> None:
        session_id = None
        for t in range(turns // sessions):
            result = await client.turns_enqueue(
                session_id=session_id,
                idempotency_key=f"{i}-{t}",
                turn_input=turn_input,
            )
            session_id = result.session_id

    await asyncio.gather(*(one_session(i) for i in range(sessions)))


async def _workers_registered(probe: ProbeStore, expected: int) -> None:
    async with asyncio.timeout(120):
        # Another process registers them: polling the table is the only signal.
        while await probe.workers_running() < expected:  # noqa: ASYNC110
            await asyncio.sleep(_SAMPLE_SECONDS)


@contextmanager
def _harness_env(harness: str) -> Iterator[tuple[dict[str, str], dict[str, Any]]]:
    """The workers' harness settings and the turn input; for the agents harness, the
    fake provider (no latency) serves from a thread of this process meanwhile."""
    if harness == SCRIPTED:
        yield {}, {"min_wait_ms": 0}
        return
    with FakeProvider(LOAD_SCRIPT).running() as url:
        yield agent_env(AGENTS_HARNESS, url), dict(AGENT_TURN_INPUT)


async def run_one(
    target: ScratchTarget,
    postmaster: int,
    bench: BenchConfig,
    *,
    worker_prefix: Sequence[str] = (),
) -> BenchResult:
    with _harness_env(bench.harness) as (harness_env, turn_input):
        return await _run_one(target, postmaster, bench, harness_env, turn_input, worker_prefix)


async def _run_one(
    target: ScratchTarget,
    postmaster: int,
    bench: BenchConfig,
    harness_env: dict[str, str],
    turn_input: dict[str, Any],
    worker_prefix: Sequence[str],
) -> BenchResult:
    config: StoreConfig = target.config
    workers, slots, turns = bench.workers, bench.slots, bench.turns
    workspace = Path(tempfile.mkdtemp(prefix="stint-bench-"))
    env = {
        "STINT_DATABASE_URL": config.conninfo,
        "STINT_SCHEMA": config.schema,
        "STINT_WORKSPACE": str(workspace),
        "STINT_LOG_LEVEL": "warning",
        "STINT_AUTO_MIGRATE": "false",
        **harness_env,
    }
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=8)
    client = ClientStore(config, pool)
    probe = ProbeStore(config, pool)
    ports = [free_port() for _ in range(workers)]
    procs: list[subprocess.Popen[bytes]] = [
        spawn_worker(
            env={**env, "STINT_HEALTH_PORT": str(port)},
            args=["--slots", str(slots)],
            prefix=worker_prefix,
        )
        for port in ports
    ]
    try:
        await _workers_registered(probe, workers)
        handles = [psutil.Process(p.pid) for p in procs]
        for p in procs:
            p.send_signal(signal.SIGSTOP)
        await _enqueue_all(client, turns, turn_input)
        cpu_before = sum(_cpu(h) for h in handles)
        postgres_before = _server_cpu(postmaster)
        await probe.statements_reset()
        for p in procs:
            p.send_signal(signal.SIGCONT)
        peak_rss = 0
        samples = 0
        # RSS every sample, the progress count (a scan of turns: PostgreSQL CPU that
        # is counted against the turns) every few.
        while samples % _SAMPLES_PER_POLL or (await probe.turns_progress()).finished < turns:
            peak_rss = max(peak_rss, *(h.memory_info().rss for h in handles))
            samples += 1
            await asyncio.sleep(_SAMPLE_SECONDS)
        cpu = sum(_cpu(h) for h in handles) - cpu_before
        # USS (the pages no other process shares: what one more worker costs) is
        # read once, at the end: psutil reads /proc/PID/smaps for it, too slow to sample.
        uss = max(h.memory_full_info().uss for h in handles)
        postgres_cpu = _server_cpu(postmaster) - postgres_before
        timings = await probe.turns_timings()
        waits = [await asyncio.to_thread(_pool_wait, port) for port in ports]
        codes = stop_workers(procs)
        if any(codes):
            raise RuntimeError(f"bench: workers exited with {codes}")
        statements = await probe.statements_calls(excluding=["turns_progress", "turns_timings"])
    finally:
        stop_workers(procs)
        await pool.close()
        shutil.rmtree(workspace, ignore_errors=True)
    start = min(t.started_at for t in timings)
    span = max(t.finished_at for t in timings) - start
    cpu_ms = cpu * 1000 / len(timings)
    postgres_ms = postgres_cpu * 1000 / len(timings)
    return BenchResult(
        harness=bench.harness,
        workers=workers,
        slots=slots,
        turns=len(timings),
        turns_per_second=round(len(timings) / span, 1),
        cpu_ms_per_turn=round(cpu_ms, 2),
        postgres_cpu_ms_per_turn=round(postgres_ms, 2),
        cpu_ceiling_turns_per_second=round((os.cpu_count() or 1) * 1000 / (cpu_ms + postgres_ms)),
        peak_rss_mib_per_worker=round(peak_rss / 2**20, 1),
        uss_mib_per_worker=round(uss / 2**20, 1),
        statements_per_turn=round(statements / len(timings), 2),
        failed_turns=sum(1 for t in timings if t.status != "succeeded"),
        pool_borrows_waited=round(
            sum(w.queued for w in waits) / max(1.0, sum(w.borrows for w in waits)), 4
        ),
        pool_wait_ms_per_turn=round(sum(w.seconds for w in waits) * 1000 / len(timings), 3),
    )


def _cpu(handle: psutil.Process) -> float:
    times = handle.cpu_times()
    return float(times.user + times.system)


def _server_cpu(postmaster: int) -> float:
    seconds = pg_cpu_seconds(postmaster)
    if seconds is None:
        raise RuntimeError(f"bench: PostgreSQL's postmaster {postmaster} is gone")
    return seconds


async def run_all(
    configs: Sequence[BenchConfig], *, worker_prefix: Sequence[str] = ()
) -> list[BenchResult]:
    template = ThrowawayTemplate(
        durable=True, settings={"shared_preload_libraries": "pg_stat_statements"}
    )
    results = []
    try:
        for bench in configs:
            cluster = template.new_cluster()
            try:
                scratch = ScratchDatabases(StoreConfig(conninfo=cluster.conninfo()))
                await scratch.prepare()
                target = await scratch.create()
                result = await run_one(
                    target, cluster.postmaster_pid(), bench, worker_prefix=worker_prefix
                )
                print(json.dumps(asdict(result)), flush=True)
                results.append(result)
            finally:
                cluster.destroy()
    finally:
        template.cleanup()
    return with_ratios(results)


def with_ratios(results: Sequence[BenchResult]) -> list[BenchResult]:
    """Each agent loop's result with its worker CPU per turn over the scripted
    fixture's at the same workers x slots (None when that was not measured)."""
    scripted = {(r.workers, r.slots): r for r in results if r.harness == SCRIPTED}
    out = []
    for r in results:
        twin = scripted.get((r.workers, r.slots))
        if r.harness != SCRIPTED and twin is not None and twin.cpu_ms_per_turn > 0:
            r = replace(r, cpu_x_scripted=round(r.cpu_ms_per_turn / twin.cpu_ms_per_turn, 2))
        out.append(r)
    return out


def _environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "postgresql": "throwaway local cluster, durable defaults",
    }


def _write(results: list[BenchResult], command: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    (DOCS / "load" / "bench").mkdir(parents=True, exist_ok=True)
    report = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": stamp,
        "command": command,
        "environment": _environment(),
        "results": [asdict(r) for r in results],
    }
    (DOCS / "load" / "bench" / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    table = DOCS / "load" / "benchmarks.md"
    if not table.exists():
        table.write_text(_HEADER)
    with table.open("a") as out:
        for r in results:
            shape = f"{r.workers} x {r.slots}" + ("" if r.harness == SCRIPTED else f" {r.harness}")
            ratio = "" if r.cpu_x_scripted is None else f" {r.cpu_x_scripted} |"
            out.write(
                f"| {stamp} | {shape} | {r.turns} | {r.turns_per_second} | "
                f"{r.cpu_ms_per_turn} | {r.peak_rss_mib_per_worker} | "
                f"{r.statements_per_turn} | {r.failed_turns} | "
                f"{r.pool_borrows_waited} | {r.pool_wait_ms_per_turn} | "
                f"{r.postgres_cpu_ms_per_turn} | {r.cpu_ceiling_turns_per_second} |{ratio}\n"
            )


_HEADER = """# Benchmarks

Zero-wait scripted turns through real `worker` processes on a fresh, durable throwaway
PostgreSQL on the same 2-core machine. Made by `make bench` (`python -m stint.lab.bench`);
the latest run's JSON is [bench/latest.json](bench/latest.json). Statements per turn count
every statement the workers ran, from pg_stat_statements (each is one round trip and one
autocommit transaction), claims, lease renewals and shutdown included. The workers run as
deployed, with their health port and /metrics on; "pool waited" is the fraction of pool
borrows that waited for a free connection and "pool wait" the time spent so, per turn.
"CPU ms/turn" is the workers' CPU, "PG CPU ms/turn" the PostgreSQL server's (its
postmaster and every backend, the benchmark's own progress polls included), and
"CPU ceiling" the turns/s at which the two would use every core of this machine: no
configuration can pass it here, and the distance to it is time spent waiting.
Rows whose W x S names `agents` ran the agents harness (`stint.agents:chat`, the load
test's turn: two model calls and a journal tool) against the fake provider with no
latency; "CPU x scripted" is their worker CPU per turn over the scripted fixture's of the
same run and shape.

| when | W x S | turns | turns/s | CPU ms/turn | peak RSS MiB/worker | statements/turn | failed \
| pool waited | pool wait ms/turn | PG CPU ms/turn | CPU ceiling turns/s | CPU x scripted |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
"""


def _configs(harness: str, shapes: str, turns: int) -> list[BenchConfig]:
    """``1x32,2x4`` as configurations of ``harness``."""
    found = []
    for shape in filter(None, shapes.split(",")):
        workers, _, slots = shape.partition("x")
        found.append(BenchConfig(harness, int(workers), int(slots), turns))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.bench", description=__doc__)
    parser.add_argument(
        "--turns",
        type=int,
        default=10_000,
        help="turns per configuration (10000: long enough that the start-up ramp is a small part)",
    )
    parser.add_argument(
        "--configs", default="1x32,2x4", help="the scripted fixture's workers x slots (1x32,2x4)"
    )
    parser.add_argument(
        "--agents", default="1x32", help="the agents harness's workers x slots (1x32; '': none)"
    )
    parser.add_argument(
        "--agent-turns",
        type=int,
        default=4_000,
        help="turns per agents configuration (4000: each costs a few scripted turns)",
    )
    parser.add_argument(
        "--worker-prefix",
        default="",
        help="a command that execs each worker, e.g. 'valgrind --tool=callgrind "
        "--callgrind-out-file=/tmp/cg.%%p' (instruction counts)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, write no files")
    args = parser.parse_args(argv)
    configs = [
        *_configs(SCRIPTED, args.configs, args.turns),
        *_configs(AGENTS, args.agents, args.agent_turns),
    ]
    before = last_committed(DOCS / "load" / "bench" / "latest.json")
    results = uvloop.run(run_all(configs, worker_prefix=shlex.split(args.worker_prefix)))
    for line in comparison_lines([asdict(r) for r in results], before):
        print(line, flush=True)
    if not args.no_write:
        _write(results, "python -m stint.lab.bench " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
