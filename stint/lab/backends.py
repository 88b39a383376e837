"""Where each load case's PostgreSQL runs, and what limits it and the workers get.

Figures from different cases (and machines) only compare when PostgreSQL has
the same resources each time, so every case gets a fresh server limited to
1 CPU and 1 GiB. The kind is chosen once per run, best first:

1. ``container``: a container through testcontainers, when a Docker engine
   answers and has Stint's PostgreSQL image; Docker enforces the limits.
2. ``url``: the server at ``STINT_LOAD_DATABASE_URL``; each case creates and
   drops a schema of its own there and touches nothing else. Its limits are
   whatever that server has, so they are reported as unknown.
3. ``local-cgroup``: a durable local cluster whose postmaster starts inside a
   cgroup of its own (its backends inherit it).
4. ``local``: the same without limits, when cgroups cannot be made here.

``STINT_LOAD_BACKEND=patroni`` asks for a highly available one instead: a
Patroni cluster per case (three members, synchronous replication, etcd; see
``stint.lab.patroni``), reached through its multi-host conninfo with
``target_session_attrs=read-write``. Its members run unlimited (they are three
servers, not one), so its figures compare only with other ``patroni`` runs.

Workers get a cgroup of their own per case (2 CPUs, 3 GiB) whenever cgroups
can be made, whatever the PostgreSQL kind. The kind and the limits go into
every case's report, so no figure is read without what bounded it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict

from stint.lab.cgroups import Cgroup, cgroup_support
from stint.lab.container import CONTAINER_VERSION, ContainerServer, container_unavailable
from stint.lab.errors import BackendError, noting_failure
from stint.lab.model import Backend
from stint.lab.patroni import PatroniCluster, patroni_unavailable
from stint.postgres.pgbin import run_pg
from stint.postgres.scratch import ScratchDatabases, ScratchSchemas, ScratchTarget
from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.config import StoreConfig
from stint.store.errors import EmbeddedPostgresError

__all__ = [
    "KIND_ENV",
    "POSTGRES_CPUS",
    "POSTGRES_MEMORY_BYTES",
    "URL_ENV",
    "BackendError",
    "BackendKind",
    "CaseDatabase",
    "LoadBackends",
    "close_case",
]

URL_ENV = "STINT_LOAD_DATABASE_URL"
KIND_ENV = "STINT_LOAD_BACKEND"
POSTGRES_CPUS = 1.0
POSTGRES_MEMORY_BYTES = 2**30

BackendKind = Literal["container", "url", "local-cgroup", "local", "patroni"]

_LOCAL_SETTINGS = {"max_connections": "200"}
_KEPT_PREFIX = "stint-load-kept-"
_MIB = 2**20
_GIB = 2**30


class _Server(Protocol):
    """What differs between kinds: figures, and how a case's server goes away."""

    @property
    def data_dir(self) -> Path | None: ...

    @property
    def cgroup(self) -> Cgroup | None: ...

    def postmaster_pid(self) -> int | None: ...

    def memory_peak_bytes(self) -> int | None: ...

    def oom_kills(self) -> int | None: ...

    async def close(self, keep: bool) -> str | None: ...


class CaseDatabase:
    """One load case's migrated Stint database and the server it lives on.

    ``target`` is where the case runs Stint; ``backend`` goes into its report.
    """

    def __init__(self, target: ScratchTarget, backend: Backend, server: _Server) -> None:
        self.target = target
        self.backend = backend
        self._server = server
        self._closed = False

    @property
    def data_dir(self) -> Path | None:
        """The local cluster's data directory (None for a container or a URL)."""
        return self._server.data_dir

    @property
    def cgroup(self) -> Cgroup | None:
        """The cgroup the local server runs in, if any."""
        return self._server.cgroup

    def postmaster_pid(self) -> int | None:
        """The local server's postmaster pid (None for a container or a URL)."""
        return self._server.postmaster_pid()

    def memory_peak_mib(self) -> float | None:
        """The server's peak memory (page cache included) in MiB, None when not measured."""
        peak = self._server.memory_peak_bytes()
        return None if peak is None else peak / _MIB

    def oom_kills(self) -> int | None:
        """Processes of the server killed for lack of memory, None when not counted."""
        return self._server.oom_kills()

    async def close(self, *, keep: bool = False) -> str | None:
        """Stop and remove this case's server (or schema); nothing else is touched.

        ``keep`` (a failed case): stop the server but keep its data directory
        and log, or the container's log, or the schema; returns where they are.
        Closing again does nothing.
        """
        if self._closed:
            return None
        self._closed = True
        return await self._server.close(keep)


