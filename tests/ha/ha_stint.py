"""Stint on a Patroni cluster: a migrated database reached through the multi-host
conninfo (``target_session_attrs=read-write``), a probe pool, workers and an API
that all follow the primary, and the probes the failover tests read."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from stint.lab.patroni import PatroniCluster
from tests.faults.private import StintOn, scalar, stint_on
from tests.polling import wait_until
from tests.workers import fetch

# A lease longer than a failover (Patroni's is 2-4 s here): leases live through it.
HA_LEASE = 10.0


@dataclass
class HaStint(StintOn):
    """A Stint database on the Patroni cluster, a probe pool and a worker launcher."""

    patroni: PatroniCluster


@asynccontextmanager
async def ha_stint(patroni: PatroniCluster, tmp: Path) -> AsyncIterator[HaStint]:
    """A fresh database on the cluster; stops every worker and drops it afterwards."""
    async with stint_on(patroni.conninfo(), tmp) as base:
        base.workers.env["STINT_LEASE_SECONDS"] = str(HA_LEASE)
        yield HaStint(patroni=patroni, **base.parts())


async def writable_since(p: HaStint, moment: float) -> float:
    """Poll until a new connection through the multi-host conninfo reaches a primary
    that accepts a write; returns when (wall clock) it first did after ``moment``."""

    async def write() -> float | None:
        try:
            async with await psycopg.AsyncConnection.connect(p.target.conninfo) as conn:
                await conn.execute("CREATE TEMP TABLE ha_probe (x int)")
        except psycopg.OperationalError:
            return None
        return time.time()

    return await wait_until(write, what="a primary that accepts writes", within=60)


async def first_start_after(p: HaStint, moment: float) -> float | None:
    """When (epoch seconds) the first turn after ``moment`` started (``turn.started``;
    the database's clock, which is this machine's)."""
    value = await scalar(
        p.pool,
        "SELECT extract(epoch FROM min(created_at))::float8 FROM events "
        "WHERE kind = 'turn.started' AND created_at >= to_timestamp(%s)",
        moment,
    )
    return None if value is None else float(value)


async def longest_write_pause(p: HaStint, since: float) -> tuple[float, float]:
    """The longest gap between two consecutive events appended from ``since`` on:
    how long writes stopped while the primary changed (seconds), and when (epoch
    seconds, database clock) the first event after it was appended."""
    rows = await fetch(
        p.pool,
        "SELECT extract(epoch FROM created_at - previous)::float8, "
        "extract(epoch FROM created_at)::float8 FROM (SELECT created_at, "
        "lag(created_at) OVER (ORDER BY created_at) AS previous FROM events "
        "WHERE created_at >= to_timestamp(%s)) AS gaps "
        "WHERE previous IS NOT NULL ORDER BY 1 DESC LIMIT 1",
        since,
    )
    assert rows, "no events after the fault"
    return float(rows[0][0]), float(rows[0][1])


async def unknown_steps(p: HaStint) -> int:
    return int(await scalar(p.pool, "SELECT count(*) FROM steps WHERE status = 'unknown'"))


async def retried_turns(p: HaStint) -> int:
    return int(await scalar(p.pool, "SELECT count(*) FROM turns WHERE attempts > 1"))
