"""A Patroni cluster shared by the HA tests of one module (each test gets a database of
its own on it and waits until every member is back in its role before it starts)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from stint.lab.patroni import PatroniCluster, patroni_unavailable


@pytest.fixture(scope="module")
def patroni() -> Iterator[PatroniCluster]:
    """etcd and three Patroni members (primary, synchronous standby, asynchronous one)."""
    why = patroni_unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = PatroniCluster().start()
    try:
        yield cluster
    finally:
        cluster.destroy()


async def healthy(cluster: PatroniCluster) -> PatroniCluster:
    """Wait until the cluster has a primary and every standby streams again."""
    await asyncio.to_thread(cluster.wait_healthy)
    return cluster
