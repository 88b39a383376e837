"""Throwaway PostgreSQL clusters for tests and the load test.

Tests want a fresh, isolated server each (fault tests restart and kill them),
and the load test wants several at once. ``initdb`` takes about half a second,
so it runs once into a template; every cluster is a copy of that template's
files started on its own free 127.0.0.1 port, which takes ~0.1-0.3 s.

Test clusters trade durability for speed (fsync and full_page_writes off);
``durable=True`` keeps PostgreSQL's defaults so the load
test measures what production would see.
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from stint.postgres.pgbin import (
    RunAs,
    check_traversable,
    find_bindir,
    initdb,
    log_tail,
    make_conninfo,
    prepare_dir,
    run_as_user,
    run_pg,
    write_auto_conf,
    write_hba,
)
from stint.store.errors import EmbeddedPostgresError

__all__ = ["ShutdownMode", "ThrowawayCluster", "ThrowawayTemplate"]

ShutdownMode = Literal["smart", "fast", "immediate"]

_HOST = "127.0.0.1"
_PORT_ATTEMPTS = 5
_START_TIMEOUT_S = 60
_MAX_SOCKET_PATH = 103  # see store.embedded

# fsync off survives a process crash (the OS keeps the pages); synchronous_commit
# stays on so a committed transaction is never lost when a fault test kills the server.
_FAST_SETTINGS = {"fsync": "off", "full_page_writes": "off"}


class ThrowawayCluster:
    """One running copy of the template, on ``host``:``port``.

    ``cgroup_procs`` are cgroup.procs files the postmaster is started in (on
    every start and restart), so a test can limit or freeze the server.
    """

    host = _HOST

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        bindir: Path,
        run_as: RunAs | None,
        cgroup_procs: Sequence[Path] = (),
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.bindir = bindir
        self.run_as = run_as
        self.cgroup_procs = tuple(cgroup_procs)
        self.log_file = data_dir / "postgres.log"
        self.also_listen: tuple[str, ...] = ()

    def conninfo(self, dbname: str = "postgres") -> str:
        """A libpq conninfo string for this cluster over TCP."""
        return make_conninfo(host=self.host, port=self.port, dbname=dbname, user="postgres")

    def postmaster_pid(self) -> int:
        """The postmaster's pid (first line of postmaster.pid)."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text(encoding="ascii").split("\n", 1)
        except OSError as exc:
            raise EmbeddedPostgresError(
                "the throwaway cluster is not running", data_dir=str(self.data_dir)
            ) from exc
        return int(first[0])

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``pg_ctl args -D <data_dir>`` as the cluster's user."""
        joins = self.cgroup_procs if args and args[0] in ("start", "restart") else ()
        return run_pg(
            self.bindir,
            "pg_ctl",
            [*args, "-D", str(self.data_dir)],
            self.run_as,
            check=check,
            timeout=_START_TIMEOUT_S + 30,
            cgroup_procs=joins,
        )

    def require_passwords(self, *, trusted: str = "postgres") -> None:
        """Password (SCRAM) authentication over TCP for every role but ``trusted``.

        Throwaway clusters trust everyone on 127.0.0.1; tests of credentials and
        least-privilege roles need the server to check passwords, as a real one does.
        """
        write_hba(
            self.data_dir,
            [
                f"host all {trusted} {_HOST}/32 trust",
                f"host all all {_HOST}/32 scram-sha-256",
                "local all all trust",
            ],
            self.run_as,
        )
        self.restart()  # a reload is asynchronous; a restart has applied it on return

    def listen_also(self, addresses: Sequence[str], network: str) -> None:
        """Listen on ``addresses`` too and trust clients from ``network``, then restart.

        For tests whose workers run in network namespaces of their own (other
        hosts, as far as the network goes): they reach the server over a veth
        link, never over this machine's loopback.
        """
        self.also_listen = tuple(addresses)
        write_hba(
            self.data_dir,
            [
                "local all all trust",
                f"host all all {_HOST}/32 trust",
                f"host all all {network} trust",
            ],
            self.run_as,
        )
        self.restart()

    def start(self) -> None:
        """Start the server on ``port``; waits until it accepts connections."""
        self._launch("start")

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server with ``mode`` and start it again on the same port."""
        self._launch("restart", "-m", mode)

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """Stop the server; ``immediate`` is a crash as far as recovery goes."""
        self.pg_ctl("stop", "-w", "-m", mode)

    def is_running(self) -> bool:
        """Whether the server is up (per ``pg_ctl status``)."""
        return self.data_dir.is_dir() and self.pg_ctl("status", check=False).returncode == 0

    def destroy(self) -> None:
        """Stop the server (immediately) and delete its files. Idempotent."""
        if not self.data_dir.exists():
            return
        if (self.data_dir / "postmaster.pid").exists():
            self.pg_ctl("stop", "-w", "-m", "immediate", check=False)
        if self.is_running():
            raise EmbeddedPostgresError(
                "could not stop the throwaway cluster", data_dir=str(self.data_dir)
            )
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()

    def __repr__(self) -> str:
        return f"ThrowawayCluster(port={self.port}, data_dir={str(self.data_dir)!r})"

    # ------------------------------------------------------------------ internals

    def _server_options(self) -> str:
        socket_dir = str(self.data_dir)
        if len(os.fsencode(self.data_dir / f".s.PGSQL.{self.port}")) > _MAX_SOCKET_PATH:
            socket_dir = ""  # too long for a Unix socket: TCP only
        options = [
            f"-p {self.port}",
            f"-c listen_addresses={','.join((_HOST, *self.also_listen))}",
            f"-c {shlex.quote(f'unix_socket_directories={socket_dir}')}",
        ]
        return " ".join(options)  # pg_ctl hands this to /bin/sh

    def _launch(self, *args: str) -> None:
        log_offset = _size(self.log_file)
        wait = ["-w", "-t", str(_START_TIMEOUT_S)]
        options = ["-o", self._server_options(), "-l", str(self.log_file)]
        try:
            self.pg_ctl(*args, *wait, *options)
        except EmbeddedPostgresError as exc:
            new_log = _read_from(self.log_file, log_offset)
            failure = _PortTaken if "Address already in use" in new_log else EmbeddedPostgresError
            raise failure(
                f"{exc.message}\nserver log ({self.log_file}):\n{log_tail(self.log_file)}",
                **{**exc.context, "port": self.port},
            ) from exc

    def _start_on_a_free_port(self) -> None:
        """Pick a free port and start; retry if someone else took it meanwhile."""
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = _free_port()
            try:
                self.start()
                return
            except _PortTaken:
                if attempt == _PORT_ATTEMPTS:
                    raise


class ThrowawayTemplate:
    """An initdb'd template and a factory of :class:`ThrowawayCluster` copies.

    ``base_dir`` holds the template and the clusters; a temporary directory is
    made (and removed by :meth:`cleanup`) when it is not given. ``run_as`` is
    the account servers run as when this process is root. ``settings`` are
    extra postgresql.conf settings for every cluster.
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        bindir: Path | None = None,
        run_as: str | None = "postgres",
        durable: bool = False,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.bindir = find_bindir(bindir)
        self.run_as = run_as_user(run_as)
        self.durable = durable
        self.settings = dict(settings or {})
        self._requested_base = base_dir
        self._base: Path | None = None
        self._owns_base = False
        self._clusters: list[ThrowawayCluster] = []
        self._lock = threading.Lock()

    @property
    def base_dir(self) -> Path:
        """The directory holding the template and the clusters (after prepare)."""
        if self._base is None:
            raise EmbeddedPostgresError("ThrowawayTemplate.prepare() has not run")
        return self._base

    @property
    def template_dir(self) -> Path:
        return self.base_dir / "template"

    def prepare(self) -> None:
        """Create the base directory and initdb the template, once."""
        with self._lock:
            if self._base is not None:
                return
            base = self._make_base_dir()
            try:
                self._initdb_template(base / "template")
            except BaseException:
                self._remove_base(base)
                raise
            self._base = base
            # A process that exits without its caller's cleanup (SIGTERM turned into
            # KeyboardInterrupt, an exception past every finally) still stops its
            # servers: a forgotten postmaster would keep its cores and its files.
            atexit.register(self.cleanup)

    def new_cluster(self, *, cgroup_procs: Sequence[Path] = ()) -> ThrowawayCluster:
        """Copy the template and start it on a free port; the caller destroys it."""
        self.prepare()
        data_dir = self._copy_template()
        cluster = ThrowawayCluster(
            data_dir, 0, bindir=self.bindir, run_as=self.run_as, cgroup_procs=cgroup_procs
        )
        try:
            cluster._start_on_a_free_port()
        except BaseException:
            cluster.destroy()
            raise
        self._clusters.append(cluster)
        return cluster

    def cleanup(self) -> None:
        """Destroy clusters still alive, remove the template (and base dir if ours)."""
        atexit.unregister(self.cleanup)
        clusters, self._clusters = self._clusters, []
        for cluster in clusters:
            cluster.destroy()
        base, self._base = self._base, None
        if base is not None:
            self._remove_base(base)

    def __enter__(self) -> Self:
        self.prepare()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    # ------------------------------------------------------------------ internals

    def _make_base_dir(self) -> Path:
        requested = self._requested_base
        if requested is None:
            base = Path(tempfile.mkdtemp(prefix="stint-pg-"))
            self._owns_base = True
            prepare_dir(base, self.run_as)
            return base
        base = Path(os.path.abspath(requested))
        self._owns_base = not base.exists()
        if self._owns_base:
            prepare_dir(base, self.run_as)
        elif self.run_as is not None:
            check_traversable(base / "template", self.run_as)
        return base

    def _remove_base(self, base: Path) -> None:
        shutil.rmtree(base / "template", ignore_errors=True)
        if self._owns_base:
            shutil.rmtree(base, ignore_errors=True)

    def _initdb_template(self, template: Path) -> None:
        prepare_dir(template, self.run_as)
        initdb(self.bindir, template, self.run_as, sync=False)
        settings = {
            "listen_addresses": _HOST,
            "unix_socket_directories": "",  # per copy, at start (-c)
            "max_connections": "200",
            **({} if self.durable else _FAST_SETTINGS),
            **self.settings,
        }
        write_auto_conf(template, settings, self.run_as)

    def _copy_template(self) -> Path:
        dest = Path(tempfile.mkdtemp(prefix="pg-", dir=self.base_dir))
        try:
            _copy_tree(self.template_dir, dest, self.run_as)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        return dest


class _PortTaken(EmbeddedPostgresError):
    """The port picked for a throwaway cluster was taken before it started."""


def _copy_tree(src: Path, dest: Path, run_as: RunAs | None) -> None:
    """Copy ``src``'s contents into the existing ``dest``, owned by ``run_as``.

    ``cp -a`` run as the owner is about twice as fast as copytree plus chown.
    """
    if run_as is not None:
        os.chown(dest, run_as.uid, run_as.gid)
    cp = shutil.which("cp")
    if cp is not None:
        run_pg(Path(cp).parent, Path(cp).name, ["-a", f"{src}/.", f"{dest}/"], run_as)
        return
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    if run_as is not None:
        for root, dirs, files in os.walk(dest):
            for name in (*dirs, *files):
                os.lchown(os.path.join(root, name), run_as.uid, run_as.gid)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
