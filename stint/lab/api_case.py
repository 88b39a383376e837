"""The API load case: one ``stint api`` process, many SSE followers, real workers.

Seed the sessions and a key; start the API; connect ``followers`` SSE streams
spread evenly over the sessions; start W ``worker --slots S`` processes and
burst one turn per session, ``bursts`` times, as the matrix does. Every
follower must receive its session's whole log, each event once, in order.
Measured: delivery latency (database insert time to client receipt: see
``followers`` for the clock caveat), the API process's peak RSS and CPU
seconds, and the PostgreSQL connections it held (sampled every 100 ms from
``pg_stat_activity``, by role).
"""

from __future__ import annotations

import asyncio
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from stint.lab.backends import CaseDatabase, LoadBackends
from stint.lab.environment import environment
from stint.lab.figures import phase_figures
from stint.lab.followers import Follower, judge, latency_figures, open_followers
from stint.lab.free_port import free_port
from stint.lab.model import SCHEMA_VERSION, Backend, CaseSpec, PhaseFigures
from stint.lab.processes import spawn_api, spawn_worker, stop_workers
from stint.lab.runner import WORKER_SETTINGS, burst, burst_deadline, until_finished
from stint.lab.sse import http_status
from stint.ops.checks import Check, run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_API, ROLE_CLI
from stint.store.errors import StoreError
from stint.store.keys import KeyStore
from stint.store.pool import open_pool
from stint.store.probe import ProbeStore

__all__ = ["API_SETTINGS", "ApiCaseReport", "ApiCaseSpec", "run_api_case"]

API_SETTINGS = {
    "STINT_AUTO_MIGRATE": "false",
    "STINT_LOG_LEVEL": "info",
    "STINT_API_KEEPALIVE_SECONDS": "5",
    "STINT_API_POOL_SIZE": "8",
    "STINT_API_FOLLOW_POOL_SIZE": "4",
    "STINT_STATEMENT_TIMEOUT": "5",
}
_HOST = "127.0.0.1"
_TENANT = "load"
_SAMPLE_S = 0.1
_MIB = 2**20
_FOLLOW_DEADLINE_S = 120.0


@dataclass(frozen=True)
class ApiCaseSpec:
    followers: int = 1000
    sessions: int = 100
    workers: int = 2
    slots: int = 4
    bursts: int = 2
    tool_wait_ms: int = 250

    @property
    def label(self) -> str:
        return (
            f"api-{self.followers}f-{self.sessions}s-{self.workers}x{self.slots}-"
            f"{self.bursts}b-{self.tool_wait_ms}ms"
        )

    @property
    def burst_spec(self) -> CaseSpec:
        return CaseSpec(self.workers, self.slots, self.sessions, self.tool_wait_ms)


@dataclass
class ApiCaseReport:
    spec: ApiCaseSpec
    backend: Backend
    environment: dict[str, Any]
    configuration: dict[str, Any]
    latency: dict[str, Any] | None = None
    api: dict[str, Any] | None = None
    client: dict[str, Any] | None = None
    bursts: list[PhaseFigures] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c["passed"] for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "case": {**asdict(self.spec), "label": self.spec.label},
            "backend": asdict(self.backend),
            "environment": self.environment,
            "configuration": self.configuration,
            "delivery_latency": self.latency,
            "api_process": self.api,
            "followers_client": self.client,
            "bursts": [asdict(b) for b in self.bursts],
            "checks": self.checks,
            "passed": self.passed,
            "diagnostics": self.diagnostics,
        }


@dataclass
class _ApiSampler:
    """The API process's RSS and the connections it holds, every 100 ms."""

    process: psutil.Process
    probe: ProbeStore
    count: int = 0
    peak_rss: int = 0
    peak_connections: dict[str, int] = field(default_factory=dict)
    peak_total: int = 0
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            except psutil.Error:
                return
            try:
                found = await self.probe.connections_by_application(prefix=ROLE_API)
            except StoreError:
                found = None  # a missed sample; the checks judge correctness
            if found is not None:
                for name, count in found.items():
                    self.peak_connections[name] = max(self.peak_connections.get(name, 0), count)
                self.peak_total = max(self.peak_total, sum(found.values()))
            self.count += 1
            await asyncio.sleep(_SAMPLE_S)


