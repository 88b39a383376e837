"""Shared fixtures: one throwaway PostgreSQL per test session, one database per test.

Each test gets its own database copied from a migrated template database, so
tests never see each other's rows. With STINT_TEST_DATABASE_URL set, that
server is used instead and each test gets (and drops) a schema of its own.
Tests never touch a server they were not pointed at.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest
import pytest_asyncio
import uvloop
from _pytest.config import Config
from _pytest.nodes import Item

from stint.lab.interrupt import sigterm_as_interrupt
from stint.lab.webhook_receiver import Receiver
from stint.postgres.scratch import ScratchDatabases, ScratchSchemas, ScratchTarget
from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import Pool, open_pool
from tests.passwords import PasswordDatabase, create_password_database
from tests.workers import Cluster

Scratch = ScratchDatabases | ScratchSchemas


def pytest_configure(config: Config) -> None:
    sigterm_as_interrupt()  # a killed run still stops its workers and throwaway clusters


def pytest_asyncio_loop_factories(config: Config, item: Item) -> Mapping[str, Callable[[], object]]:
    """Run the async suite on uvloop, as the worker does."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture(scope="session")
def pg_template() -> Iterator[ThrowawayTemplate]:
    """initdb once per test session; fault tests copy it into clusters of their own."""
    template = ThrowawayTemplate()
    try:
        yield template
    finally:
        template.cleanup()


@pytest.fixture(scope="session")
def pg_cluster(pg_template: ThrowawayTemplate) -> ThrowawayCluster | None:
    """The session's shared throwaway server (None when STINT_TEST_DATABASE_URL is set)."""
    if os.environ.get("STINT_TEST_DATABASE_URL"):
        return None
    return pg_template.new_cluster()


@pytest.fixture(scope="session")
def scram_cluster(pg_template: ThrowawayTemplate) -> Iterator[ThrowawayCluster]:
    """A throwaway server that checks passwords (SCRAM) over TCP, as a real one does."""
    cluster = pg_template.new_cluster()
    try:
        cluster.require_passwords()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def password_db(scram_cluster: ThrowawayCluster) -> PasswordDatabase:
    """A fresh database on the SCRAM server, with an owner and an app login."""
    return create_password_database(scram_cluster)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def scratch(pg_cluster: ThrowawayCluster | None) -> Scratch:
    url = os.environ.get("STINT_TEST_DATABASE_URL")
    provider: Scratch
    if pg_cluster is None:
        assert url
        provider = ScratchSchemas(StoreConfig(conninfo=url))
    else:
        provider = ScratchDatabases(StoreConfig(conninfo=pg_cluster.conninfo("postgres")))
    await provider.prepare()
    return provider


@pytest_asyncio.fixture(loop_scope="session")
async def db(scratch: Scratch) -> AsyncIterator[ScratchTarget]:
    """A migrated, empty Stint database (or schema) for this test only."""
    target = await scratch.create()
    try:
        yield target
    finally:
        await scratch.drop(target)


@pytest_asyncio.fixture(loop_scope="session")
async def pool(db: ScratchTarget) -> AsyncIterator[Pool]:
    opened = await open_pool(db.config, ROLE_CLI, min_size=1, max_size=4)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def cluster(db: ScratchTarget, workspace: Path, tmp_path: Path) -> Iterator[Cluster]:
    logs = tmp_path / "logs"
    logs.mkdir()
    running = Cluster(db, workspace, logs)
    try:
        yield running
    finally:
        running.stop_all()


@pytest_asyncio.fixture(loop_scope="session")
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver on a loopback port, in the test's event loop."""
    started = await Receiver().start()
    try:
        yield started
    finally:
        await started.stop()
