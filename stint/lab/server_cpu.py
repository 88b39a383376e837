"""PostgreSQL's CPU time, read from outside: what the load reports divide by turns.

``pg_cpu_seconds`` is the whole server's clock. ``ServerCpu`` keeps each server
process's clock apart so that a window's CPU can be split by what the process
does (the workers' pools, the producer, the load test's own probe, autovacuum,
the checkpointer ...): the figure a soak divides by turns says how much of it
the turns cost and how much the measurement or the server's housekeeping did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stint.lab.cpu_clock import tree_cpu, tree_cpu_seconds

__all__ = ["EXITED", "POSTMASTER", "UNNAMED", "ServerCpu", "pg_cpu_seconds"]

EXITED = "exited processes"
"""CPU of server processes that exited within the window (short-lived backends,
autovacuum workers): the kernel keeps it only in the postmaster's children's
ticks, without a name."""
POSTMASTER = "postmaster"
UNNAMED = "unnamed"
"""A live process the server did not list (it started after the listing)."""


def pg_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU seconds PostgreSQL used so far: the postmaster, its live backends (to the
    nanosecond), and the backends it already reaped (in clock ticks: added to its
    children's times). None when there is no postmaster to read (a container
    backend) or it is gone."""
    if postmaster is None:
        return None
    return tree_cpu_seconds(postmaster)


@dataclass(frozen=True)
class ServerCpu:
    """Every server process's CPU clock at one moment, with what it is."""

    own: float
    reaped: float
    processes: Mapping[int, tuple[str, float]]

    @classmethod
    def read(cls, postmaster: int, kinds: Mapping[int, str]) -> ServerCpu | None:
        """Read the postmaster and its live children; ``kinds`` names them (from
        pg_stat_activity). None when the postmaster is gone."""
        tree = tree_cpu(postmaster)
        if tree is None:
            return None
        return cls(
            own=tree.own,
            reaped=tree.reaped,
            processes={pid: (kinds.get(pid, UNNAMED), cpu) for pid, cpu in tree.children.items()},
        )

    @property
    def total(self) -> float:
        return self.own + self.reaped + sum(cpu for _, cpu in self.processes.values())

    def since(self, earlier: ServerCpu) -> dict[str, float]:
        """CPU seconds per kind of process between ``earlier`` and this reading.

        A process alive at both readings counts its difference; one born since
        counts in full. One that exited since left its whole life's CPU in the
        postmaster's reaped ticks: the part it used before ``earlier`` comes off
        there, and the rest is ``EXITED``. The parts add up to ``total`` less
        ``earlier.total`` (to the tick)."""
        used: dict[str, float] = {POSTMASTER: self.own - earlier.own}
        for pid, (kind, cpu) in self.processes.items():
            before = earlier.processes.get(pid)
            used[kind] = used.get(kind, 0.0) + cpu - (before[1] if before else 0.0)
        gone = sum(cpu for pid, (_, cpu) in earlier.processes.items() if pid not in self.processes)
        used[EXITED] = self.reaped - earlier.reaped - gone
        return used