class LoadBackends:
    """Picks the PostgreSQL kind once, then provides a server per load case.

    ``settings`` are extra postgresql.conf settings for servers we start (not
    for a URL's server, which is not ours to configure).
    """

    def __init__(
        self,
        settings: Mapping[str, str] | None = None,
        *,
        worker_cpus: float = 2.0,
        worker_memory_bytes: int = 3 * _GIB,
        limit_workers: bool = True,
    ) -> None:
        self._settings = dict(settings or {})
        self._worker_cpus = worker_cpus
        self._worker_memory_bytes = worker_memory_bytes
        self._limit_workers = limit_workers
        self._cgroups = cgroup_support()
        self._url = os.environ.get(URL_ENV) or None
        self._url_shown = ""
        self.container_unavailable: str | None = None
        """Why the container kind was not chosen (None when it was)."""
        self.kind = self._choose()
        self._template: ThrowawayTemplate | None = None
        self._schemas: ScratchSchemas | None = None
        self.postgres_version: str | None = None
        if self.kind == "container":
            self.postgres_version = CONTAINER_VERSION
        elif self.kind == "patroni":
            self.postgres_version = _binary_version(ThrowawayTemplate())
        elif self.kind == "url":
            assert self._url is not None
            self._url_shown = _redacted(self._url)
            self._schemas = ScratchSchemas(StoreConfig(conninfo=self._url))
        else:
            self._template = ThrowawayTemplate(
                durable=True, settings={**_LOCAL_SETTINGS, **self._settings}
            )
            self.postgres_version = _binary_version(self._template)
        self._containers: list[ContainerServer] = []
        self._made_cgroups: list[Cgroup] = []

    def describe(self) -> str:
        """One line: where PostgreSQL runs and what limits PostgreSQL and the workers."""
        version = f"PostgreSQL {self.postgres_version or '(version unknown)'}"
        limits = _limits_text(POSTGRES_CPUS, POSTGRES_MEMORY_BYTES)
        postgres = {
            "container": f"{version} in a Docker container per case, {limits}",
            "url": f"PostgreSQL at {URL_ENV}={self._url_shown}, a schema per case, limits unknown",
            "local-cgroup": f"local {version} per case in a cgroup, {limits}",
            "local": f"local {version} per case, no limits ({self._cgroups.detail})",
            "patroni": f"a Patroni cluster of 3 {version} members per case (synchronous "
            "replication), no limits",
        }[self.kind]
        if not self._limit_workers:
            workers = "no limits (not asked for)"
        elif self._cgroups.available:
            limits = _limits_text(self._worker_cpus, self._worker_memory_bytes)
            workers = f"a cgroup per case, {limits}"
        else:
            workers = f"no limits ({self._cgroups.detail})"
        return f"{postgres}; workers: {workers}"

    async def open_case(self, label: str) -> CaseDatabase:
        """A fresh, migrated Stint database for the case ``label``; the caller closes it."""
        openers: dict[str, Callable[[str], Awaitable[CaseDatabase]]] = {
            "container": self._open_container,
            "url": self._open_schema,
            "local-cgroup": self._open_local,
            "local": self._open_local,
            "patroni": self._open_patroni,
        }
        return await openers[self.kind](label)

    def worker_cgroup(self, label: str) -> Cgroup | None:
        """A new cgroup for ``label``'s worker processes, or None when workers go unlimited.

        The caller stops the workers and removes it; :meth:`close` removes any left.
        """
        if not (self._limit_workers and self._cgroups.available):
            return None
        cgroup = Cgroup.create(
            f"workers-{label}", cpus=self._worker_cpus, memory_bytes=self._worker_memory_bytes
        )
        if cgroup is None:
            raise BackendError("cgroups worked at start but cannot be created now", label=label)
        self._made_cgroups.append(cgroup)
        return cgroup

    def close(self) -> None:
        """Destroy what cases left running (servers, containers, cgroups) and the template.

        Synchronous so it can run after the cases' event loops are gone. Cases
        are closed by their runner; a URL case that never was keeps its schema.
        """
        failures: list[Exception] = []
        for container in self._containers:
            _collect(failures, container.stop)
        if self._template is not None:
            _collect(failures, self._template.cleanup)
        for cgroup in self._made_cgroups:
            _collect(failures, cgroup.remove)
        if failures:
            for other in failures[1:]:
                failures[0].add_note(f"cleanup also failed: {other}")
            raise failures[0]

    # ------------------------------------------------------------------ internals

    def _choose(self) -> BackendKind:
        asked = os.environ.get(KIND_ENV, "")
        if asked == "patroni":
            why = patroni_unavailable()
            if why is not None:
                raise BackendError(f"{KIND_ENV}=patroni: {why}")
            self.container_unavailable = f"{KIND_ENV}=patroni"
            return "patroni"
        if asked:
            raise BackendError(f"{KIND_ENV} must be patroni or unset", given=asked)
        self.container_unavailable = container_unavailable()
        if self.container_unavailable is None:
            return "container"
        if self._url:
            return "url"
        return "local-cgroup" if self._cgroups.available else "local"

    def _backend(self, postgres_limits: dict[str, Any] | str) -> Backend:
        if self._limit_workers and self._cgroups.available:
            workers: dict[str, Any] | str = self._cgroups.limits(
                self._worker_cpus, self._worker_memory_bytes
            )
        else:
            workers = "unlimited"
        return Backend(
            kind=self.kind,
            postgres_limits=postgres_limits,
            worker_limits=workers,
            postgres_version=self.postgres_version,
        )

    async def _open_local(self, label: str) -> CaseDatabase:
        assert self._template is not None
        cgroup = None
        if self.kind == "local-cgroup":
            cgroup = Cgroup.create(
                f"pg-{label}", cpus=POSTGRES_CPUS, memory_bytes=POSTGRES_MEMORY_BYTES
            )
            if cgroup is None:
                raise BackendError("cgroups worked at start but cannot be created now", label=label)
            self._made_cgroups.append(cgroup)
        procs = cgroup.procs_files if cgroup is not None else []
        try:
            cluster = await asyncio.to_thread(self._template.new_cluster, cgroup_procs=procs)
        except BaseException as exc:
            if cgroup is not None:
                noting_failure(exc, cgroup.remove)
            raise
        server = _LocalServer(cluster, cgroup)
        target = await _migrated(server, cluster.conninfo("postgres"))
        limits = cgroup.limits() if cgroup is not None else "unlimited"
        return CaseDatabase(target, self._backend(limits), server)

    async def _open_container(self, label: str) -> CaseDatabase:
        server = await asyncio.to_thread(
            ContainerServer.start,
            {**_LOCAL_SETTINGS, **self._settings},
            label,
            cpus=POSTGRES_CPUS,
            memory_bytes=POSTGRES_MEMORY_BYTES,
            kept_prefix=_KEPT_PREFIX,
        )
        self._containers.append(server)
        target = await _migrated(server, server.conninfo)
        limits = {"cpus": POSTGRES_CPUS, "memory_bytes": POSTGRES_MEMORY_BYTES, "via": "docker"}
        return CaseDatabase(target, self._backend(limits), server)

    async def _open_patroni(self, label: str) -> CaseDatabase:
        cluster = PatroniCluster(durable=True, parameters={**_LOCAL_SETTINGS, **self._settings})
        await asyncio.to_thread(cluster.start)
        server = _PatroniServer(cluster)
        target = await _migrated(server, cluster.conninfo())
        return CaseDatabase(target, self._backend("unlimited"), server)

    async def _open_schema(self, label: str) -> CaseDatabase:
        assert self._schemas is not None
        target = await self._schemas.create()
        server = _SchemaServer(self._schemas, target, self._url_shown)
        return CaseDatabase(target, self._backend("unknown"), server)


