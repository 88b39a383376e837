"""Worker health for orchestrators: liveness and readiness over plain HTTP.

``STINT_HEALTH_PORT`` (0 = off) serves two endpoints, each answering 200 or 503
with a small JSON body of the figures it judged. ``STINT_HEALTH_PORT_FILE`` names a
file the served port is written to; with port 0 and that file, the worker serves on
a loopback port the OS picks. That is for several workers sharing one host network
(compose with ``network_mode: host``): no fixed port to collide on, and each
container's probe reads its own worker's port from its own filesystem.

- ``GET /livez``: the process's event loop keeps up (its lag is below a bound,
  a third of the lease by default). It does not ask the database: during an
  outage every worker would fail it at once and be restarted for nothing (a
  worker waits for the database and resumes by itself, fenced meanwhile).
- ``GET /readyz``: serving (registered, not starting), not draining, and the
  database answers now: each request
  asks it (at most every half second, within a second), so the answer is the
  truth within a second of an outage's start or end.
- ``GET /metrics``: the worker's Prometheus metrics, when the worker passes an
  exposition (``STINT_METRICS``, on by default); 404 otherwise.

The worker feeds a :class:`HealthState` (``renewed()``, ``renewal_failed()``,
``draining``, and a database probe); :func:`serve_health` runs the server and the loop-lag watcher
beside it. No web framework: a request line in, one response out, connection
closed. ``python -m stint.worker.health livez|readyz`` is the probe for
Docker's HEALTHCHECK (exit 0 when healthy): the port from ``STINT_HEALTH_PORT``, or
from the port file when the port is 0.

Only the standard library is imported here, so the probe starts quickly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from stint.errors import StintError

__all__ = ["Exposition", "HealthServerError", "HealthState", "probe", "serve_health"]

log = logging.getLogger("stint.worker.health")

_LAG_INTERVAL = 0.25  # seconds between loop-lag samples
_REQUEST_TIMEOUT = 5.0  # seconds a client may take to send its request head
_PATHS = ("/livez", "/readyz")
_METRICS = "/metrics"
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
_JSON = "application/json"
_PROBE_EVERY = 0.5  # seconds: /readyz asks the database at most this often

Exposition = Callable[[], tuple[bytes, str]]
"""The metrics page and its content type, rendered at each scrape."""

DatabaseProbe = Callable[[], Awaitable[str | None]]
"""Asks the database now: None when it answered, else why not."""


class HealthServerError(StintError):
    """The health port could not be opened (taken, or not ours to bind)."""


class HealthState:
    """What the worker tells the health server; set from the worker's event loop.

    ``clock`` is monotonic seconds (a parameter so unit tests can step it).
    """

    def __init__(
        self,
        *,
        lease_seconds: float,
        max_loop_lag: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: DatabaseProbe | None = None,
    ) -> None:
        self.lease_seconds = lease_seconds
        self.max_loop_lag = lease_seconds / 3 if max_loop_lag is None else max_loop_lag
        self.draining = False
        self.serving = False  # registered and claiming (not still starting)
        self.db_ok: bool | None = None  # unknown until the database first answers
        self.loop_lag = 0.0
        self._clock = clock
        self._last_renewal = clock()
        self._lost_at: float | None = None
        self.probe = probe
        self.db_detail: str | None = None
        self._probed_at: float | None = None

    def renewed(self) -> None:
        """The database answered a registration or lease renewal just now (after a
        loss, one line says the connection is back and how long it was gone)."""
        self._last_renewal = self._clock()
        self._answered()

    def renewal_failed(self) -> None:
        """A lease renewal failed: the database did not answer (in time)."""
        self._failed()

    def _answered(self) -> None:
        if self._lost_at is not None:
            outage = self._clock() - self._lost_at
            log.info(
                "database connection back after %.1fs without it",
                outage,
                extra={"outage_s": round(outage, 3)},
            )
            self._lost_at = None
        self.db_ok = True
        self.db_detail = None

    def _failed(self) -> None:
        if self._lost_at is None:
            self._lost_at = self._clock()
        self.db_ok = False

    def renewal_age(self) -> float:
        return self._clock() - self._last_renewal

    def waiting_for_database(self, why: str) -> None:
        """The worker has not reached the database yet (it waits for it)."""
        self.db_ok = False
        self.db_detail = why

    async def probe_database(self) -> None:
        """Ask the database now through the probe, if there is one (at most
        every half second: many probes at once ask once)."""
        if self.probe is None:
            return
        now = self._clock()
        if self._probed_at is not None and now - self._probed_at < _PROBE_EVERY:
            return
        self._probed_at = now
        why = await self.probe()
        if why is None:
            self._answered()
        else:
            self._failed()
            self.db_detail = why

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """The loop keeps up; the renewal age is shown, not judged (see module doc)."""
        age = self.renewal_age()
        ok = self.loop_lag < self.max_loop_lag
        return ok, {
            "loop_lag_s": round(self.loop_lag, 4),
            "max_loop_lag_s": self.max_loop_lag,
            "renewal_age_s": round(age, 3),
            "lease_s": self.lease_seconds,
        }

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        ok = self.serving and not self.draining and self.db_ok is True
        figures: dict[str, Any] = {
            "serving": self.serving,
            "draining": self.draining,
            "database_ok": self.db_ok,
        }
        if self.db_detail is not None:
            figures["database_detail"] = self.db_detail
        return ok, figures


@contextlib.asynccontextmanager
async def serve_health(
    port: int,
    state: HealthState,
    metrics: Exposition | None = None,
    *,
    port_file: Path | None = None,
) -> AsyncIterator[None]:
    """Serve ``/livez``, ``/readyz`` (and ``/metrics`` when given) on ``port`` (all
    interfaces) while the block runs, and sample the event loop's lag into
    ``state``. Port 0 serves nothing, unless ``port_file`` is given: then a loopback
    port the OS picks (only a probe beside the worker needs it). The port served is
    written to ``port_file`` (whole, by a rename) and the file removed at the end."""
    if port == 0 and port_file is None:
        yield
        return
    host = None if port else "127.0.0.1"
    try:
        server = await asyncio.start_server(
            lambda r, w: _answer(r, w, state, metrics), host=host, port=port, reuse_address=True
        )
    except OSError as exc:
        raise HealthServerError(f"cannot serve health on port {port}: {exc.strerror}") from exc
    served = int(server.sockets[0].getsockname()[1])
    watcher = asyncio.create_task(_watch_lag(state), name="health-lag")
    try:
        if port_file is not None:
            _write_port(port_file, served)
        log.info(
            "health endpoints on port %d: /livez /readyz%s", served, " /metrics" if metrics else ""
        )
        yield
    finally:
        watcher.cancel()
        server.close()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await server.wait_closed()
        if port_file is not None:
            _remove_port(port_file)


def _remove_port(path: Path) -> None:
    """No port file once nothing serves: a probe then says so instead of dialling."""
    path.unlink(missing_ok=True)


def _write_port(path: Path, port: int) -> None:
    """The port, written whole: a probe never reads half a number."""
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_text(f"{port}\n")
        partial.replace(path)
    except OSError as exc:
        raise HealthServerError(f"cannot write the health port to {path}: {exc.strerror}") from exc


async def _watch_lag(state: HealthState) -> None:
    """How late the loop wakes from a short sleep: a blocked loop shows here."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(_LAG_INTERVAL)
        state.loop_lag = max(0.0, time.monotonic() - before - _LAG_INTERVAL)


