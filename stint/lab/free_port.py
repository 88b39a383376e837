"""A free local TCP port for a process the load machinery starts (a worker's
health port, an API, a published container port).

The port is free when asked; the process that binds it next wins, which on a
machine running one load case at a time is the one we start.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
