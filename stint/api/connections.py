"""Connection hygiene in the HTTP server itself, so ``stint api`` needs no proxy in front.

uvicorn's httptools protocol parses fast but bounds nothing a client sends
before its request reaches the app: a request head may grow without limit
(100 unfinished 8 MB heads held 624 MiB), a socket that sends nothing, or a
byte now and then, is never closed, and idle sockets can take every file
descriptor. ``guarded_protocol`` returns a subclass of it (uvicorn's ``http``
setting accepts a protocol class) that adds, per connection:

- a cap on the bytes of a request head: 431 and the connection closed;
- a deadline for a request head, from the connection's first byte (or its
  opening) to the end of its headers: 408 (or a silent close when nothing
  came at all);
- the idle keep-alive timeout between requests is uvicorn's own
  (``timeout_keep_alive``);
- a cap on open connections, below the process's file-descriptor limit: a
  new connection past it closes the oldest connection that has no request in
  progress (an idle or unfinished one), so sockets that hold a descriptor
  and do nothing cannot lock real clients out. A connection whose request is
  being worked on is never closed this way.

Why httptools and not h11 (which caps heads itself): the guard costs two
counters per read, and h11 parses in Python: measured in docs/security.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from stint.api.sse_response import ABORT_EXTENSION

__all__ = ["ConnectionLimits", "connection_cap", "guarded_protocol"]

log = logging.getLogger("stint.api")

# Descriptors kept back from the connection cap: the database pools, the LISTEN
# connection, log files, the listening socket, and a margin for accept().
_RESERVED_DESCRIPTORS = 64
_WRITE_HIGH_WATER = 16 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int
    header_seconds: float
    max_connections: int
    send_buffer_bytes: int = 0  # 0: the kernel's own sizing


def connection_cap(configured: int) -> int:
    """``configured``, or fewer when the process may not open that many descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft - _RESERVED_DESCRIPTORS))


def _refusal(status: int, reason: str, detail: str) -> bytes:
    body = json.dumps({"type": "about:blank", "title": reason, "status": status, "detail": detail})
    encoded = body.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(encoded)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + encoded


class _Registry:
    """Every open connection of one server, oldest first."""

    def __init__(self) -> None:
        self.open: OrderedDict[int, _GuardedProtocol] = OrderedDict()
        self.evicted = 0

    def evict_one_idle(self, newcomer: _GuardedProtocol) -> bool:
        for proto in self.open.values():
            if proto is not newcomer and proto.idle:
                self.evicted += 1
                proto.transport.abort()
                return True
        return False


class _GuardedProtocol(HttpToolsProtocol):
    limits: ConnectionLimits
    registry: _Registry

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False  # a request has begun and its headers have not ended
        self._began = False  # any request has begun on this connection
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        """No request of this connection is being worked on (none came yet, its
        head is still arriving, or the last one is answered)."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        # A response waits for its client once 16 KiB are queued in this process (not
        # uvloop's 64 KiB): what an unread connection holds outside the streams' budget.
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)  # type: ignore[attr-defined]
        if self.limits.send_buffer_bytes:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.limits.send_buffer_bytes)
        self.registry.open[id(self)] = self
        self._arm_head_timer()  # a socket that never sends a request is closed
        crowded = len(self.registry.open) > self.limits.max_connections
        if crowded and not self.registry.evict_one_idle(self):
            self._refuse(503, "Service Unavailable", "this API process has no room for more")

    def connection_lost(self, exc: Exception | None) -> None:
        self.registry.open.pop(id(self), None)
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head:
            return
        # Counted from the read in which the head began: at most one read more
        # than the head itself (a read is at most 256 KiB).
        self._head_bytes += len(data)
        if self._head_bytes > self.limits.max_header_bytes and not self.transport.is_closing():
            self._refuse(
                431,
                "Request Header Fields Too Large",
                f"the request head is over {self.limits.max_header_bytes} bytes, the limit",
            )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._began = True
        self._head_bytes = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm_head_timer()
        # A stream whose client stopped reading is cut with this (stint.api.sse_response).
        self.scope["extensions"] = {ABORT_EXTENSION: {"abort": self.transport.abort}}
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_seconds, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(
                408,
                "Request Timeout",
                f"the request head did not arrive within {self.limits.header_seconds:g} s",
            )
        elif not self._began:
            self.transport.close()  # nothing came at all: no answer is owed

    def _refuse(self, status: int, reason: str, detail: str) -> None:
        self.transport.write(_refusal(status, reason, detail))
        self.transport.close()


def guarded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """A protocol class for one server, sharing one registry of its connections."""
    registry = _Registry()

    class Guarded(_GuardedProtocol):
        pass

    Guarded.limits = limits
    Guarded.registry = registry
    return Guarded
