"""A loopback HTTP/1.1 server whose every answer a test writes as raw bytes.

The lean transport (``stint.agents.http11``) is tested against real sockets
with answers no well-behaved framework would send on demand: bodies cut short,
interim ``100`` answers, connections closed before answering, heads that are
not HTTP. The server records each connection and each request it read (head and
de-chunked body), so a test asserts what reached the wire.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """What the server does with one request: write ``raw`` (None: write nothing
    and close at once), then close (``close``) or keep the connection, or write
    nothing and wait for the client to give up (``hang``)."""

    raw: bytes | None
    close: bool = False
    hang: bool = False


@dataclass(frozen=True)
class Seen:
    connection: int
    index: int  # the request's place on its connection, from 0
    head: bytes
    body: bytes


@dataclass
class RawServer:
    answer: Callable[[int, int], Answer]
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    url: str = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            for index in range(1000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                body = await _read_body(reader, head)
                self.seen.append(Seen(number, index, head, body))
                answer = self.answer(number, index)
                if answer.hang:
                    await reader.read()  # until the client closes
                    return
                if answer.raw is None:
                    return
                writer.write(answer.raw)
                await writer.drain()
                if answer.close:
                    return
        finally:
            writer.close()


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append((await reader.readexactly(size + 2))[:-2])
        await reader.readuntil(b"\r\n")
        return b"".join(parts)
    for line in lowered.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return await reader.readexactly(int(line.split(b":")[1]))
    return b""


@asynccontextmanager
async def raw_server(
    answer: Callable[[int, int], Answer], *, tls: ssl.SSLContext | None = None
) -> AsyncIterator[RawServer]:
    """A server on a free loopback port; ``url`` is its base (http or https)."""
    state = RawServer(answer)
    server = await asyncio.start_server(state._serve, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    state.url = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{port}"
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


def ok(body: bytes = b"{}", *, extra: bytes = b"") -> bytes:
    """A 200 answer framed by Content-Length."""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)