# --------------------------------------------------------------------------- servers


class _LocalServer:
    """A durable throwaway cluster of ours, maybe inside a cgroup."""

    def __init__(self, cluster: ThrowawayCluster, cgroup: Cgroup | None) -> None:
        self.cluster = cluster
        self.cgroup = cgroup
        self.data_dir: Path | None = cluster.data_dir

    def postmaster_pid(self) -> int | None:
        return self.cluster.postmaster_pid()

    def memory_peak_bytes(self) -> int | None:
        return self.cgroup.memory_peak_bytes() if self.cgroup is not None else None

    def oom_kills(self) -> int | None:
        return self.cgroup.oom_kills() if self.cgroup is not None else None

    async def close(self, keep: bool) -> str | None:
        try:
            return await asyncio.to_thread(self._keep if keep else self._destroy)
        finally:
            if self.cgroup is not None:
                await asyncio.to_thread(self.cgroup.remove)

    def _destroy(self) -> None:
        self.cluster.destroy()

    def _keep(self) -> str:
        """Stop the server and move its data directory (log inside) out of the template's.

        The template removes everything under its own directory when it is
        cleaned up, so kept files must live elsewhere.
        """
        try:
            self.cluster.stop("fast")
        except EmbeddedPostgresError:
            self.cluster.stop("immediate")
        kept = Path(tempfile.mkdtemp(prefix=_KEPT_PREFIX))
        return str(shutil.move(self.cluster.data_dir, kept))


