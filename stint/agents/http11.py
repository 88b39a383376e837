"""A lean HTTP/1.1 transport for the model provider's client, on asyncio streams.

The provider client is the official SDK (``openai.AsyncOpenAI``) over httpx; only
the transport under httpx is ours. httpx's default transport (httpcore over
anyio) cost more worker CPU than the rest of an agents turn: its pool checks
every pooled connection's socket with ``poll()`` before each request and after
each response (32 slots, 32 connections: 16 checks a request), and each read
passes through anyio and h11. Here a connection is a pair of asyncio streams;
the event loop already watches every idle connection, so whether the server
closed it is a flag (``at_eof``), not a system call.

What it does, and no more: HTTP/1.1 with keep-alive (idle connections reused
last-in first-out, dropped after ``idle_seconds``), TLS with httpx's own
certificate store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), request bodies
of known or unknown length, responses framed by ``Content-Length``, chunked
transfer coding or the connection's close, interim ``1xx`` answers skipped.
Redirects, authentication, cookies and content decoding stay httpx's, above
the transport; a proxy is httpx's too (``stint.agents.provider`` uses this
transport only where no proxy applies). Failures are httpx's own exception
types (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``, ...) with
the request attached, so the SDK classifies them exactly as before: a timeout
is ``APITimeoutError``, anything else ``APIConnectionError``.

Nothing is retried here, as with httpcore: a pooled connection the server has
closed is seen before it is reused (the loop marks its end of stream), and one
that the server closes while the request is on its way fails the request (the
server may have read it), which the durable step retries inside the try's own
quota reservation. Retries are the step's alone, so a provider never sees more
requests than the quota gate admitted.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2

__all__ = ["Http11Transport"]

_MAX_HEAD = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NO_BODY_STATUS = frozenset({204, 304})
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Origin:
    scheme: str
    host: str
    port: int


@dataclass
class _Connection:
    """One open connection and when it was last handed back."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, now: float, idle_seconds: float) -> bool:
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and now - self.idle_since < idle_seconds
        )

    def close(self) -> None:
        self.writer.close()


class Http11Transport(httpx2.AsyncBaseTransport):
    """httpx's transport interface over asyncio streams (see the module docstring)."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        idle_seconds: float = 5.0,
        max_idle: int = 100,
    ) -> None:
        self._ssl = ssl_context
        self._idle_seconds = idle_seconds
        self._max_idle = max_idle
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        origin = self._origin(request)
        timeouts = request.extensions.get("timeout", {})
        head, body = await _encode(request)
        connection = self._take_idle(origin)
        if connection is None:
            connection = await self._connect(request, origin, timeouts.get("connect"))
        return await self._exchange(request, origin, connection, head, body, timeouts)

    async def aclose(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    def _origin(self, request: httpx2.Request) -> _Origin:
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            # The scheme alone: a URL may carry credentials, never repeated in an error.
            raise httpx2.UnsupportedProtocol(
                f"unsupported URL scheme {url.scheme!r} (http or https)", request=request
            )
        return _Origin(url.scheme, url.host, url.port or _DEFAULT_PORTS[url.scheme])

    def _take_idle(self, origin: _Origin) -> _Connection | None:
        connections = self._idle.get(origin)
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            if connection.usable(now, self._idle_seconds):
                return connection
            connection.close()
        return None

    @property
    def idle_connections(self) -> int:
        """How many connections wait in the pool (some may be closed by now)."""
        return sum(len(connections) for connections in self._idle.values())

    @property
    def reusable_connections(self) -> int:
        """How many pooled connections would be reused: open on both ends, not expired."""
        now = time.monotonic()
        return sum(
            c.usable(now, self._idle_seconds) for pooled in self._idle.values() for c in pooled
        )

    def _give_back(self, origin: _Origin, connection: _Connection) -> None:
        """Pool the connection; the pool's connections that the server closed or that
        idled too long are closed now (a few flag checks, no system call), so none
        lingers half-closed until the transport closes."""
        now = time.monotonic()
        pooled = self._idle.setdefault(origin, [])
        kept = []
        for pooled_connection in pooled:
            if pooled_connection.usable(now, self._idle_seconds):
                kept.append(pooled_connection)
            else:
                pooled_connection.close()
        if self._closed or len(kept) >= self._max_idle:
            connection.close()
        else:
            connection.idle_since = now
            kept.append(connection)
        self._idle[origin] = kept

    async def _connect(
        self, request: httpx2.Request, origin: _Origin, within: float | None
    ) -> _Connection:
        context: ssl.SSLContext | None = None
        if origin.scheme == "https":
            context = self._ssl = self._ssl or httpx2.create_ssl_context()
        try:
            async with asyncio.timeout(within):
                reader, writer = await asyncio.open_connection(
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                    limit=_MAX_HEAD,
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout(
                f"connecting to {origin.host}:{origin.port} timed out", request=request
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(
                f"cannot connect to {origin.host}:{origin.port}: {exc}", request=request
            ) from exc
        return _Connection(reader, writer)

    async def _exchange(
        self,
        request: httpx2.Request,
        origin: _Origin,
        connection: _Connection,
        head: bytes,
        body: bytes,
        timeouts: dict[str, float | None],
    ) -> httpx2.Response:
        """Send the request, read the answer's head; the body streams from the result."""
        try:
            await _send(request, connection, head, body, timeouts.get("write"))
            status, reason, headers, keep_alive = await _read_head(
                request, connection, timeouts.get("read")
            )
            framing = _framing(request, status, headers)
        except BaseException:
            connection.close()
            raise
        stream = _ResponseBody(
            self, request, origin, connection, framing, keep_alive, timeouts.get("read")
        )
        return httpx2.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )


