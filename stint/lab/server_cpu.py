"""PostgreSQL's CPU time, read from outside: what the load reports divide by turns."""

from __future__ import annotations

import contextlib

import psutil

__all__ = ["pg_cpu_seconds"]


def pg_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU seconds PostgreSQL used so far: the postmaster, its live backends, and
    the backends it already reaped (their time is added to its children's).
    None when there is no postmaster to read (a container backend) or it is gone."""
    if postmaster is None:
        return None
    try:
        root = psutil.Process(postmaster)
        total: float = sum(root.cpu_times()[:4])  # user, system, children_user, children_system
        for child in root.children():
            with contextlib.suppress(psutil.Error):  # exited meanwhile: in children_* next time
                total += sum(child.cpu_times()[:2])
    except psutil.Error:
        return None
    return total
