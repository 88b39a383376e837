"""PostgreSQL in a Docker container with CPU and memory limits, for the load cases.

The ``container`` backend kind: the best way to give every case the same
resources, since Docker enforces the limits. It is used only when a Docker
engine answers (:func:`docker_engine_answers`) and has Stint's PostgreSQL image
(:data:`CONTAINER_IMAGE`, built from Debian's postgresql package by
``deploy/build-images.sh``; no registry is needed). testcontainers is optional,
so it is imported lazily, only when a container is started; without it (or
without an engine or the image) the load backends fall back to a URL or a local
cluster.

Containers use the host's network (``--network host``) and listen on a free
loopback port: that works on engines without a bridge (``deploy/dockerd.sh``)
as well as on any other Linux engine, and needs no port mapping. Ryuk, the
testcontainers reaper, is off (its image would come from a registry); every
container is removed by :meth:`ContainerServer.stop` and carries the label
``org.stint.role=load-postgres`` for a manual sweep after a crash.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import os
import secrets
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg

from stint.lab.cgroups import Cgroup, CgroupMemory, memory_of_process
from stint.lab.errors import BackendError, noting_failure
from stint.lab.free_port import free_port
from stint.postgres.pgbin import make_conninfo

__all__ = [
    "CONTAINER_IMAGE",
    "CONTAINER_VERSION",
    "ContainerServer",
    "container_unavailable",
    "docker_engine_answers",
]

CONTAINER_IMAGE = "stint-postgres:15"
"""Built by ``deploy/build-images.sh`` from ``deploy/postgres.Dockerfile``."""
CONTAINER_VERSION = CONTAINER_IMAGE.partition(":")[2]
CONTAINER_LABEL = {"org.stint.role": "load-postgres"}
_DOCKER_TIMEOUT_S = 2.0
_READY_TIMEOUT_S = 60.0
_READY_POLL_S = 0.1
_PORT_ATTEMPTS = 3


def docker_engine_answers(timeout: float = _DOCKER_TIMEOUT_S) -> bool:
    """Whether a Docker engine answers a ping within about ``timeout`` seconds.

    Machines with only the docker CLI (or the Python client) and no engine are
    common; any failure at all (package missing, no socket, refused, timed
    out) means "no", so choosing a backend never stalls or fails on it.
    """
    return _ask_engine(lambda client: bool(client.ping()), timeout)


def container_unavailable(timeout: float = _DOCKER_TIMEOUT_S) -> str | None:
    """Why the container kind cannot be used here, or None when it can."""
    if importlib.util.find_spec("testcontainers") is None:
        return "testcontainers is not installed (pip install 'stint[containers]')"
    if not docker_engine_answers(timeout):
        return "no Docker engine answers (deploy/dockerd.sh start)"

    def has_image(client: Any) -> bool:
        client.images.get(CONTAINER_IMAGE)
        return True

    if not _ask_engine(has_image, timeout):
        return f"the engine has no {CONTAINER_IMAGE} image (deploy/build-images.sh)"
    return None


def _ask_engine(question: Any, timeout: float) -> bool:
    try:
        # Imported by name: the docker package is optional and ships no type hints.
        docker = importlib.import_module("docker")
    except ImportError:
        return False
    # When the engine is absent the client leaves its failed socket unclosed; that
    # ResourceWarning is the client's, so it is dropped here rather than surfacing later.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        answered = _ask(docker, question, timeout)
        gc.collect()
    return answered


def _ask(docker: Any, question: Any, timeout: float) -> bool:
    try:
        client = docker.from_env(timeout=timeout)
    except Exception:  # the client asks the engine for its API version right away
        return False
    try:
        return bool(question(client))
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
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer

        testcontainers_config.ryuk_disabled = True
        password = secrets.token_urlsafe(18)
        command = ["-c", "listen_addresses=127.0.0.1"]
        for key, value in settings.items():
            command += ["-c", f"{key}={value}"]
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = free_port()
            container = (
                DockerContainer(CONTAINER_IMAGE)
                .with_env("POSTGRES_PASSWORD", password)
                .with_env("PGPORT", str(port))
                .with_command(command)
                .with_kwargs(
                    network_mode="host",
                    nano_cpus=round(cpus * 1e9),
                    mem_limit=memory_bytes,
                    labels=CONTAINER_LABEL,
                )
            )
            conninfo = make_conninfo(
                host="127.0.0.1", port=port, dbname="postgres", user="postgres", password=password
            )
            try:
                container.start()
                if _wait_ready(container, conninfo):
                    memory = _container_memory(container.get_wrapped_container())
                    return cls(container, conninfo, memory, kept_prefix)
            except BaseException as exc:
                noting_failure(exc, container.stop)
                if isinstance(exc, Exception):
                    raise BackendError(
                        "could not start the PostgreSQL container",
                        image=CONTAINER_IMAGE,
                        label=label,
                        error=type(exc).__name__,
                    ) from exc
                raise
            # The server exited: most likely another process took the port meanwhile.
            logs = _tail(container)
            container.stop()
            if attempt == _PORT_ATTEMPTS:
                raise BackendError(
                    "the PostgreSQL container exited at start",
                    image=CONTAINER_IMAGE,
                    label=label,
                    log=logs,
                )
        raise AssertionError("unreachable")

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


def _wait_ready(container: Any, conninfo: str) -> bool:
    """Until the server accepts a connection (True) or its container exits (False)."""
    deadline = time.monotonic() + _READY_TIMEOUT_S
    wrapped = container.get_wrapped_container()
    while True:
        try:
            with psycopg.connect(conninfo, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            pass
        wrapped.reload()
        if wrapped.status not in ("created", "running"):
            return False
        if time.monotonic() > deadline:
            raise TimeoutError(f"PostgreSQL did not accept connections in {_READY_TIMEOUT_S}s")
        time.sleep(_READY_POLL_S)


def _tail(container: Any, lines: int = 5) -> str:
    """The last lines of the container's log (the server's own messages, no secrets)."""
    try:
        text = container.get_wrapped_container().logs(tail=lines).decode(errors="replace")
    except Exception:
        return "(no log)"
    return " | ".join(line.strip() for line in text.splitlines())


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