class _PatroniServer:
    """A Patroni cluster of ours; figures are the primary's where there is one."""

    cgroup: Cgroup | None = None

    def __init__(self, cluster: PatroniCluster) -> None:
        self.cluster = cluster

    @property
    def data_dir(self) -> Path | None:
        primary = self.cluster.primary()
        return primary.data_dir if primary is not None else None

    def postmaster_pid(self) -> int | None:
        primary = self.cluster.primary()
        return self.cluster.postmaster_pid(primary) if primary is not None else None

    def memory_peak_bytes(self) -> int | None:
        return None

    def oom_kills(self) -> int | None:
        return None

    async def close(self, keep: bool) -> str | None:
        kept = None
        if keep:
            kept = Path(tempfile.mkdtemp(prefix=_KEPT_PREFIX)) / "patroni.log"
            kept.write_text(self.cluster.logs(), encoding="utf-8")
        await asyncio.to_thread(self.cluster.destroy)
        return None if kept is None else str(kept)


class _SchemaServer:
    """A schema of ours on a server we were only given a URL for."""

    data_dir: Path | None = None
    cgroup: Cgroup | None = None

    def __init__(self, schemas: ScratchSchemas, target: ScratchTarget, url_shown: str) -> None:
        self._schemas = schemas
        self._target = target
        self._url_shown = url_shown

    def postmaster_pid(self) -> int | None:
        return None

    def memory_peak_bytes(self) -> int | None:
        return None

    def oom_kills(self) -> int | None:
        return None

    async def close(self, keep: bool) -> str | None:
        if keep:
            return f"schema {self._target.config.schema} left in place at {self._url_shown}"
        await self._schemas.drop(self._target)
        return None


# --------------------------------------------------------------------------- helpers


async def close_case(
    database: CaseDatabase, cgroup: Cgroup | None, case_dir: Path, *, failed: bool
) -> str | None:
    """End a case: stop its server and remove its workers' cgroup. A failed case keeps
    its database (the answer says where) and its folder of logs; a passed one leaves
    nothing behind."""
    kept = await database.close(keep=failed)
    if cgroup is not None:
        cgroup.remove()
    if not failed:
        shutil.rmtree(case_dir, ignore_errors=True)
    return kept


async def _migrated(server: _Server, conninfo: str) -> ScratchTarget:
    """A migrated database of its own on ``server``; the server is closed if that fails."""
    scratch = ScratchDatabases(StoreConfig(conninfo=conninfo))
    try:
        await scratch.prepare()
        return await scratch.create()
    except BaseException as exc:
        try:
            await server.close(keep=False)
        except Exception as failure:
            exc.add_note(f"closing the server also failed: {failure}")
        raise


def _collect(failures: list[Exception], step: Callable[[], object]) -> None:
    try:
        step()
    except Exception as exc:
        failures.append(exc)


def _binary_version(template: ThrowawayTemplate) -> str | None:
    """``15.14`` from ``postgres --version`` of the binaries the clusters run."""
    try:
        done = run_pg(template.bindir, "postgres", ["--version"], template.run_as, timeout=30)
    except EmbeddedPostgresError:
        return None
    found = re.search(r"\(PostgreSQL\)\s+(\S+)", done.stdout)
    return found.group(1) if found else None


def _redacted(url: str) -> str:
    """``url`` without its password, for display; refuses a URL libpq cannot parse."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # from None: libpq's message may quote part of the URL.
        raise BackendError(f"{URL_ENV} is not a valid PostgreSQL URL or conninfo") from None
    user = params.get("user")
    port = params.get("port")
    dbname = params.get("dbname")
    shown = f"{user}@" if user else ""
    shown += str(params.get("host") or "localhost")
    shown += f":{port}" if port else ""
    shown += f"/{dbname}" if dbname else ""
    return f"postgresql://{shown}"


def _limits_text(cpus: float, memory_bytes: int) -> str:
    return f"{cpus:g} CPU, {memory_bytes / _GIB:g} GiB"