async def _answer(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    state: HealthState,
    metrics: Exposition | None,
) -> None:
    try:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        method, path = _request_line(head)
        if path == "/readyz":
            await state.probe_database()
        if path == _METRICS and metrics is not None and method in ("GET", "HEAD"):
            status, (payload, content_type) = 200, metrics()
        else:
            status, body = _route(method, path, state)
            payload, content_type = json.dumps(body).encode() + b"\n", _JSON
        headers = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        writer.write(headers if method == "HEAD" else headers + payload)
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3:
        return "", ""
    return parts[0], parts[1].split("?", 1)[0]


def _route(method: str, path: str, state: HealthState) -> tuple[int, dict[str, Any]]:
    if path not in _PATHS:
        return 404, {"error": "not found", "paths": list(_PATHS)}
    if method not in ("GET", "HEAD"):
        return 405, {"error": "use GET"}
    ok, figures = state.liveness() if path == "/livez" else state.readiness()
    return (200 if ok else 503), {"status": "ok" if ok else "failing", **figures}


# --------------------------------------------------------------------------- probe


def probe(port: int, check: str, *, host: str = "127.0.0.1", timeout: float = 3.0) -> bool:
    """GET ``/<check>`` from a worker's health port; True on 200."""
    import http.client  # here, not at the top: a worker serving health never needs it

    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", f"/{check}")
        response = conn.getresponse()
        body = response.read().decode(errors="replace").strip()
    except OSError as exc:
        print(f"{check}: no answer on {host}:{port} ({exc})", file=sys.stderr)
        return False
    finally:
        conn.close()
    print(f"{check}: {response.status} {body}")
    return response.status == 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.worker.health",
        description="Probe a worker's health endpoint; exit 0 when it answers 200.",
    )
    parser.add_argument("check", choices=["livez", "readyz"])
    parser.add_argument(
        "--port", type=int, default=None, help="health port (default: STINT_HEALTH_PORT)"
    )
    parser.add_argument(
        "--port-file",
        default=None,
        help="read the port from this file when the port is 0 (default: STINT_HEALTH_PORT_FILE)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    port = args.port if args.port is not None else int(os.environ.get("STINT_HEALTH_PORT", "0"))
    port_file = args.port_file or os.environ.get("STINT_HEALTH_PORT_FILE", "")
    if port <= 0 and port_file:
        try:
            port = int(Path(port_file).read_text().strip())
        except (OSError, ValueError) as exc:
            print(f"{args.check}: no health port in {port_file} yet ({exc})", file=sys.stderr)
            return 1
    if port <= 0:
        print(
            f"{args.check}: the health endpoint is off"
            " (STINT_HEALTH_PORT=0 and no STINT_HEALTH_PORT_FILE)",
            file=sys.stderr,
        )
        return 1
    return 0 if probe(port, args.check, host=args.host) else 1


if __name__ == "__main__":
    sys.exit(main())
