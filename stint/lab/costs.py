"""A load case's costs: CPU per turn, per idle second and per second of waiting.

Sizing divides these, not a burst's fraction of its limit: the fraction says how
one shared machine ran out of CPU; a turn's CPU milliseconds and a worker's
idle cost carry over to other hardware (scaled by its cores' speed). A
``CostMeter`` reads the workers' CPU, PostgreSQL's and the whole machine's at
the edges of each phase; ``costs`` turns three pairs of readings into figures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from stint.lab.cpu_clock import HostCpu, process_cpu_seconds
from stint.lab.model import Costs
from stint.lab.server_cpu import pg_cpu_seconds

__all__ = [
    "CPU_BOUND_CEILING_SHARE",
    "CPU_BOUND_HOST_BUSY",
    "CostMeter",
    "Reading",
    "Window",
    "ceiling_fraction",
    "costs",
    "cpu_ceiling",
    "load_average",
]

CPU_BOUND_HOST_BUSY = 0.9
"""The machine was CPU-bound when this share of all its cores was busy."""
CPU_BOUND_CEILING_SHARE = 0.8
"""... or when the case's own turns ran at this share of its CPU ceiling."""


@dataclass(frozen=True)
class Reading:
    """CPU clocks at one moment: each worker's, PostgreSQL's, the machine's."""

    at: float
    per_worker: list[float | None]
    postgres: float | None
    host: HostCpu

    @property
    def workers(self) -> float | None:
        """The workers' sum; None when one is gone (the sum would mean nothing)."""
        if not self.per_worker or any(w is None for w in self.per_worker):
            return None
        return sum(w for w in self.per_worker if w is not None)


@dataclass(frozen=True)
class Window:
    """Two readings: a phase's start and end."""

    start: Reading
    end: Reading

    @property
    def seconds(self) -> float:
        return self.end.at - self.start.at

    def workers(self) -> float | None:
        return _less(self.end.workers, self.start.workers)

    def postgres(self) -> float | None:
        return _less(self.end.postgres, self.start.postgres)

    def per_worker(self) -> list[float | None]:
        return [
            _less(e, s) for e, s in zip(self.end.per_worker, self.start.per_worker, strict=True)
        ]


def _less(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else end - start


class CostMeter:
    """Reads the CPU clocks of a case's workers and its PostgreSQL server; the
    server's backends that serve the load test's own probes are left out."""

    def __init__(self, postmaster: Callable[[], int | None]) -> None:
        self._postmaster = postmaster
        self._pids: list[int] = []
        self._probes: list[int] = []

    def track(self, pids: list[int]) -> None:
        self._pids = list(pids)

    def leave_out(self, backends: list[int]) -> None:
        """PostgreSQL backends whose CPU is the measurement's, not the turns'."""
        self._probes = list(backends)

    def _postgres(self) -> float | None:
        total = pg_cpu_seconds(self._postmaster())
        if total is None:
            return None
        probes = [process_cpu_seconds(pid) for pid in self._probes]
        if any(p is None for p in probes):
            return None  # a probe's backend went away: its CPU can no longer be told apart
        return total - sum(p for p in probes if p is not None)

    def read(self) -> Reading:
        return Reading(
            at=time.monotonic(),
            per_worker=[process_cpu_seconds(pid) for pid in self._pids],
            postgres=self._postgres(),
            host=HostCpu.now(),
        )


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages, as reports record them."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_ceiling(cores: int, worker_ms: float | None, pg_ms: float | None) -> float | None:
    """The turns/s at which the workers and PostgreSQL, at these CPU ms per turn,
    would keep every one of ``cores`` busy: no run on this machine can pass it,
    whatever it waits for. None when either cost was not measured (or is zero)."""
    if worker_ms is None or pg_ms is None or worker_ms + pg_ms <= 0:
        return None
    return round(cores * 1000 / (worker_ms + pg_ms), 1)


def ceiling_fraction(turns_per_s: float, ceiling: float | None) -> float | None:
    """The share of the CPU ceiling a burst ran at (1: the machine's cores were the bound)."""
    return None if ceiling is None or ceiling <= 0 else round(turns_per_s / ceiling, 3)


def _ms_per(value: float | None, count: float) -> float | None:
    return None if value is None or count <= 0 else round(1000 * value / count, 4)


def costs(
    *,
    workers: int,
    turns: int,
    turns_per_s: float,
    warm: Window,
    idle: Window,
    hold: Window | None,
    hold_busy_slots: int | None,
    load_average: list[float],
) -> Costs:
    """The case's cost figures from its warm burst, idle window and hold window."""
    worker_per_turn = _ms_per(warm.workers(), turns)
    pg_per_turn = _ms_per(warm.postgres(), turns)
    idle_worker = _ms_per(idle.workers(), idle.seconds * workers)
    held = None if hold is None else hold.workers()
    busy_worker = None if hold is None else _ms_per(held, hold.seconds * workers)
    wait = None
    if hold is not None and held is not None and hold_busy_slots and idle_worker is not None:
        # May come out below zero: a worker whose slots are all busy stops polling.
        above_idle = held - idle_worker / 1000 * hold.seconds * workers
        wait = _ms_per(above_idle, hold_busy_slots * hold.seconds)
    busy = warm.end.host.busy_fraction_since(warm.start.host)
    ceiling = cpu_ceiling(os.cpu_count() or 1, worker_per_turn, pg_per_turn)
    bound = None
    if busy is not None:
        bound = busy >= CPU_BOUND_HOST_BUSY or (
            ceiling is not None and turns_per_s >= CPU_BOUND_CEILING_SHARE * ceiling
        )
    return Costs(
        worker_cpu_ms_per_turn=worker_per_turn,
        pg_cpu_ms_per_turn=pg_per_turn,
        idle_worker_cpu_ms_per_s=idle_worker,
        idle_pg_cpu_ms_per_s=_ms_per(idle.postgres(), idle.seconds * workers),
        busy_worker_cpu_ms_per_s=busy_worker,
        wait_worker_cpu_ms_per_slot_s=wait,
        hold_busy_slots=hold_busy_slots,
        host_cpu_busy=None if busy is None else round(busy, 3),
        cpu_ceiling_turns_per_s=ceiling,
        cpu_ceiling_fraction=ceiling_fraction(turns_per_s, ceiling),
        cpu_bound=bound,
        load_average=load_average,
    )
