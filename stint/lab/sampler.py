"""Sample worker processes and the database every 100 ms during a load case.

Per worker: RSS, USS (memory no other process shares: what one more worker
really costs, since RSS also counts the shared libraries' pages), CPU seconds,
threads, open file descriptors (psutil). From the
database: sessions running now and worker connections open now. From the
PostgreSQL backend: its cgroup memory peak when the backend can tell. Short
peaks between samples can be missed; the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from stint.lab.model import Samples
from stint.store.errors import StoreError
from stint.store.probe import ProbeStore

__all__ = ["Sampler"]

INTERVAL_S = 0.1
_MIB = 2**20


@dataclass
class _Worker:
    handle: psutil.Process
    peak_rss: int = 0
    peak_uss: int = 0
    max_threads: int = 0
    max_fds: int = 0


@dataclass
class Sampler:
    """Start with ``start()``, add processes with ``track()``, finish with ``stop()``."""

    probe: ProbeStore
    pg_memory_peak_mib: Callable[[], float | None]
    pg_oom_kills: Callable[[], int | None]
    workers: list[_Worker] = field(default_factory=list)
    count: int = 0
    peak_sum_rss: int = 0
    max_active: int | None = None
    max_connections: int | None = None
    _task: asyncio.Task[None] | None = None

    def track(self, procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                self.workers.append(_Worker(psutil.Process(proc.pid)))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> Samples:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        live_workers = len(self.workers) or None
        return Samples(
            count=self.count,
            interval_s=INTERVAL_S,
            peak_sum_rss_mib=round(self.peak_sum_rss / _MIB, 1) if self.peak_sum_rss else None,
            peak_rss_mib_per_worker=[round(w.peak_rss / _MIB, 1) for w in self.workers],
            peak_uss_mib_per_worker=[round(w.peak_uss / _MIB, 1) for w in self.workers],
            worker_cpu_seconds=None,  # the runner measures it exactly (rusage of reaped workers)
            max_threads_per_worker=max((w.max_threads for w in self.workers), default=None),
            max_fds_per_worker=max((w.max_fds for w in self.workers), default=None),
            max_active_sessions=self.max_active,
            db_connections_per_worker=(
                round(self.max_connections / live_workers, 1)
                if self.max_connections is not None and live_workers
                else None
            ),
            pg_peak_memory_mib=self.pg_memory_peak_mib(),
            pg_oom_kills=self.pg_oom_kills(),
        )

    async def _run(self) -> None:
        while True:
            self._sample_processes()
            await self._sample_database()
            self.count += 1
            await asyncio.sleep(INTERVAL_S)

    def _sample_processes(self) -> None:
        total = 0
        for worker in self.workers:
            try:
                with worker.handle.oneshot():
                    memory = worker.handle.memory_full_info()
                    worker.max_threads = max(worker.max_threads, worker.handle.num_threads())
                    worker.max_fds = max(worker.max_fds, worker.handle.num_fds())
            except psutil.Error:
                continue  # exited (draining) or not yet started
            worker.peak_rss = max(worker.peak_rss, memory.rss)
            worker.peak_uss = max(worker.peak_uss, memory.uss)
            total += memory.rss
        self.peak_sum_rss = max(self.peak_sum_rss, total)

    async def _sample_database(self) -> None:
        try:
            sample = await self.probe.load_sample()
        except StoreError:
            return  # a missed sample, not a failed case: the checks judge correctness
        self.max_active = max(self.max_active or 0, sample.running_sessions)
        self.max_connections = max(self.max_connections or 0, sample.worker_connections)
