"""A webhook receiver for tests and the lab: a real HTTP server on a loopback port, in
the caller's event loop, that behaves as a careful receiver does: it verifies each
signature, deduplicates by ``webhook-id``, and processes each delivery id once,
whatever the sender repeats. A script says how it answers each delivery's n-th
request (fail, be slow, succeed), so tests can make the sender retry."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stint.worker.signing import verify

__all__ = ["Received", "Receiver", "Script", "always_ok", "fail_twice_then_slow"]

# (delivery id, how many requests with that id came before this one) -> (status, delay s)
Script = Callable[[str, int], tuple[int, float]]


def always_ok(delivery_id: str, seen: int) -> tuple[int, float]:
    return 200, 0.0


@dataclass
class Received:
    delivery_id: str
    headers: dict[str, str]
    body: bytes
    signed: bool
    at: float

    @property
    def document(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """``requests``: every request; ``processed``: each delivery id once, in order."""

    secret: str = ""
    script: Script = always_ok
    requests: list[Received] = field(default_factory=list)
    processed: list[Received] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def processed_ids(self) -> Counter[str]:
        return Counter(r.delivery_id for r in self.processed)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            return  # the server is stopping (a slow answer was still sleeping)
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        delivery_id = headers.get("webhook-id", "")
        signed = verify(self.secret, headers, body, now=time.time()) if self.secret else False
        got = Received(delivery_id, headers, body, signed, time.monotonic())
        self.requests.append(got)
        seen = self.seen[delivery_id]
        self.seen[delivery_id] += 1
        status, delay = self.script(delivery_id, seen)
        answered = 200 <= status < 300 or delay  # a slow answer: processed, answered late
        if answered and signed and delivery_id not in {r.delivery_id for r in self.processed}:
            self.processed.append(got)
        if delay:
            await asyncio.sleep(delay)
        writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode())
        await writer.drain()
        return True


def fail_twice_then_slow(slow_seconds: float) -> Script:
    """The issue's receiver: the first two requests of each delivery fail (500), the
    third is processed but answered only after ``slow_seconds`` (longer than the
    sender waits), and later ones succeed."""

    def script(delivery_id: str, seen: int) -> tuple[int, float]:
        if seen < 2:
            return 500, 0.0
        if seen == 2:
            return 200, slow_seconds
        return 200, 0.0

    return script
