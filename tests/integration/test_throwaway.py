"""Throwaway clusters: copies of one template, each on its own port, always destroyed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import psutil
import psycopg
import pytest

from stint.postgres import throwaway
from stint.postgres.pgbin import find_bindir
from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.errors import PostgresBinariesNotFound


def _have_binaries() -> bool:
    try:
        find_bindir()
    except PostgresBinariesNotFound:
        return False
    return True


pytestmark = pytest.mark.skipif(not _have_binaries(), reason="no PostgreSQL server binaries")


class NewCluster(Protocol):
    """The ``new_cluster`` fixture: ``ThrowawayTemplate.new_cluster``, destroyed at teardown."""

    def __call__(self, *, cgroup_procs: Sequence[Path] = ()) -> ThrowawayCluster: ...


@pytest.fixture(scope="module")
def template() -> Iterator[ThrowawayTemplate]:
    tpl = ThrowawayTemplate()
    try:
        tpl.prepare()
        yield tpl
    finally:
        tpl.cleanup()


@pytest.fixture
def new_cluster(template: ThrowawayTemplate) -> Iterator[NewCluster]:
    """Start clusters from the template; every one is destroyed at teardown."""
    made: list[ThrowawayCluster] = []

    def make(*, cgroup_procs: Sequence[Path] = ()) -> ThrowawayCluster:
        cluster = template.new_cluster(cgroup_procs=cgroup_procs)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.destroy()


def _query(cluster: ThrowawayCluster, sql: str) -> object:
    with psycopg.connect(cluster.conninfo(), connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _execute(cluster: ThrowawayCluster, *statements: str) -> None:
    with psycopg.connect(cluster.conninfo(), connect_timeout=10, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def test_two_clusters_run_at_once_independently(new_cluster: NewCluster) -> None:
    first, second = new_cluster(), new_cluster()

    assert first.port != second.port
    assert first.data_dir != second.data_dir
    assert _query(first, "SELECT 1") == 1
    assert _query(second, "SELECT 1") == 1

    _execute(first, "CREATE TABLE only_here (x int)")
    assert _query(first, "SELECT to_regclass('only_here') IS NOT NULL") is True
    assert _query(second, "SELECT to_regclass('only_here') IS NOT NULL") is False


def test_cluster_is_tuned_for_tests_and_local_only(new_cluster: NewCluster) -> None:
    cluster = new_cluster()

    assert _query(cluster, "SHOW listen_addresses") == "127.0.0.1"
    assert _query(cluster, "SHOW unix_socket_directories") == str(cluster.data_dir)
    assert _query(cluster, "SHOW fsync") == "off"
    assert _query(cluster, "SHOW synchronous_commit") == "on"
    assert cluster.conninfo("other") == (
        f"host=127.0.0.1 port={cluster.port} dbname=other user=postgres"
    )


def test_destroy_stops_the_server_and_removes_its_dir(new_cluster: NewCluster) -> None:
    cluster = new_cluster()
    data_dir, pid = cluster.data_dir, cluster.postmaster_pid()

    cluster.destroy()

    assert not data_dir.exists()
    assert not _alive(pid)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(cluster.conninfo(), connect_timeout=5).close()
    cluster.destroy()  # idempotent


def test_restart_keeps_port_and_data(new_cluster: NewCluster) -> None:
    cluster = new_cluster()
    port, pid = cluster.port, cluster.postmaster_pid()
    _execute(cluster, "CREATE TABLE kept (x int)", "INSERT INTO kept VALUES (7)")

    cluster.restart()

    assert cluster.port == port
    assert cluster.postmaster_pid() != pid
    assert _query(cluster, "SELECT x FROM kept") == 7


def test_immediate_stop_then_start_recovers(new_cluster: NewCluster) -> None:
    cluster = new_cluster()
    # synchronous_commit stays on: a committed row survives a server crash.
    _execute(cluster, "CREATE TABLE kept (x int)", "INSERT INTO kept VALUES (7)")

    cluster.stop(mode="immediate")
    assert not cluster.is_running()
    cluster.start()

    assert cluster.is_running()
    assert _query(cluster, "SELECT x FROM kept") == 7


def test_port_taken_before_start_is_retried_on_another(
    new_cluster: NewCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_port = throwaway._free_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken: int = squatter.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(throwaway, "_free_port", lambda: next(picks, None) or real_free_port())

        cluster = new_cluster()

    assert cluster.port != taken
    assert _query(cluster, "SELECT 1") == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="only meaningful when run as root")
def test_servers_run_as_postgres_user_when_root(new_cluster: NewCluster) -> None:
    cluster = new_cluster()

    assert psutil.Process(cluster.postmaster_pid()).username() == "postgres"


def test_durable_template_keeps_postgres_defaults() -> None:
    with ThrowawayTemplate(durable=True) as durable, durable.new_cluster() as cluster:
        assert _query(cluster, "SHOW fsync") == "on"
        assert _query(cluster, "SHOW synchronous_commit") == "on"
        assert _query(cluster, "SHOW full_page_writes") == "on"


def test_cleanup_destroys_leftover_clusters_and_base_dir() -> None:
    template = ThrowawayTemplate()
    try:
        cluster = template.new_cluster()
        base, pid = template.base_dir, cluster.postmaster_pid()
    finally:
        template.cleanup()

    assert not base.exists()
    assert not _alive(pid)


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    """A scratch cgroup-v1 pids cgroup (unlimited), removed afterwards."""
    root = Path("/sys/fs/cgroup/pids")
    if os.geteuid() != 0 or not (root / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v1 pids hierarchy")
    path = root / f"stint-test-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup: {exc}")
    try:
        yield path
    finally:
        path.rmdir()


def test_postmaster_starts_in_given_cgroup(new_cluster: NewCluster, pids_cgroup: Path) -> None:
    cluster = new_cluster(cgroup_procs=[pids_cgroup / "cgroup.procs"])

    pid = cluster.postmaster_pid()
    assert f"pids:/{pids_cgroup.name}" in Path(f"/proc/{pid}/cgroup").read_text()
    assert psutil.Process(pid).username() == "postgres"
    cluster.restart()
    assert str(cluster.postmaster_pid()) in (pids_cgroup / "cgroup.procs").read_text().split()
    cluster.destroy()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie awaiting its reaper does not)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


_FORGETFUL = """
import sys
from stint.postgres.throwaway import ThrowawayTemplate

cluster = ThrowawayTemplate().new_cluster()
print(cluster.postmaster_pid(), cluster.data_dir, flush=True)
raise KeyboardInterrupt  # no cleanup call: what a test run killed by SIGTERM does
"""


def test_a_process_that_exits_without_cleanup_still_stops_its_servers() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _FORGETFUL], capture_output=True, text=True, timeout=120
    )
    pid, data_dir = run.stdout.split()
    assert not Path(data_dir).exists(), run.stderr
    # pg_ctl's wait ends when postmaster.pid is gone, a moment before the process.
    deadline = time.monotonic() + 30
    while psutil.pid_exists(int(pid)):
        assert time.monotonic() < deadline, f"postmaster {pid} still running"
        time.sleep(0.02)
