"""PostgreSQL in a Docker container with CPU and memory limits, for the load cases.

The ``container`` backend kind: the best way to give every case the same
resources, since Docker enforces the limits. It is used only when a Docker
engine answers (:func:`docker_engine_answers`), and testcontainers is optional,
so it is imported lazily, only when a container is started; without it (or
without an engine) the load backends fall back to a URL or a local cluster.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import secrets
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stint.loadtest.cgroups import Cgroup, CgroupMemory, memory_of_process
from stint.loadtest.errors import BackendError, noting_failure
from stint.postgres.pgbin import make_conninfo

__all__ = ["CONTAINER_VERSION", "ContainerServer", "docker_engine_answers"]

_CONTAINER_IMAGE = "postgres:15"
CONTAINER_VERSION = _CONTAINER_IMAGE.partition(":")[2]
_CONTAINER_PORT = 5432
_DOCKER_TIMEOUT_S = 2.0


def docker_engine_answers(timeout: float = _DOCKER_TIMEOUT_S) -> bool:
    """Whether a Docker engine answers a ping within about ``timeout`` seconds.

    Machines with only the docker CLI (or the Python client) and no engine are
    common; any failure at all (package missing, no socket, refused, timed
    out) means "no", so choosing a backend never stalls or fails on it.
    """
    try:
        # Imported by name: the docker package is optional and ships no type hints.
        docker = importlib.import_module("docker")
    except ImportError:
        return False
    # When the engine is absent the client leaves its failed socket unclosed; that
    # ResourceWarning is the client's, so it is dropped here rather than surfacing later.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        answered = _ping(docker, timeout)
        gc.collect()
    return answered


def _ping(docker: Any, timeout: float) -> bool:
    try:
        client = docker.from_env(timeout=timeout)
    except Exception:  # the client asks the engine for its API version right away
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


class ContainerServer:
    """A PostgreSQL container limited by Docker (testcontainers is imported only here)."""

    data_dir: Path | None = None
    cgroup: Cgroup | None = None

    def __init__(
        self, container: Any, conninfo: str, memory: CgroupMemory | None, kept_prefix: str
    ) -> None:
        self.container = container
        self.conninfo = conninfo
        self._memory = memory
        self._kept_prefix = kept_prefix
        self._stopped = False

    @classmethod
    def start(
        cls,
        settings: Mapping[str, str],
        label: str,
        *,
        cpus: float,
        memory_bytes: int,
        kept_prefix: str,
    ) -> ContainerServer:
        """A started container with ``settings``, limited to ``cpus`` and ``memory_bytes``.

        A kept log (``close(keep=True)``) goes to a new file named ``kept_prefix``....log.
        """
        from testcontainers.postgres import PostgresContainer

        password = secrets.token_urlsafe(18)
        command = ["postgres"]
        for key, value in settings.items():
            command += ["-c", f"{key}={value}"]
        container = PostgresContainer(
            _CONTAINER_IMAGE,
            username="postgres",
            password=password,
            dbname="postgres",
            driver=None,
            command=command,
            nano_cpus=round(cpus * 1e9),
            mem_limit=memory_bytes,
        )
        try:
            container.start()
            host = container.get_container_host_ip()
            port = int(container.get_exposed_port(_CONTAINER_PORT))
            memory = _container_memory(container.get_wrapped_container())
        except BaseException as exc:
            noting_failure(exc, container.stop)
            if isinstance(exc, Exception):
                raise BackendError(
                    "could not start the PostgreSQL container",
                    image=_CONTAINER_IMAGE,
                    label=label,
                    error=type(exc).__name__,
                ) from exc
            raise
        conninfo = make_conninfo(
            host=host, port=port, dbname="postgres", user="postgres", password=password
        )
        return cls(container, conninfo, memory, kept_prefix)

    def postmaster_pid(self) -> int | None:
        return None

    def memory_peak_bytes(self) -> int | None:
        if self._memory is not None:
            return self._memory.peak_bytes()
        try:
            stats = self.container.get_wrapped_container().stats(stream=False)
        except Exception:  # an engine that cannot say is "not measured"
            return None
        peak = stats.get("memory_stats", {}).get("max_usage")  # absent under cgroup v2
        return peak if isinstance(peak, int) else None

    def oom_kills(self) -> int | None:
        return self._memory.oom_kills() if self._memory is not None else None

    async def close(self, keep: bool) -> str | None:
        return await asyncio.to_thread(self._close, keep)

    def _close(self, keep: bool) -> str | None:
        kept = None
        try:
            if keep:
                fd, name = tempfile.mkstemp(prefix=self._kept_prefix, suffix=".log")
                with os.fdopen(fd, "wb") as log:
                    log.write(self.container.get_wrapped_container().logs())
                kept = name
        finally:
            self.stop()
        return kept

    def stop(self) -> None:
        """Remove the container (and its data); stopping again does nothing."""
        if not self._stopped:
            self._stopped = True
            self.container.stop()


def _container_memory(wrapped: Any) -> CgroupMemory | None:
    """The container's memory cgroup, when the engine runs on this host.

    A remote engine's pid names some unrelated process here, so only a
    cgroup whose path names the container is trusted.
    """
    wrapped.reload()
    pid = wrapped.attrs.get("State", {}).get("Pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    memory = memory_of_process(pid)
    return memory if memory is not None and wrapped.id in str(memory.directory) else None