def _cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _self_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _until_ready(api: subprocess.Popen[bytes], port: int, deadline: float) -> None:
    while await http_status(_HOST, port, "/readyz") != 200:
        if api.poll() is not None:
            raise RuntimeError(f"stint api exited {api.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError("stint api was not ready in time")
        await asyncio.sleep(_SAMPLE_S)


async def _followers_done(followers: list[Follower]) -> None:
    tasks = [f.task for f in followers if f.task is not None]
    _, pending = await asyncio.wait(tasks, timeout=_FOLLOW_DEADLINE_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for follower in followers:
        if follower.task in pending:
            follower.error = follower.error or "still waiting for events at the deadline"


async def run_api_case(spec: ApiCaseSpec, backends: LoadBackends, work_dir: Path) -> ApiCaseReport:
    """Run the case; on failure keep its logs and database and say where."""
    case_dir = work_dir / spec.label
    shutil.rmtree(case_dir, ignore_errors=True)
    (case_dir / "workspace").mkdir(parents=True)
    database = await backends.open_case(spec.label)
    report = ApiCaseReport(
        spec=spec,
        backend=database.backend,
        environment=environment(),
        configuration={
            "api": API_SETTINGS,
            "workers": {**WORKER_SETTINGS, "harness": "stint.worker.scripted:harness"},
            "api_cgroup": "none (the workers share the matrix's worker cgroup when there is one)",
        },
    )
    cgroup = backends.worker_cgroup(spec.label)
    failed = True
    try:
        procs_files = cgroup.procs_files if cgroup is not None else []
        await _measure(spec, database, report, case_dir, procs_files)
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
            report.diagnostics = f"API and worker logs in {case_dir}; database: {kept}"
        else:
            shutil.rmtree(case_dir, ignore_errors=True)
    return report


async def _measure(
    spec: ApiCaseSpec,
    database: CaseDatabase,
    report: ApiCaseReport,
    case_dir: Path,
    cgroup_procs: list[Path],
) -> None:
    config = database.target.config
    pool = await open_pool(config, ROLE_CLI, min_size=8, max_size=8)
    client = ClientStore(config, pool)
    probe = ProbeStore(config, pool)
    procs: list[subprocess.Popen[bytes]] = []
    api: subprocess.Popen[bytes] | None = None
    sampler: _ApiSampler | None = None
    try:
        token = (await KeyStore(config, pool).keys_create(tenant=_TENANT)).token
        sessions = [await client.sessions_create(tenant=_TENANT) for _ in range(spec.sessions)]
        db_env = {"STINT_DATABASE_URL": config.conninfo, "STINT_SCHEMA": config.schema}
        port = free_port(_HOST)
        api = spawn_api(env={**API_SETTINGS, **db_env}, port=port, log_path=case_dir / "api.log")
        await _until_ready(api, port, time.monotonic() + 60)
        process = psutil.Process(api.pid)
        sampler = _ApiSampler(process, probe)
        sampler.start()
        rss_idle = process.memory_info().rss
        api_cpu_before, client_cpu_before = _cpu_seconds(process), _self_cpu_seconds()
        started = time.monotonic()
        per_session = max(1, spec.followers // spec.sessions)
        followers = await open_followers(
            _HOST, port, token, sessions, per_session=per_session, terminal_events=spec.bursts
        )
        connected_s = time.monotonic() - started
        rss_connected = process.memory_info().rss
        worker_env = {**WORKER_SETTINGS, **db_env, "STINT_WORKSPACE": str(case_dir / "workspace")}
        procs = [
            spawn_worker(
                env=worker_env,
                args=["--slots", str(spec.slots)],
                log_path=case_dir / f"worker{i}.log",
                cgroup_procs=cgroup_procs,
            )
            for i in range(spec.workers)
        ]
        for i in range(spec.bursts):
            await burst(client, sessions, {"min_wait_ms": spec.tool_wait_ms}, f"burst{i}")
            await until_finished(
                probe,
                target=(i + 1) * spec.sessions,
                offset=i * spec.sessions,
                deadline=burst_deadline(spec.burst_spec),
                phase=f"burst{i}",
                progress=lambda *_: None,
                procs=procs,
            )
        await _followers_done(followers)
        elapsed = time.monotonic() - started
        api_cpu = _cpu_seconds(process) - api_cpu_before
        client_cpu = _self_cpu_seconds() - client_cpu_before
        worker_codes = stop_workers(procs)
        await sampler.stop()
        api_code = stop_workers([api])[0]
        timings = sorted(await probe.turns_timings(), key=lambda t: t.enqueued_at)
        report.bursts = [
            phase_figures(spec.burst_spec, timings[i * spec.sessions : (i + 1) * spec.sessions])
            for i in range(spec.bursts)
        ]
        report.latency = latency_figures(followers)
        report.api = {
            "peak_rss_mib": round(sampler.peak_rss / _MIB, 1),
            "rss_mib_before_followers": round(rss_idle / _MIB, 1),
            "rss_mib_with_followers_connected": round(rss_connected / _MIB, 1),
            "cpu_seconds": round(api_cpu, 3),
            "cpu_percent_of_one_core": round(100 * api_cpu / elapsed, 1),
            "seconds_measured": round(elapsed, 3),
            "peak_postgres_connections": sampler.peak_total,
            "peak_postgres_connections_by_role": sampler.peak_connections,
            "samples": sampler.count,
            "exit_code": api_code,
        }
        report.client = {
            "followers": len(followers),
            "connect_all_s": round(connected_s, 3),
            "cpu_seconds": round(client_cpu, 3),
            "keepalives_received": sum(f.keepalives for f in followers),
        }
        logs = await probe.event_logs()
        invariants = await run_checks(pool, journals=case_dir / "workspace" / "journals", faults={})
        checks = [
            *invariants.checks,
            *judge(followers, logs),
            Check(
                "every_turn_succeeded",
                len(timings) == spec.bursts * spec.sessions
                and all(t.status == "succeeded" for t in timings),
                {"turns": len(timings), "expected": spec.bursts * spec.sessions},
            ),
            Check(
                "processes_exited_cleanly",
                api_code == 0 and all(code == 0 for code in worker_codes),
                {"api": api_code, "workers": worker_codes},
            ),
            Check(
                "api_used_one_listen_connection",
                sampler.peak_connections.get(f"{ROLE_API}-listen") == 1,
                {"peak_by_role": sampler.peak_connections},
            ),
        ]
        report.checks = [asdict(c) for c in checks]
    finally:
        if sampler is not None:
            await sampler.stop()
        for proc in [*procs, *([api] if api is not None else [])]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await pool.close()
