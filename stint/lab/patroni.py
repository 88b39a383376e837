"""A throwaway highly available PostgreSQL: three members managed by Patroni, one etcd.

The failover tests and the ``patroni`` load backend need what operators run in
production (Patroni with etcd), not a simulation of it, so this starts Debian's
``patroni`` and ``etcd`` (the packages ``patroni``, ``etcd-server``,
``etcd-client``) as the ``postgres`` system user on free 127.0.0.1 ports, under
a directory of its own that :meth:`PatroniCluster.destroy` removes. Debian's
packages rather than Patroni from PyPI: they bring the matching etcd and the
``python3-etcd`` client, and Patroni then runs on the system Python, apart from
Stint's virtualenv and its pinned dependencies.

The members: ``m0`` bootstraps and is the first primary, ``m1`` is eligible to be
the synchronous standby, ``m2`` is tagged ``nosync`` (always asynchronous). With
``synchronous=True`` Patroni's ``synchronous_mode`` makes every commit wait for
the synchronous standby's flush, so a failover (Patroni promotes only the
synchronous standby then) loses no acknowledged commit; with ``synchronous=False``
replication is asynchronous and a failover may lose what the promoted standby had
not replayed (the RPO the tests measure).

Timing: ``loop_wait`` 1 s, ``ttl`` 10 s, ``retry_timeout`` 3 s, and
``primary_start_timeout`` 0, so a crashed primary is failed over at Patroni's next
loop instead of being restarted in place (Patroni's default tries a restart for
300 s first); a primary cut off from etcd demotes itself within ``ttl``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from stint.lab.errors import BackendError, noting_failure
from stint.lab.free_port import free_port
from stint.postgres.pgbin import RunAs, find_bindir, make_conninfo, prepare_dir, run_as_user

__all__ = [
    "LOOP_WAIT_S",
    "TTL_S",
    "Member",
    "PatroniCluster",
    "patroni_unavailable",
]

_HOST = "127.0.0.1"
SCOPE = "stint-ha"
LOOP_WAIT_S = 1
TTL_S = 10
RETRY_TIMEOUT_S = 3
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 30.0
_POLL_S = 0.1
_TOOLS = ("patroni", "patronictl", "etcd")


def patroni_unavailable() -> str | None:
    """Why a Patroni cluster cannot be started here (None when it can)."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"{', '.join(missing)} not found: install Debian's patroni, etcd-server and "
            "etcd-client packages (apt-get install patroni etcd-server etcd-client)"
        )
    return None


@dataclass(frozen=True)
class Member:
    """One Patroni member: its PostgreSQL port and its REST API port."""

    name: str
    port: int
    api_port: int
    data_dir: Path

    @property
    def api(self) -> str:
        return f"http://{_HOST}:{self.api_port}"


@dataclass
class _Process:
    proc: subprocess.Popen[bytes]
    log: Path


