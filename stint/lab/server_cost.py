"""What the HTTP server stack costs per request: uvicorn with httptools, with
httptools and Stint's connection guard (``stint.api.connections``), and with
h11 (which caps request heads itself), each serving a trivial ASGI app in its
own process on loopback. The client sends ``--requests`` GETs, one after the
other on one kept-alive connection; the figure is the server process's CPU
seconds (user + system) per request, so the app's own work is left out.

    python -m stint.lab.server_cost [--requests 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import psutil
import uvicorn
import uvloop

from stint.api.connections import ConnectionLimits, guarded_protocol
from stint.lab.free_port import free_port

__all__ = ["main"]

_HOST = "127.0.0.1"
_STACKS = ("httptools", "httptools+guard", "h11")
_REQUEST = b"GET /x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer stk_0000000000000000_x\r\n\r\n"


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(stack: str, port: int) -> None:
    http: Any = "h11" if stack == "h11" else "httptools"
    if stack == "httptools+guard":
        http = guarded_protocol(ConnectionLimits(65_536, 10.0, 2000, 262_144))
    uvicorn.run(
        _app,
        host=_HOST,
        port=port,
        loop="uvloop",
        http=http,
        log_level="warning",
        access_log=False,
        h11_max_incomplete_event_size=65_536 if stack == "h11" else None,
    )


async def _drive(port: int, requests: int) -> float:
    for _ in range(200):
        try:
            reader, writer = await asyncio.open_connection(_HOST, port)
            break
        except OSError:
            await asyncio.sleep(0.05)
    else:
        raise RuntimeError("the server did not start")
    started = time.perf_counter()
    for _ in range(requests):
        writer.write(_REQUEST)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


def _measure(stack: str, requests: int) -> dict[str, Any]:
    port = free_port(_HOST)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stint.lab.server_cost", "--serve", stack, "--port", str(port)]
    )
    try:
        server = psutil.Process(proc.pid)
        uvloop.run(_drive(port, 50))  # warm up
        before = server.cpu_times()
        elapsed = uvloop.run(_drive(port, requests))
        after = server.cpu_times()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    cpu = after.user + after.system - before.user - before.system
    return {
        "stack": stack,
        "requests": requests,
        "server_cpu_us_per_request": round(cpu / requests * 1e6, 1),
        "wall_us_per_request": round(elapsed / requests * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stint.lab.server_cost", description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--serve", choices=_STACKS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve, args.port)
        return 0
    figures = [_measure(stack, args.requests) for stack in _STACKS]
    print(json.dumps({"loadavg": os.getloadavg(), "figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
