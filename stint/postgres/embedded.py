"""The persistent "embedded" PostgreSQL cluster.

When no database URL is configured, Stint runs its own PostgreSQL cluster in a
data directory on this machine, so a single worker works out of the box with
nothing to set up. The cluster is created once and kept: it holds real data,
so it is initialised and run with PostgreSQL's durable defaults.

It listens on a Unix socket only, in a 0700 directory, so nothing but this
machine's owner of that directory (and root) can connect; that is what makes
trust authentication acceptable. Several workers on one machine may start at
the same moment: an exclusive ``flock`` serialises creation and start-up, and
whoever comes second reuses the running server.

Layout of the data directory::

    pgdata/          the cluster
    socket/          the Unix socket directory
    postgres.log     the server log
    embedded.lock    the flock file
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from stint.postgres.pgbin import (
    RunAs,
    find_bindir,
    initdb,
    log_tail,
    make_conninfo,
    prepare_dir,
    run_as_user,
    run_pg,
    write_auto_conf,
)
from stint.store.errors import EmbeddedPostgresError

__all__ = ["EMBEDDED_PORT", "EmbeddedHandle", "EmbeddedPostgres", "default_data_dir"]

EMBEDDED_PORT = 5432
"""Only names the socket file (.s.PGSQL.5432); nothing listens on TCP."""

_MAX_SOCKET_PATH = 103  # sun_path is 104 bytes on macOS/BSD (108 on Linux), incl. NUL
_START_TIMEOUT_S = 60

log = logging.getLogger("stint.embedded")


def default_data_dir() -> Path:
    """Where the embedded cluster lives when STINT_DATA_DIR is not set.

    As root the postgres user runs the server and cannot reach root's home, so
    the data goes to /var/lib/stint; otherwise to the user's data directory.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/stint")
    return Path(platformdirs.user_data_dir("stint"))


@dataclass(frozen=True)
class EmbeddedHandle:
    """A running embedded cluster, as returned by :meth:`EmbeddedPostgres.start`."""

    data_dir: Path
    socket_dir: Path
    started: bool
    """True if this call started the server, False if it was already running."""

    def conninfo(self, dbname: str = "postgres") -> str:
        """A libpq conninfo string for the cluster's Unix socket."""
        return make_conninfo(
            host=str(self.socket_dir), port=EMBEDDED_PORT, dbname=dbname, user="postgres"
        )


class EmbeddedPostgres:
    """Create, start, reuse and stop the embedded cluster in ``data_dir``.

    ``bindir`` is an explicit binaries directory (STINT_PG_BINDIR), otherwise
    one is searched for. ``run_as`` is the account the server runs as when this
    process is root; it is ignored otherwise.
    """

    def __init__(
        self, data_dir: Path, bindir: Path | None = None, run_as: str | None = "postgres"
    ) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.pgdata = self.data_dir / "pgdata"
        self.socket_dir = self.data_dir / "socket"
        self.log_file = self.data_dir / "postgres.log"
        self.lock_file = self.data_dir / "embedded.lock"
        _check_socket_path(self.socket_dir)
        self.bindir = find_bindir(bindir)
        self.run_as: RunAs | None = run_as_user(run_as)

    def start(self) -> EmbeddedHandle:
        """Make sure the cluster exists and runs; reuse it if it already does."""
        prepare_dir(self.data_dir, self.run_as)
        with self._locked():
            created = not self._initialized()
            if created:
                self._initdb()
            started = not self._status()
            if started:
                self._start_server()
        how = "created and started" if created else "started" if started else "reused"
        # Reusing a running server is every CLI call's case: said at DEBUG only,
        # so a command's stderr carries nothing but what went wrong.
        log.log(
            logging.DEBUG if how == "reused" else logging.INFO,
            "embedded PostgreSQL %s at %s (%s)",
            self._version(),
            self.data_dir,
            how,
        )
        return EmbeddedHandle(data_dir=self.data_dir, socket_dir=self.socket_dir, started=started)

    def stop(self) -> bool:
        """Stop the server (fast shutdown); return whether it was running."""
        if not self._initialized():
            return False
        with self._locked():
            if not self._status():
                return False
            self._pg_ctl("stop", "-w", "-m", "fast")
        log.info("embedded PostgreSQL at %s stopped", self.data_dir)
        return True

    def is_running(self) -> bool:
        """Whether the cluster's server is up (per ``pg_ctl status``)."""
        return self._initialized() and self._status()

    # ------------------------------------------------------------------ internals

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if self.run_as is not None:
                os.fchown(fd, self.run_as.uid, self.run_as.gid)
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # also releases the lock

    def _initialized(self) -> bool:
        return (self.pgdata / "PG_VERSION").is_file()

    def _initdb(self) -> None:
        """initdb into a scratch dir, then rename: a crash never leaves half a cluster."""
        if self.pgdata.exists() and any(self.pgdata.iterdir()):
            raise EmbeddedPostgresError(
                f"{self.pgdata} exists but is not a PostgreSQL cluster; move it away "
                "or use another STINT_DATA_DIR",
                path=str(self.pgdata),
            )
        scratch = self.data_dir / "pgdata.initdb"
        shutil.rmtree(scratch, ignore_errors=True)  # left by a crash mid-initdb
        prepare_dir(scratch, self.run_as)
        initdb(self.bindir, scratch, self.run_as, sync=True)
        scratch.replace(self.pgdata)

    def _settings(self) -> dict[str, str]:
        return {
            "listen_addresses": "",
            "port": str(EMBEDDED_PORT),
            "unix_socket_directories": str(self.socket_dir),
            "unix_socket_permissions": "0700",
            "max_connections": "200",
        }

    def _start_server(self) -> None:
        prepare_dir(self.socket_dir, self.run_as)
        # Rewritten on every start so a moved data directory still gets its socket right.
        write_auto_conf(self.pgdata, self._settings(), self.run_as)
        try:
            wait = ["-w", "-t", str(_START_TIMEOUT_S)]
            self._pg_ctl("start", *wait, "-l", str(self.log_file), timeout=_START_TIMEOUT_S + 30)
        except EmbeddedPostgresError as exc:
            raise EmbeddedPostgresError(
                f"{exc.message}\nserver log ({self.log_file}):\n{log_tail(self.log_file)}",
                **exc.context,
            ) from exc

    def _status(self) -> bool:
        done = self._pg_ctl("status", check=False)
        return done.returncode == 0

    def _pg_ctl(
        self, *args: str, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        return run_pg(
            self.bindir,
            "pg_ctl",
            [*args, "-D", str(self.pgdata)],
            self.run_as,
            check=check,
            timeout=timeout,
        )

    def _version(self) -> str:
        try:
            return (self.pgdata / "PG_VERSION").read_text(encoding="ascii").strip()
        except OSError:
            return "?"


def _check_socket_path(socket_dir: Path) -> None:
    socket = socket_dir / f".s.PGSQL.{EMBEDDED_PORT}"
    if len(os.fsencode(socket)) > _MAX_SOCKET_PATH:
        raise EmbeddedPostgresError(
            f"the embedded PostgreSQL socket path {socket} is longer than "
            f"{_MAX_SOCKET_PATH} bytes, the Unix socket limit; use a shorter STINT_DATA_DIR",
            path=str(socket),
        )
