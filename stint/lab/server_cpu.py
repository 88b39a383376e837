"""PostgreSQL's CPU time, read from outside: what the load reports divide by turns."""

from __future__ import annotations

from stint.lab.cpu_clock import tree_cpu_seconds

__all__ = ["pg_cpu_seconds"]


def pg_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU seconds PostgreSQL used so far: the postmaster, its live backends (to the
    nanosecond), and the backends it already reaped (in clock ticks: added to its
    children's times). None when there is no postmaster to read (a container
    backend) or it is gone."""
    if postmaster is None:
        return None
    return tree_cpu_seconds(postmaster)