async def _encode(request: httpx2.Request) -> tuple[bytes, bytes]:
    """The request's head and its whole body (a chat request is a few kilobytes)."""
    chunked = "transfer-encoding" in request.headers
    body = await request.aread()
    if chunked:
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), request.url.raw_path)]
    lines.extend(b"%s: %s" % (name, value) for name, value in request.headers.raw)
    return b"\r\n".join(lines) + b"\r\n\r\n", body


async def _send(
    request: httpx2.Request,
    connection: _Connection,
    head: bytes,
    body: bytes,
    within: float | None,
) -> None:
    try:
        async with asyncio.timeout(within):
            connection.writer.write(head + body)
            await connection.writer.drain()
    except TimeoutError:
        raise httpx2.WriteTimeout("sending the request timed out", request=request) from None
    except OSError as exc:
        raise httpx2.WriteError(f"sending the request failed: {exc}", request=request) from exc


async def _read_head(
    request: httpx2.Request, connection: _Connection, within: float | None
) -> tuple[int, bytes, list[tuple[bytes, bytes]], bool]:
    """Status, reason, headers and whether the connection may be reused (1xx skipped)."""
    first = True
    while True:
        try:
            async with asyncio.timeout(within):
                raw = await connection.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise httpx2.ReadTimeout(
                "waiting for the response timed out", request=request
            ) from None
        except asyncio.IncompleteReadError as exc:
            where = "without answering" if first and not exc.partial else "in the response head"
            raise httpx2.RemoteProtocolError(
                f"the server closed the connection {where}", request=request
            ) from None
        except asyncio.LimitOverrunError:
            raise httpx2.RemoteProtocolError(
                f"the response head is larger than {_MAX_HEAD} bytes", request=request
            ) from None
        except OSError as exc:
            raise httpx2.ReadError(str(exc), request=request) from exc
        first = False
        status, reason, version, headers = _parse_head(request, raw)
        if 100 <= status < 200 and status != 101:
            continue
        keep_alive = version == b"HTTP/1.1" and not _has_token(headers, b"connection", b"close")
        return status, reason, headers, keep_alive


def _parse_head(
    request: httpx2.Request, raw: bytes
) -> tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]:
    lines = raw[:-4].split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise httpx2.RemoteProtocolError(
            f"not an HTTP/1.x status line: {lines[0][:80]!r}", request=request
        )
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise httpx2.RemoteProtocolError(
                f"a malformed response header: {line[:80]!r}", request=request
            )
        headers.append((name, value.strip()))
    return int(code), reason, version, headers