class PatroniCluster:
    """etcd plus three Patroni members; ``start()`` returns once a primary and two
    streaming replicas (one of them synchronous when ``synchronous``) are up.

    ``parameters`` are extra postgresql.conf settings for every member.
    """

    def __init__(
        self,
        *,
        synchronous: bool = True,
        durable: bool = False,
        parameters: Mapping[str, str] | None = None,
        run_as: str | None = "postgres",
        members: int = 3,
    ) -> None:
        self.synchronous = synchronous
        self._durable = durable
        self._parameters = dict(parameters or {})
        self._run_as: RunAs | None = run_as_user(run_as)
        self._bindir = find_bindir(None)
        self._size = members
        self.base_dir = Path(tempfile.mkdtemp(prefix="stint-patroni-"))
        prepare_dir(self.base_dir, self._run_as)
        self.base_dir.chmod(0o755)  # the test process reads the logs
        self.etcd_port = free_port()
        self._etcd_peer_port = free_port()
        self.members = [
            Member(f"m{i}", free_port(), free_port(), self.base_dir / f"m{i}" / "data")
            for i in range(members)
        ]
        self._etcd: _Process | None = None
        self._patronis: dict[str, _Process] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """etcd, then the bootstrap member, then the others; waits for them all."""
        try:
            self._etcd = self._spawn("etcd", self._etcd_argv(), self.base_dir / "etcd.log")
            self._wait(self._etcd_healthy, "etcd answered")
            self.start_member(self.members[0])
            self._wait(lambda: self.primary() is not None, "the first primary")
            for member in self.members[1:]:
                self.start_member(member)
            self.wait_healthy()
        except BaseException as exc:
            noting_failure(exc, self.destroy)
            raise
        return self

    def start_member(self, member: Member) -> None:
        """Start ``member``'s Patroni (which starts its PostgreSQL)."""
        config = self._write_config(member)
        log = self.base_dir / member.name / "patroni.log"
        self._patronis[member.name] = self._spawn("patroni", [str(config)], log)

    def destroy(self) -> None:
        """Stop every Patroni (its PostgreSQL with it) and etcd; remove the files."""
        for name, patroni in list(self._patronis.items()):
            _stop(patroni.proc)
            self._patronis.pop(name)
        for member in self.members:
            self._kill_postmaster(member)
        if self._etcd is not None:
            _stop(self._etcd.proc)
            self._etcd = None
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()

    # ------------------------------------------------------------------ what clients use

    def conninfo(self, dbname: str = "postgres", *, attrs: str = "read-write") -> str:
        """libpq's multi-host conninfo over every member: with ``read-write`` libpq
        connects to whichever member is the primary now (a standby is skipped)."""
        hosts = ",".join(_HOST for _ in self.members)
        ports = ",".join(str(m.port) for m in self.members)
        return make_conninfo(
            host=hosts,
            port=ports,
            dbname=dbname,
            user="postgres",
            target_session_attrs=attrs,
            connect_timeout=2,
        )

    def member_conninfo(self, member: Member, dbname: str = "postgres") -> str:
        """One member only (to read a standby, or the old primary after a failover)."""
        return make_conninfo(host=_HOST, port=member.port, dbname=dbname, user="postgres")

    # ------------------------------------------------------------------ roles

    def status(self) -> list[dict[str, Any]]:
        """Patroni's view of the members (``GET /cluster`` of any member that answers)."""
        for member in self.members:
            answer = _get_json(f"{member.api}/cluster")
            if answer is not None:
                members: list[dict[str, Any]] = answer.get("members", [])
                return members
        return []

    def primary(self) -> Member | None:
        """The member Patroni says leads and whose PostgreSQL runs, if any."""
        for row in self.status():
            if row.get("role") in ("leader", "master") and row.get("state") == "running":
                return self._member(str(row["name"]))
        return None

    def sync_standby(self) -> Member | None:
        for row in self.status():
            if row.get("role") == "sync_standby" and row.get("state") in ("running", "streaming"):
                return self._member(str(row["name"]))
        return None

    def _member(self, name: str) -> Member:
        return next(m for m in self.members if m.name == name)

    def _replicas_streaming(self) -> bool:
        rows = self.status()
        standbys = [r for r in rows if r.get("role") not in ("leader", "master")]
        running = [r for r in standbys if r.get("state") in ("running", "streaming")]
        if len(running) != self._size - 1 or self.primary() is None:
            return False
        return not self.synchronous or self.sync_standby() is not None

    # ------------------------------------------------------------------ faults

    def postmaster_pid(self, member: Member) -> int | None:
        try:
            first = (member.data_dir / "postmaster.pid").read_text(encoding="ascii")
        except OSError:
            return None
        head = first.split("\n", 1)[0].strip()
        return int(head) if head.isdigit() else None

    def kill_postmaster(self, member: Member) -> int:
        """``kill -9`` the member's postmaster (its Patroni stays); returns the pid."""
        pid = self.postmaster_pid(member)
        if pid is None:
            raise BackendError("the member's PostgreSQL is not running", member=member.name)
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_member(self, member: Member) -> None:
        """``kill -9`` the member's Patroni and its postmaster: the host died."""
        patroni = self._patronis.pop(member.name, None)
        if patroni is not None:
            patroni.proc.kill()
            patroni.proc.wait()
        self._kill_postmaster(member)

    def switchover(self, candidate: Member | None = None) -> subprocess.CompletedProcess[str]:
        """A planned switchover with ``patronictl``, to ``candidate`` (or Patroni's choice)."""
        primary = self.primary()
        if primary is None:
            raise BackendError("no primary to switch over from")
        args = ["switchover", "--force", "--leader", primary.name]
        if candidate is not None:
            args += ["--candidate", candidate.name]
        return self.patronictl(*args)

    def patronictl(self, *args: str) -> subprocess.CompletedProcess[str]:
        config = self.base_dir / self.members[0].name / "patroni.yml"
        done = subprocess.run(
            ["patronictl", "-c", str(config), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            **self._as_user(),
        )
        if done.returncode != 0:
            raise BackendError(
                f"patronictl {args[0]} failed: {(done.stderr or done.stdout)[-1500:]}",
                exit_code=done.returncode,
            )
        return done

    def wait_healthy(self, *, within: float = _START_TIMEOUT_S) -> None:
        """Poll until there is a primary and every standby streams (one synchronous)."""
        self._wait(self._replicas_streaming, "every replica streaming", within=within)

    def wait_for_new_primary(self, old: Member, *, within: float = 60.0) -> Member:
        """Poll until a member other than ``old`` leads with PostgreSQL running."""

        def promoted() -> bool:
            now = self.primary()
            return now is not None and now != old

        self._wait(promoted, "a new primary", within=within)
        new = self.primary()
        assert new is not None
        return new

    def logs(self) -> str:
        """Every process's log, for a failed test's message."""
        parts = []
        for path in sorted(self.base_dir.glob("**/*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.relative_to(self.base_dir)}\n{text[-4000:]}")
        return "\n".join(parts)

    def keep_logs(self) -> Path:
        """Copy every log (Patroni's, etcd's, PostgreSQL's) out of the cluster's directory,
        which :meth:`destroy` removes; returns where they are."""
        kept = Path(tempfile.mkdtemp(prefix="stint-patroni-logs-"))
        for path in self.base_dir.glob("**/*.log"):
            target = kept / path.relative_to(self.base_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        return kept

    # ------------------------------------------------------------------ internals

    def _etcd_argv(self) -> list[str]:
        client = f"http://{_HOST}:{self.etcd_port}"
        peer = f"http://{_HOST}:{self._etcd_peer_port}"
        return [
            "--name",
            "e0",
            "--data-dir",
            str(self.base_dir / "etcd"),
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"e0={peer}",
            "--initial-cluster-token",
            self.base_dir.name,
        ]

    def _etcd_healthy(self) -> bool:
        return _get_json(f"http://{_HOST}:{self.etcd_port}/health") is not None

    def _write_config(self, member: Member) -> Path:
        home = self.base_dir / member.name
        prepare_dir(home, self._run_as)
        parameters = {
            "max_connections": "200",
            "wal_keep_size": "256MB",
            "unix_socket_directories": str(home),
            # PostgreSQL's own log in the data directory (log/postgresql.log), apart
            # from Patroni's (its stderr, in patroni.log).
            "logging_collector": "on",
            "log_directory": "log",
            "log_filename": "postgresql.log",
            **({} if self._durable else {"fsync": "off", "full_page_writes": "off"}),
            **self._parameters,
        }
        dcs: dict[str, Any] = {
            "ttl": TTL_S,
            "loop_wait": LOOP_WAIT_S,
            "retry_timeout": RETRY_TIMEOUT_S,
            "maximum_lag_on_failover": 16 * 2**20,
            "primary_start_timeout": 0,
            "synchronous_mode": self.synchronous,
            "postgresql": {"use_pg_rewind": True, "use_slots": True},
        }
        trust = [
            f"host replication replicator {_HOST}/32 trust",
            f"host all all {_HOST}/32 trust",
            "local all all trust",
        ]
        config = {
            "scope": SCOPE,
            "name": member.name,
            "restapi": {
                "listen": f"{_HOST}:{member.api_port}",
                "connect_address": f"{_HOST}:{member.api_port}",
            },
            "etcd3": {"hosts": [f"{_HOST}:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": dcs,
                "initdb": ["no-sync", {"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": f"{_HOST}:{member.port}",
                "connect_address": f"{_HOST}:{member.port}",
                "data_dir": str(member.data_dir),
                "bin_dir": str(self._bindir),
                "pgpass": str(home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "replicator"},
                    "rewind": {"username": "postgres"},
                },
                "parameters": parameters,
                "pg_hba": trust,
                # A killed primary may have flushed WAL its successor never got (a
                # commit waits for the standby only after writing it locally): it must
                # be rewound, and when that fails ("requested timeline 2 does not
                # contain minimum recovery point"), copied afresh from the new primary.
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
            "tags": {"nosync": member is self.members[-1] and self._size > 2},
        }
        path = home / "patroni.yml"
        # JSON is YAML: no YAML writer needed.
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")
        if self._run_as is not None:
            os.chown(path, self._run_as.uid, self._run_as.gid)
        return path

    def _as_user(self) -> dict[str, Any]:
        if self._run_as is None:
            return {}
        return {"user": self._run_as.uid, "group": self._run_as.gid, "extra_groups": []}

    def _spawn(self, tool: str, args: list[str], log: Path) -> _Process:
        argv = [tool, *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C.UTF-8"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.base_dir),
                start_new_session=True,
                **self._as_user(),
            )
        if self._run_as is not None:
            os.chown(log, self._run_as.uid, self._run_as.gid)
        return _Process(proc, log)

    def _kill_postmaster(self, member: Member) -> None:
        pid = self.postmaster_pid(member)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return

    def _wait(
        self, ready: Callable[[], bool], what: str, *, within: float = _START_TIMEOUT_S
    ) -> None:
        deadline = time.monotonic() + within
        while not ready():
            for name, patroni in self._patronis.items():
                if patroni.proc.poll() is not None:
                    raise BackendError(
                        f"patroni {name} exited while waiting for {what}:\n{self.logs()}"
                    )
            if time.monotonic() > deadline:
                raise BackendError(
                    f"timed out after {within:g}s waiting for {what} (every log kept in "
                    f"{self.keep_logs()}):\n{self.logs()}"
                )
            time.sleep(_POLL_S)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _get_json(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            loaded: dict[str, Any] = json.loads(answer.read())
            return loaded
    except (OSError, urllib.error.URLError, ValueError):
        return None
