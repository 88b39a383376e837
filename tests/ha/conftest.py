"""A Patroni cluster shared by the HA tests of one module (each test gets a database of
its own on it and waits until every member is back in its role before it starts).

``STINT_HA_ROUNDS=N`` (read when the tests are collected) runs each failover test N
times on the same cluster, and ``STINT_HA_DURABLE=1`` keeps PostgreSQL's fsync on:
``make ha`` sets both for the figures in docs/reliability.md."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest

from stint.lab.patroni import PatroniCluster, patroni_unavailable


@pytest.fixture(scope="module")
def patroni() -> Iterator[PatroniCluster]:
    """etcd and three Patroni members (primary, synchronous standby, asynchronous one)."""
    why = patroni_unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = PatroniCluster(durable=os.environ.get("STINT_HA_DURABLE") == "1").start()
    try:
        yield cluster
    finally:
        cluster.destroy()


async def healthy(cluster: PatroniCluster) -> PatroniCluster:
    """Wait until the cluster has a primary and every standby streams again."""
    await asyncio.to_thread(cluster.wait_healthy)
    return cluster


def rounds() -> list[Any]:
    """``STINT_HA_ROUNDS`` (default 1) parameters, one per round."""
    count = int(os.environ.get("STINT_HA_ROUNDS", "1"))
    return [pytest.param(i, id=f"round{i + 1}") for i in range(count)]
