"""A free local TCP port for a process the load machinery or a test starts (a
worker's health port, an API, a published container port).

The port is free when asked; the process that binds it next wins. A port the
kernel hands out for ``bind(0)`` comes from its ephemeral range, the same range
every outgoing connection takes its local port from, so on a busy machine (tests
in parallel, each connecting to PostgreSQL) a connection could take the port
between our choice and the process's bind (seen in CI: "address already in
use" for a worker's health port). So the port is chosen at random below that
range, where the kernel never hands ports out, and checked by binding it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000
_TRIES = 200


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _binds(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing is bound to on ``host``, outside the kernel's ephemeral range
    when that range leaves room below it, else the kernel's choice."""
    start = _ephemeral_start()
    if start - _LOWEST >= 1_000:
        for _ in range(_TRIES):
            port = random.randrange(_LOWEST, start)
            if _binds(host, port):
                return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
