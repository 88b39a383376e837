"""The hostile-client load case (issue 22): one ``stint api`` with its default
limits, on loopback, against clients that do not play fair, while a real
client keeps asking.

Phases, each bounded in count and time:

- ``followers``: 1,000 event streams that never read (4 KiB receive buffers)
  on a session holding ten 200 KB events, for longer than the drain deadline,
  while a well-behaved follower reads the whole log;
- ``big_heads``: 100 sockets each sending an 8 MB request head that never ends;
- ``idle``: 300 sockets that send nothing;
- ``slowloris``: 200 sockets that send a header line a second and never end;
- ``unauthenticated``: 1 MB JSON POSTs without a key, and with a made-up one.

Measured throughout: the API process's RSS (every 100 ms) and a real client's
request (a new connection, an authenticated GET of the session) every 50 ms:
its latency and any failure. Figures are figures: nothing here asserts a
speed; the report says what was seen, with the load average beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import uvloop

from stint.lab.backends import LoadBackends
from stint.lab.environment import environment
from stint.lab.free_port import free_port
from stint.lab.processes import spawn_api, spawn_worker, stop_workers
from stint.lab.runner import WORKER_SETTINGS
from stint.lab.sse import SseError, SseStream, http_status
from stint.store.config import ROLE_CLI
from stint.store.keys import KeyStore
from stint.store.pool import open_pool

__all__ = ["HostileSpec", "run_hostile_case", "seed_big_events"]

_HOST = "127.0.0.1"
_MIB = 2**20
_EVENT_BYTES = 200_000
_REAL_EVERY_S = 0.05
_RSS_EVERY_S = 0.1


@dataclass(frozen=True)
class HostileSpec:
    followers: int = 1000
    big_heads: int = 100
    head_bytes: int = 8_000_000
    idle: int = 300
    slowloris: int = 200
    hold_s: float = 40.0  # past the 30 s drain deadline
    socket_hold_s: float = 15.0  # past the 10 s head deadline
    unauthenticated_posts: int = 100
    big_turns: int = 5  # each adds a 200 KB question and a 200 KB answer: ten events
    phases: tuple[str, ...] = ("followers", "big_heads", "idle", "slowloris", "unauthenticated")


@dataclass
class _Watch:
    """The API's RSS and a real client's latencies during one phase."""

    peak_rss: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        return {
            "peak_rss_mib": round(self.peak_rss / _MIB, 1),
            "real_client_requests": len(lat),
            "real_client_failures": len(self.failures),
            "real_client_failure_examples": self.failures[:3],
            "real_client_p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
            "real_client_p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1) if lat else None,
            "real_client_max_ms": round(lat[-1] * 1000, 1) if lat else None,
            "real_client_over_100ms": sum(1 for x in lat if x > 0.1),
        }


async def _real_request(port: int, token: str, session_id: str) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(_HOST, port)
    try:
        writer.write(
            f"GET /v1/sessions/{session_id} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
        )
        status_line = await reader.readline()
        await reader.read()
    finally:
        writer.close()
    if not status_line.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(status_line.decode("latin-1").strip() or "no answer")
    return time.perf_counter() - started


async def _watch(
    process: psutil.Process, port: int, token: str, session_id: str, watch: _Watch
) -> None:
    async def rss() -> None:
        while True:
            watch.peak_rss = max(watch.peak_rss, process.memory_info().rss)
            await asyncio.sleep(_RSS_EVERY_S)

    async def real() -> None:
        while True:
            try:
                watch.latencies.append(
                    await asyncio.wait_for(_real_request(port, token, session_id), 10)
                )
            except (OSError, RuntimeError, TimeoutError) as exc:
                watch.failures.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(_REAL_EVERY_S)

    await asyncio.gather(rss(), real())


async def _phase(
    name: str,
    process: psutil.Process,
    port: int,
    token: str,
    session_id: str,
    body: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    watch = _Watch()
    watching = asyncio.create_task(_watch(process, port, token, session_id, watch))
    cpu = process.cpu_times()
    rss_before = process.memory_info().rss
    started = time.monotonic()
    try:
        counts = await body()
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    await asyncio.sleep(1)
    after = process.cpu_times()
    return {
        "phase": name,
        "seconds": round(time.monotonic() - started, 1),
        "rss_mib_before": round(rss_before / _MIB, 1),
        "rss_mib_after": round(process.memory_info().rss / _MIB, 1),
        "api_cpu_s": round(after.user + after.system - cpu.user - cpu.system, 2),
        "loadavg": os.getloadavg(),
        **watch.figures(),
        **counts,
    }


async def _open_raw(port: int, data: bytes, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (_HOST, port))
    if data:
        await asyncio.get_running_loop().sock_sendall(sock, data)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """The server closed it (EOF or reset), reading past any answer it sent."""
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if chunk == b"":
                return True
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


async def seed_big_events(http: httpx.AsyncClient, turns: int) -> tuple[str, int]:
    """A session with two 200 KB events per turn (a parked turn's question, then its
    answer in the turn's output), through the API (``http`` carries the key) and a
    running worker of the scripted harness; its id and last seq."""
    session_id = (await http.post("/v1/sessions", json={})).json()["id"]
    for i in range(turns):
        queued = await http.post(
            f"/v1/sessions/{session_id}/turns",
            json={"input": {"min_wait_ms": 0, "ask": f"{i}" + "q" * _EVENT_BYTES}},
        )
        queued.raise_for_status()
        step_key = None
        for _ in range(600):
            page = await http.get(
                f"/v1/sessions/{session_id}/events", params={"format": "json", "limit": 1000}
            )
            asked = [e for e in page.json()["events"] if e["kind"] == "approval.requested"]
            if len(asked) > i:
                step_key = asked[i]["payload"].get("key") or asked[i]["payload"].get("step_key")
                break
            await asyncio.sleep(0.1)
        if step_key is None:
            raise RuntimeError("the worker did not park the turn with its question")
        answered = await http.post(
            f"/v1/sessions/{session_id}/answers",
            json={"step_key": step_key, "answer": "a" * _EVENT_BYTES},
        )
        answered.raise_for_status()
    for _ in range(600):
        found = (await http.get(f"/v1/sessions/{session_id}")).json()
        if found["queued_turns"] == 0:
            return session_id, int(found["last_event_seq"])
        await asyncio.sleep(0.1)
    raise RuntimeError("the seeded turns did not finish")


async def _stream_retrying(port: int, path: str, token: str) -> SseStream:
    for _ in range(60):
        try:
            return await SseStream.open(_HOST, port, path, {"Authorization": f"Bearer {token}"})
        except SseError as exc:
            if exc.status != 503:
                raise
            await asyncio.sleep(1)
    raise RuntimeError("the well-behaved follower was refused for a minute")


async def _followers(
    spec: HostileSpec, port: int, token: str, session_id: str, last_seq: int
) -> dict[str, Any]:
    request = (
        f"GET /v1/sessions/{session_id}/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    loop = asyncio.get_running_loop()
    refused = 0
    gate = asyncio.Semaphore(64)

    async def non_reader() -> socket.socket:
        """A stream that reads its response's status line, then nothing more; a
        503 (the request limit, or the follower cap) is retried as Retry-After says."""
        nonlocal refused
        while True:
            async with gate:
                sock = await _open_raw(port, request, rcvbuf=4096)
                status = await asyncio.wait_for(loop.sock_recv(sock, 12), 60)
            if status.startswith(b"HTTP/1.1 200"):
                return sock
            refused += 1
            sock.close()
            await asyncio.sleep(1)

    socks = list(await asyncio.gather(*(non_reader() for _ in range(spec.followers))))
    good_started = time.monotonic()
    received = 0
    path = f"/v1/sessions/{session_id}/events"
    async with await _stream_retrying(port, path, token) as s:
        while received < last_seq:
            message = await asyncio.wait_for(s.next(), 120)
            if message is None:
                break
            if message.id is not None:
                received = int(message.id)
    good_s = time.monotonic() - good_started
    await asyncio.sleep(max(0.0, spec.hold_s - good_s))
    closed = sum(_closed_by_server(sock) for sock in socks)
    for sock in socks:
        sock.close()
    return {
        "followers": spec.followers,
        "follower_requests_refused_503": refused,
        "followers_closed_by_server": closed,
        "good_follower_events": received,
        "good_follower_of": last_seq,
        "good_follower_seconds": round(good_s, 2),
    }


async def _big_heads(spec: HostileSpec, port: int) -> dict[str, Any]:
    chunk = b"a" * 65536

    async def one() -> bytes:
        sock = await _open_raw(port, b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Fill: ")
        loop = asyncio.get_running_loop()
        try:
            for _ in range(spec.head_bytes // len(chunk)):
                await asyncio.wait_for(loop.sock_sendall(sock, chunk), 5)
        except (OSError, TimeoutError):
            pass
        try:
            return await asyncio.wait_for(loop.sock_recv(sock, 64), 5)
        except (OSError, TimeoutError):
            return b""
        finally:
            sock.close()

    answers = await asyncio.gather(*(one() for _ in range(spec.big_heads)))
    return {
        "sockets": spec.big_heads,
        "head_bytes_each": spec.head_bytes,
        "answered_431": sum(a.startswith(b"HTTP/1.1 431") for a in answers),
    }


async def _idle(spec: HostileSpec, port: int) -> dict[str, Any]:
    socks = [await _open_raw(port, b"") for _ in range(spec.idle)]
    await asyncio.sleep(spec.socket_hold_s)
    closed = sum(_closed_by_server(sock) for sock in socks)
    for sock in socks:
        sock.close()
    return {"sockets": spec.idle, "closed_by_server": closed}


async def _slowloris(spec: HostileSpec, port: int) -> dict[str, Any]:
    socks = [
        await _open_raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        for _ in range(spec.slowloris)
    ]
    answered_408 = 0
    deadline = time.monotonic() + spec.socket_hold_s
    while time.monotonic() < deadline:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b"X-A: b\r\n")
        await asyncio.sleep(1)
    for sock in socks:
        with contextlib.suppress(OSError):
            answered_408 += sock.recv(64).startswith(b"HTTP/1.1 408")
        sock.close()
    return {"sockets": spec.slowloris, "answered_408": answered_408}


async def _unauthenticated(spec: HostileSpec, port: int, process: psutil.Process) -> dict[str, Any]:
    body = json.dumps({"input": {"pad": "x" * 1_000_000}}).encode()[:1_040_000]
    body = json.dumps({"input": {"pad": "x" * (len(body) - 30)}}).encode()
    figures: dict[str, Any] = {"body_bytes": len(body)}
    async with httpx.AsyncClient(base_url=f"http://{_HOST}:{port}", timeout=30) as http:
        for label, headers in (
            ("no_key", {}),
            ("made_up_key", {"Authorization": "Bearer stk_00000000_" + "0" * 43}),
        ):
            cpu = process.cpu_times()
            statuses = set()
            for _ in range(spec.unauthenticated_posts):
                got = await http.post(
                    "/v1/sessions",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                )
                statuses.add(got.status_code)
            after = process.cpu_times()
            spent = after.user + after.system - cpu.user - cpu.system
            figures[label] = {
                "statuses": sorted(statuses),
                "api_cpu_ms_per_request": round(spent / spec.unauthenticated_posts * 1000, 2),
            }
    return figures


async def run_hostile_case(
    spec: HostileSpec, backends: LoadBackends, work_dir: Path
) -> dict[str, Any]:
    database = await backends.open_case("hostile")
    config = database.target.config
    report: dict[str, Any] = {
        "schema_version": 1,
        "case": "hostile",
        "spec": spec.__dict__,
        "environment": environment(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "phases": [],
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
        try:
            token = (await KeyStore(config, pool).keys_create(tenant="hostile")).token
        finally:
            await pool.close()
        db_env = {
            "STINT_DATABASE_URL": config.conninfo,
            "STINT_SCHEMA": config.schema,
            "STINT_AUTO_MIGRATE": "false",
            "STINT_LOG_LEVEL": "info",
        }
        port = free_port(_HOST)
        api = spawn_api(env=db_env, port=port, log_path=work_dir / "api.log")
        procs.append(api)
        worker_env = {**WORKER_SETTINGS, **db_env, "STINT_WORKSPACE": str(work_dir / "ws")}
        procs.append(spawn_worker(env=worker_env, log_path=work_dir / "worker.log"))
        for _ in range(600):
            if await http_status(_HOST, port, "/readyz") == 200:
                break
            await asyncio.sleep(0.1)
        process = psutil.Process(api.pid)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            base_url=f"http://{_HOST}:{port}", headers=headers, timeout=60
        ) as http:
            session_id, last_seq = await seed_big_events(http, spec.big_turns)
        report["rss_mib_idle"] = round(process.memory_info().rss / _MIB, 1)
        phases: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("followers", lambda: _followers(spec, port, token, session_id, last_seq)),
            ("big_heads", lambda: _big_heads(spec, port)),
            ("idle", lambda: _idle(spec, port)),
            ("slowloris", lambda: _slowloris(spec, port)),
            ("unauthenticated", lambda: _unauthenticated(spec, port, process)),
        ]
        for name, body in phases:
            if name not in spec.phases:
                continue
            report["phases"].append(await _phase(name, process, port, token, session_id, body))
            print(json.dumps(report["phases"][-1]), file=sys.stderr, flush=True)
    finally:
        stop_workers(procs)
        await database.close(keep=False)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stint.lab.hostile_case",
        description="stint api against hostile clients on loopback; writes hostile.json",
    )
    parser.add_argument("--report-dir", type=Path, default=Path("reports"))
    parser.add_argument("--followers", type=int, default=HostileSpec.followers)
    parser.add_argument(
        "--phases",
        default=",".join(HostileSpec.phases),
        help="comma-separated, of: " + ", ".join(HostileSpec.phases),
    )
    args = parser.parse_args(argv)
    backends = LoadBackends(settings=None)
    (args.report_dir / "hostile-work").mkdir(parents=True, exist_ok=True)
    try:
        report = uvloop.run(
            run_hostile_case(
                HostileSpec(followers=args.followers, phases=tuple(args.phases.split(","))),
                backends,
                args.report_dir / "hostile-work",
            )
        )
    finally:
        backends.close()
    report["command"] = " ".join(["python -m stint.lab.hostile_case", *(argv or sys.argv[1:])])
    args.report_dir.mkdir(parents=True, exist_ok=True)
    out = args.report_dir / "hostile.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