def _has_token(headers: list[tuple[bytes, bytes]], name: bytes, token: bytes) -> bool:
    return any(
        key.lower() == name and token in (t.strip().lower() for t in value.split(b","))
        for key, value in headers
    )


def _framing(
    request: httpx2.Request, status: int, headers: list[tuple[bytes, bytes]]
) -> int | str | None:
    """The body's length, ``"chunked"``, ``None`` (until close) or 0 (no body)."""
    if request.method == "HEAD" or status in _NO_BODY_STATUS or status < 200:
        return 0
    codings = [v for k, v in headers if k.lower() == b"transfer-encoding"]
    if codings:
        if codings[-1].split(b",")[-1].strip().lower() == b"chunked":
            return "chunked"
        return None
    lengths = {v for k, v in headers if k.lower() == b"content-length"}
    if not lengths:
        return None
    if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
        raise httpx2.RemoteProtocolError(
            f"a bad Content-Length: {sorted(lengths)!r}", request=request
        )
    return int(lengths.pop())


class _ResponseBody(httpx2.AsyncByteStream):
    """The response body as it arrives; the connection goes back to the pool when the
    body was read to its end and may be reused, and is closed otherwise.

    Every iteration continues one reader of the body, as httpcore's stream does: the
    SDK reads a streamed answer up to its ``[DONE]`` event through ``aiter_bytes()``
    and then drains the rest (the chunked body's end) by iterating ``stream`` again.
    A fresh parser there would read mid-chunk, fail, and close the connection, so
    every model call would open a new one (and, over TLS, pay a handshake)."""

    def __init__(
        self,
        transport: Http11Transport,
        request: httpx2.Request,
        origin: _Origin,
        connection: _Connection,
        framing: int | str | None,
        keep_alive: bool,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._request = request
        self._origin = origin
        self._connection: _Connection | None = connection
        self._framing = framing
        self._reusable = keep_alive and framing is not None
        self._timeout = timeout
        self._complete = framing == 0
        self._pieces: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._pieces is None:
            self._pieces = self._body()
        return self._pieces

    async def _body(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None or self._complete:
            return
        reader = connection.reader
        try:
            if self._framing == "chunked":
                async for piece in self._chunks(reader):
                    yield piece
            elif isinstance(self._framing, int):
                left = self._framing
                while left:
                    piece = await self._read(reader.read(min(left, 65536)))
                    if not piece:
                        raise self._cut()
                    left -= len(piece)
                    yield piece
            else:
                while piece := await self._read(reader.read(65536)):
                    yield piece
        except BaseException:
            await self.aclose()
            raise
        self._complete = True
        await self.aclose()

    async def _chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        while True:
            line = await self._read(reader.readuntil(b"\r\n"))
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx2.RemoteProtocolError(
                    f"a malformed chunk size: {size_text[:20]!r}", request=self._request
                ) from None
            if size == 0:
                while await self._read(reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers: not used
                return
            while size:  # a large chunk arrives in pieces, never buffered whole
                piece = await self._read(reader.read(min(size, 65536)))
                if not piece:
                    raise self._cut()
                size -= len(piece)
                yield piece
            if await self._read(reader.readexactly(2)) != b"\r\n":
                raise httpx2.RemoteProtocolError("a chunk without its CRLF", request=self._request)

    async def _read(self, step: Awaitable[_T]) -> _T:
        try:
            async with asyncio.timeout(self._timeout):
                return await step
        except TimeoutError:
            raise httpx2.ReadTimeout(
                "reading the response timed out", request=self._request
            ) from None
        except asyncio.IncompleteReadError:
            raise self._cut() from None
        except asyncio.LimitOverrunError:
            raise httpx2.RemoteProtocolError(
                "a chunk line too long", request=self._request
            ) from None
        except OSError as exc:
            raise httpx2.ReadError(str(exc), request=self._request) from exc

    def _cut(self) -> httpx2.RemoteProtocolError:
        return httpx2.RemoteProtocolError(
            "the server closed the connection before the response body ended",
            request=self._request,
        )

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._reusable:
            self._transport._give_back(self._origin, connection)
        else:
            connection.close()
