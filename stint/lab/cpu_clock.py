"""CPU time read from outside a process, precisely enough to divide by a few turns.

psutil's ``cpu_times`` counts clock ticks (10 ms here): a 24-turn burst that costs
70 ms of a worker's CPU would read 60 or 80 ms. The scheduler's own account,
``/proc/PID/task/*/schedstat``, is in nanoseconds; it covers live threads only,
so a process's reaped children (PostgreSQL's exited backends) still come from
psutil's tick counts. The host's busy fraction says whether the machine, not
just one process, ran out of CPU while a figure was measured.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import psutil

__all__ = ["HostCpu", "TreeCpu", "process_cpu_seconds", "tree_cpu", "tree_cpu_seconds"]

_NS = 1e-9


def _schedstat_seconds(pid: int) -> float | None:
    """On-CPU seconds of every live thread of ``pid``, or None where Linux does not say."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
    except OSError:
        return None
    return total * _NS if total else None


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds ``pid`` has used so far (its live threads); None when it is gone."""
    precise = _schedstat_seconds(pid)
    if precise is not None:
        return precise
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


@dataclass(frozen=True)
class TreeCpu:
    """A process's CPU clock, its live children's each, and its reaped children's sum."""

    own: float
    reaped: float
    children: dict[int, float]

    @property
    def total(self) -> float:
        return self.own + self.reaped + sum(self.children.values())


def tree_cpu(root: int) -> TreeCpu | None:
    """CPU seconds of ``root``, of each live child, and of the children it already
    reaped (those in ticks: the kernel keeps no finer account of them). None when it
    is gone."""
    try:
        process = psutil.Process(root)
        times = process.cpu_times()
        children = process.children()
    except psutil.Error:
        return None
    own = process_cpu_seconds(root)
    used: dict[int, float] = {}
    for child in children:
        seconds = process_cpu_seconds(child.pid)
        if seconds is not None:  # None: exited meanwhile, in children_* next time
            used[child.pid] = seconds
    return TreeCpu(
        own=own if own is not None else float(times.user + times.system),
        reaped=float(times.children_user + times.children_system),
        children=used,
    )


def tree_cpu_seconds(root: int) -> float | None:
    """``tree_cpu(root)``'s total: the whole tree's CPU seconds so far."""
    tree = tree_cpu(root)
    return None if tree is None else tree.total


@dataclass(frozen=True)
class HostCpu:
    """A reading of the whole machine's CPU clock (every core, every process)."""

    busy: float
    total: float

    @classmethod
    def now(cls) -> HostCpu:
        times = psutil.cpu_times()
        idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
        total = float(sum(times))
        return cls(busy=total - idle, total=total)

    def busy_fraction_since(self, earlier: HostCpu) -> float | None:
        """The machine's busy share of its CPU time between two readings."""
        elapsed = self.total - earlier.total
        if elapsed <= 0:
            return None
        return max(0.0, min(1.0, (self.busy - earlier.busy) / elapsed))
