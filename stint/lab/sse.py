"""A small Server-Sent Events client over plain asyncio streams.

The API load case opens a thousand streams from one process; a general HTTP
client would spend more CPU per event than the API it measures. This one
speaks just what the API sends: one HTTP/1.1 GET, a chunked (or
close-delimited) ``text/event-stream`` body, events of ``id``, ``event``,
``data`` and ``retry`` lines, and ``:`` comments (keepalives). Each message
is stamped with the client's wall clock when its last line arrived, for
delivery latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType

from stint.errors import StintError

__all__ = ["SseError", "SseMessage", "SseStream", "http_status"]

_LIMIT = 2**20


class SseError(StintError):
    """The server answered with something other than a 200 event stream."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


@dataclass
class SseMessage:
    """One event, or a comment (``comment`` set, nothing else)."""

    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)
    comment: str | None = None
    received_at: float = 0.0

    @property
    def text(self) -> str:
        return "\n".join(self.data)


class SseStream:
    """``async with await SseStream.open(...) as s: while (m := await s.next()) is not None``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._chunked = False
        self._chunk_left = 0
        self._done = False
        self._buffer = b""

    @classmethod
    async def open(
        cls, host: str, port: int, path: str, headers: Mapping[str, str] | None = None
    ) -> SseStream:
        reader, writer = await asyncio.open_connection(host, port, limit=_LIMIT)
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        stream = cls(reader, writer)
        try:
            await stream._read_head()
        except BaseException:
            await stream.close()
            raise
        return stream

    async def __aenter__(self) -> SseStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()

    async def _read_head(self) -> None:
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
            length = int(headers.get("content-length", "0") or 0)
            body = await self._reader.readexactly(length) if length else b""
            raise SseError(status, body.decode("utf-8", "replace"))

    async def _more(self) -> bool:
        """Append body bytes to the buffer; False at the end of the body."""
        if self._done:
            return False
        if not self._chunked:
            data = await self._reader.read(65536)
            if not data:
                self._done = True
                return False
            self._buffer += data
            return True
        if self._chunk_left == 0:
            size_line = await self._reader.readuntil(b"\r\n")
            self._chunk_left = int(size_line.split(b";", 1)[0].strip(), 16)
            if self._chunk_left == 0:
                await self._reader.readuntil(b"\r\n")
                self._done = True
                return False
        data = await self._reader.read(self._chunk_left)
        if not data:
            self._done = True
            return False
        self._chunk_left -= len(data)
        if self._chunk_left == 0:
            await self._reader.readexactly(2)  # the chunk's CRLF
        self._buffer += data
        return True

    async def next(self) -> SseMessage | None:
        """The next event or comment; None when the server ended the stream."""
        while True:
            end = self._buffer.find(b"\n\n")
            if end >= 0:
                block, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
                message = _parse(block.decode("utf-8"))
                if message is not None:
                    message.received_at = time.time()
                    return message
                continue
            try:
                more = await self._more()
            except (asyncio.IncompleteReadError, ConnectionError):
                return None
            if not more:
                return None


def _parse(block: str) -> SseMessage | None:
    message = SseMessage()
    meaningful = False
    for line in block.split("\n"):
        if line.startswith(":"):
            message.comment = line[1:].strip()
            meaningful = True
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            message.id = value
        elif name == "event":
            message.event = value
        elif name == "data":
            message.data.append(value)
        else:
            continue  # retry and unknown fields carry no event
        meaningful = True
    return message if meaningful else None


async def http_status(host: str, port: int, path: str) -> int | None:
    """The status of a plain GET (a health probe), or None when nothing answers."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return None
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode("latin-1"))
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(b" ", 2)
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None
    except (OSError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
