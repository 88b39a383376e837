"""Load-test backends: cgroups, a server per case, a schema per case on a given URL."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import psycopg.conninfo
import pytest

from stint.lab import cgroups
from stint.lab.backends import (
    KIND_ENV,
    POSTGRES_CPUS,
    POSTGRES_MEMORY_BYTES,
    URL_ENV,
    BackendError,
    LoadBackends,
)
from stint.lab.cgroups import Cgroup, CgroupError, cgroup_support, memory_of_process
from stint.lab.container import container_unavailable, docker_engine_answers
from stint.lab.patroni import patroni_unavailable
from stint.postgres.pgbin import find_bindir
from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.errors import PostgresBinariesNotFound

GIB = 2**30
MIB = 2**20
SECRET = "hunter2-do-not-show"  # a password that must never be displayed

# A child that, once told to, allocates (and touches) 48 MiB, says so, and waits for EOF.
ALLOCATE_THEN_WAIT = (
    "import sys\n"
    "sys.stdin.readline()\n"
    "block = b'x' * (48 * 2**20)\n"
    "print('allocated', flush=True)\n"
    "sys.stdin.read()\n"
)


def _have_binaries() -> bool:
    try:
        find_bindir()
    except PostgresBinariesNotFound:
        return False
    return True


needs_postgres = pytest.mark.skipif(not _have_binaries(), reason="no PostgreSQL server binaries")


def _container_possible() -> bool:
    return container_unavailable() is None


@pytest.fixture(scope="module")
def support() -> cgroups.CgroupSupport:
    return cgroup_support()


@pytest.fixture
def new_cgroup(support: cgroups.CgroupSupport) -> Iterator[Cgroup]:
    """A real cgroup (0.5 CPU, 256 MiB), removed afterwards; skips where none can be made."""
    if not support.available:
        pytest.skip(f"cgroups unavailable here: {support.detail}")
    cgroup = Cgroup.create("test", cpus=0.5, memory_bytes=256 * MIB)
    assert cgroup is not None
    try:
        yield cgroup
    finally:
        cgroup.remove()


@pytest.fixture
def local_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoadBackends]:
    """Backends choosing a local cluster (skips where a Docker engine would win)."""
    if not _have_binaries():
        pytest.skip("no PostgreSQL server binaries")
    monkeypatch.delenv(URL_ENV, raising=False)
    backends = LoadBackends(settings={"work_mem": "8MB"})
    try:
        if backends.kind not in ("local-cgroup", "local"):
            pytest.skip(f"the chosen backend here is {backends.kind}")
        yield backends
    finally:
        backends.close()


@pytest.fixture
def url_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThrowawayCluster]:
    """A throwaway server of our own, given to the backends as STINT_LOAD_DATABASE_URL."""
    if not _have_binaries():
        pytest.skip("no PostgreSQL server binaries")
    template = ThrowawayTemplate()
    try:
        cluster = template.new_cluster()
        assert cluster.port != 5432
        # Trust auth ignores the password; it is there to prove it is never shown.
        url = f"postgresql://postgres:{SECRET}@127.0.0.1:{cluster.port}/postgres"
        monkeypatch.setenv(URL_ENV, url)
        yield cluster
    finally:
        template.cleanup()


def _schemas(cluster: ThrowawayCluster) -> set[str]:
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {row[0] for row in rows}


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --------------------------------------------------------------------------- cgroups


def test_a_cgroup_limits_holds_measures_and_is_removed(new_cgroup: Cgroup) -> None:
    assert new_cgroup.name.startswith("stint-load-test-")
    assert new_cgroup.limits() == {
        "cpus": 0.5,
        "memory_bytes": 256 * MIB,
        "cgroup_version": new_cgroup.version,
    }
    if new_cgroup.version == 1:
        cpu_dir, memory_dir = new_cgroup.directories
        assert (cpu_dir / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu_dir / "cpu.cfs_period_us").read_text().strip() == "100000"
        assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 256 * MIB
    else:
        (directory,) = new_cgroup.directories
        assert (directory / "cpu.max").read_text().split() == ["50000", "100000"]
        assert int((directory / "memory.max").read_text()) == 256 * MIB

    with subprocess.Popen(
        [sys.executable, "-c", ALLOCATE_THEN_WAIT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        new_cgroup.join(child.pid)
        for procs in new_cgroup.procs_files:
            assert str(child.pid) in procs.read_text().split()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "allocated"

        peak = new_cgroup.memory_peak_bytes()
        assert peak is not None and peak >= 48 * MIB
        assert new_cgroup.oom_kills() in (0, None)
        with pytest.raises(CgroupError, match="could not remove") as busy:
            new_cgroup.remove(timeout=0.1)  # the child is still in it
        assert str(child.pid) in str(busy.value)
    assert child.returncode == 0

    new_cgroup.remove()
    assert not any(directory.exists() for directory in new_cgroup.directories)
    new_cgroup.remove()  # already removed is fine


def test_cgroup_support_says_which_hierarchy_or_why_not(support: cgroups.CgroupSupport) -> None:
    cgroup = Cgroup.create("support", cpus=1, memory_bytes=GIB)
    try:
        assert (cgroup is not None) == support.available
        if support.available:
            assert support.detail.startswith(f"cgroup v{support.version} ")
        else:
            assert support.detail
    finally:
        if cgroup is not None:
            cgroup.remove()
    assert not list(Path("/sys/fs/cgroup").glob("*/stint-load-probe-*"))


def test_memory_of_a_process_is_read_from_its_own_cgroup() -> None:
    memory = memory_of_process(os.getpid())
    if memory is None:
        pytest.skip("this process's memory cgroup cannot be read here")
    peak = memory.peak_bytes()
    assert peak is None or peak > 0  # memory.peak needs Linux 5.19 under v2
    assert memory_of_process(2**22 + 1) is None  # beyond pid_max: no such process


def _fake_mountinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *lines: str) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("".join(f"{line}\n" for line in lines))
    monkeypatch.setattr(cgroups, "_MOUNTINFO", mountinfo)


@pytest.mark.parametrize(
    ("enabled", "after"), [("", "+cpu +memory"), ("cpu io memory", "cpu io memory")]
)
def test_cgroup_v2_files_on_a_fake_hierarchy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: str, after: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("the writability check wants root")
    root = tmp_path / "cg two"  # mountinfo escapes the space
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text(enabled)
    escaped = str(root).replace(" ", "\\040")
    _fake_mountinfo(tmp_path, monkeypatch, f"41 31 0:38 / {escaped} rw,relatime - cgroup2 c rw")

    cgroup = Cgroup.create("fake", cpus=1.5, memory_bytes=GIB)

    assert cgroup is not None
    (directory,) = cgroup.directories
    assert directory.parent == root
    assert (root / "cgroup.subtree_control").read_text() == after
    assert (directory / "cpu.max").read_text() == "150000 100000"
    assert (directory / "memory.max").read_text() == str(GIB)
    assert cgroup.procs_files == [directory / "cgroup.procs"]
    cgroup.join(4242)
    assert (directory / "cgroup.procs").read_text() == "4242"
    assert cgroup.memory_peak_bytes() is None  # not exposed: not measured
    assert cgroup.oom_kills() is None
    (directory / "memory.peak").write_text("4096\n")
    (directory / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    assert cgroup.memory_peak_bytes() == 4096
    assert cgroup.oom_kills() == 2
    assert cgroup.limits() == {"cpus": 1.5, "memory_bytes": GIB, "cgroup_version": 2}
    with pytest.raises(CgroupError):
        cgroup.remove()  # a plain directory with files in it, unlike cgroupfs
    for path in directory.iterdir():
        path.unlink()
    cgroup.remove()
    assert not directory.exists()


@pytest.mark.parametrize(
    ("mounts", "reason"),
    [
        ([], "no cgroup filesystem is mounted"),
        (
            ["41 31 0:38 / {root} rw - cgroup2 c rw"],
            "lacks controllers: cpu, memory; no cgroup v1 hierarchy for cpu and memory",
        ),
        (
            [
                "32 31 0:29 / {root} ro,relatime - cgroup c rw,cpu",
                "35 31 0:32 / {root} ro,relatime - cgroup c rw,memory",
            ],
            "is mounted read-only",
        ),
    ],
)
def test_cgroups_unavailable_give_none_and_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mounts: list[str], reason: str
) -> None:
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")
    _fake_mountinfo(tmp_path, monkeypatch, *(m.format(root=tmp_path) for m in mounts))

    assert Cgroup.create("nope", cpus=1, memory_bytes=GIB) is None
    support = cgroup_support()
    assert not support.available
    assert reason in support.detail
    assert {p.name for p in tmp_path.iterdir()} == {"cgroup.controllers", "mountinfo"}


# --------------------------------------------------------------------------- docker


@pytest.mark.parametrize("docker_host", [None, "refused"])
def test_docker_probe_answers_no_quickly_without_an_engine(
    monkeypatch: pytest.MonkeyPatch, docker_host: str | None
) -> None:
    if docker_host is None:
        engine_expected = (
            bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()
        )
    else:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{_free_port()}")
        engine_expected = False

    started = time.monotonic()
    answered = docker_engine_answers(timeout=1.0)

    assert time.monotonic() - started < 5
    if not engine_expected:
        assert answered is False


@pytest.mark.docker
@pytest.mark.skipif(not _container_possible(), reason="no Docker engine answers here")
async def test_a_container_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    backends = LoadBackends()
    try:
        assert backends.kind == "container"
        case = await backends.open_case("container")
        try:
            assert case.backend.postgres_limits == {
                "cpus": POSTGRES_CPUS,
                "memory_bytes": POSTGRES_MEMORY_BYTES,
                "via": "docker",
            }
            async with await psycopg.AsyncConnection.connect(case.target.conninfo) as conn:
                assert await (await conn.execute("SHOW max_connections")).fetchone() == ("200",)
        finally:
            assert await case.close() is None
    finally:
        backends.close()


# --------------------------------------------------------------------------- local


async def test_a_local_cgroup_case_runs_limited_and_leaves_nothing(
    local_backends: LoadBackends, support: cgroups.CgroupSupport
) -> None:
    if local_backends.kind != "local-cgroup":
        pytest.skip(f"cgroups unavailable here: {support.detail}")
    assert "in a cgroup, 1 CPU, 1 GiB" in local_backends.describe()
    case = await local_backends.open_case("local cgroup")
    try:
        cgroup, data_dir, pid = case.cgroup, case.data_dir, case.postmaster_pid()
        assert cgroup is not None and data_dir is not None and pid is not None
        assert case.backend.kind == "local-cgroup"
        assert case.backend.postgres_limits == {
            "cpus": 1.0,
            "memory_bytes": GIB,
            "cgroup_version": support.version,
        }
        assert case.backend.worker_limits == {
            "cpus": 2.0,
            "memory_bytes": 3 * GIB,
            "cgroup_version": support.version,
        }
        assert re.fullmatch(r"\d+(\.\d+)*", case.backend.postgres_version or "")
        for procs in cgroup.procs_files:
            assert str(pid) in procs.read_text().split()

        async with await psycopg.AsyncConnection.connect(case.target.conninfo) as conn:
            for setting, expected in [("work_mem", "8MB"), ("max_connections", "200")]:
                row = await (await conn.execute("SELECT current_setting(%s)", [setting])).fetchone()
                assert row == (expected,)
            assert await (await conn.execute("SHOW fsync")).fetchone() == ("on",)  # durable
            tables = await conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                (case.target.config.schema,),
            )
            assert (await tables.fetchone() or (0,))[0] > 0  # migrated

        peak = case.memory_peak_mib()
        assert peak is not None and peak > 0
        assert case.oom_kills() in (0, None)
    finally:
        assert await case.close() is None

    assert not data_dir.exists()
    assert not _alive(pid)
    assert not any(directory.exists() for directory in cgroup.directories)
    assert await case.close() is None  # closing again does nothing


async def test_a_kept_case_leaves_its_stopped_data_dir_and_log(
    local_backends: LoadBackends,
) -> None:
    case = await local_backends.open_case("kept")
    pid, cgroup = case.postmaster_pid(), case.cgroup
    assert pid is not None
    kept = await case.close(keep=True)
    assert kept is not None
    path = Path(kept)
    try:
        assert path.parent.name.startswith("stint-load-kept-")
        assert (path / "PG_VERSION").is_file()
        assert "database system is shut down" in (path / "postgres.log").read_text()
        assert not (path / "postmaster.pid").exists()
        assert not _alive(pid)
        if cgroup is not None:
            assert not any(directory.exists() for directory in cgroup.directories)

        local_backends.close()  # the template's cleanup must not take the kept files

        assert (path / "PG_VERSION").is_file()
    finally:
        shutil.rmtree(path.parent)


def test_worker_cgroups_are_made_on_request_and_removed_at_close(
    monkeypatch: pytest.MonkeyPatch, support: cgroups.CgroupSupport
) -> None:
    if not _have_binaries():
        pytest.skip("no PostgreSQL server binaries")
    monkeypatch.delenv(URL_ENV, raising=False)
    unlimited = LoadBackends(limit_workers=False)
    try:
        assert unlimited.worker_cgroup("w") is None
        assert unlimited.describe().endswith("workers: no limits (not asked for)")
    finally:
        unlimited.close()

    backends = LoadBackends(worker_cpus=1.5, worker_memory_bytes=2 * GIB)
    try:
        first = backends.worker_cgroup("w1")
        if not support.available:
            assert first is None
            return
        assert first is not None
        assert first.limits() == {
            "cpus": 1.5,
            "memory_bytes": 2 * GIB,
            "cgroup_version": support.version,
        }
        assert "workers: a cgroup per case, 1.5 CPU, 2 GiB" in backends.describe()
        second = backends.worker_cgroup("w2")
        assert second is not None
        first.remove()  # the runner removes its own ...
    finally:
        backends.close()  # ... and close removes what is left
    assert not any(d.exists() for d in [*first.directories, *second.directories])


# --------------------------------------------------------------------------- url


async def test_url_cases_get_and_drop_only_their_own_schema(
    url_cluster: ThrowawayCluster,
) -> None:
    with psycopg.connect(url_cluster.conninfo(), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA bystander")
    backends = LoadBackends()
    try:
        if backends.kind != "url":
            pytest.skip(f"the chosen backend here is {backends.kind}")
        shown = backends.describe()
        assert SECRET not in shown
        assert f"postgres@127.0.0.1:{url_cluster.port}/postgres" in shown

        first = await backends.open_case("a")
        second = await backends.open_case("b")
        ours = {first.target.config.schema, second.target.config.schema}
        assert len(ours) == 2
        assert ours <= _schemas(url_cluster)
        assert first.backend.kind == "url"
        assert first.backend.postgres_limits == "unknown"
        assert first.backend.postgres_version is None
        assert first.memory_peak_mib() is None and first.oom_kills() is None
        assert first.postmaster_pid() is None and first.data_dir is None

        assert await first.close() is None

        left = _schemas(url_cluster)
        assert first.target.config.schema not in left
        assert {second.target.config.schema, "bystander", "public"} <= left

        kept = await second.close(keep=True)

        assert kept is not None and second.target.config.schema in kept
        assert SECRET not in kept
        assert second.target.config.schema in _schemas(url_cluster)
    finally:
        backends.close()
    assert "bystander" in _schemas(url_cluster)


def test_an_unparseable_url_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if _container_possible():
        pytest.skip("a Docker engine answers: the URL would not be used")
    monkeypatch.setenv(URL_ENV, f"host=127.0.0.1 password={SECRET} dangling")

    with pytest.raises(BackendError) as refused:
        LoadBackends()

    assert URL_ENV in str(refused.value)
    assert SECRET not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


@pytest.mark.skipif(patroni_unavailable() is not None, reason=str(patroni_unavailable()))
async def test_a_patroni_case_runs_on_the_primary_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """STINT_LOAD_BACKEND=patroni: a case gets a migrated database on a Patroni cluster of
    its own, reached through the multi-host conninfo on its primary; closing stops it."""
    monkeypatch.setenv(KIND_ENV, "patroni")
    monkeypatch.delenv(URL_ENV, raising=False)
    backends = LoadBackends(limit_workers=False)
    try:
        assert backends.kind == "patroni"
        assert "Patroni" in backends.describe()
        case = await backends.open_case("ha")
        try:
            assert case.backend.kind == "patroni"
            params = psycopg.conninfo.conninfo_to_dict(case.target.conninfo)
            assert params["target_session_attrs"] == "read-write"
            assert len(str(params["host"]).split(",")) == 3
            pid = case.postmaster_pid()
            assert pid is not None and psutil.pid_exists(pid)
            async with await psycopg.AsyncConnection.connect(case.target.conninfo) as conn:
                cur = await conn.execute("SELECT pg_is_in_recovery()")
                assert await cur.fetchone() == (False,)
            data_dir = case.data_dir
            assert data_dir is not None and data_dir.is_dir()
        finally:
            await case.close()
        assert not psutil.pid_exists(pid)
        assert not data_dir.exists()
    finally:
        backends.close()


def test_an_unknown_load_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KIND_ENV, "etcd")
    with pytest.raises(BackendError, match=KIND_ENV):
        LoadBackends(limit_workers=False)
