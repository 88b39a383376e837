"""A TCP proxy that puts network faults between workers and PostgreSQL.

Why: Stint promises that a worker cut off from its database fences itself,
that client-side deadlines end every wait on a silent server, that a reset
connection is reopened and that a refused one is retried with backoff. None of
that can be shown by killing processes or restarting the server; it needs a
network that misbehaves on demand while both ends stay up. The fault tests and
the soak test point a worker's ``STINT_DATABASE_URL`` at this proxy and switch
its mode while turns run. It runs inside the caller's event loop (no thread,
no subprocess) and knows nothing about the PostgreSQL protocol: it moves bytes.

Modes (``set_mode``), each applying at once to every connection:

``pass``
    Forward everything unchanged.
``delay``
    Forward each chunk after ``delay_ms`` ± ``jitter_ms`` (uniform, never
    below zero); order is kept in each direction, so a short delay waits
    behind a long one just as on a slow link.
``blackhole``
    Accept and read, forward nothing in either direction, not even a close:
    existing connections go silent and new ones are accepted but never reach
    PostgreSQL. The bytes dropped cannot be replayed, so connections that went
    silent are aborted (RST) when the mode changes again, as a healed partition
    would find them broken; new connections after that pass normally.
``reset``
    Abort every current connection with an RST (``SO_LINGER`` 0) on both sides,
    then pass new connections.
``refuse``
    Close each new connection at once (with an RST, as a refused connection
    reads to a client); existing connections keep passing.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct

__all__ = ["MODES", "FaultProxy"]

MODES = ("pass", "delay", "blackhole", "reset", "refuse")
"""The modes :meth:`FaultProxy.set_mode` accepts."""

_CHUNK = 64 * 1024
_QUEUED_CHUNKS = 256  # per direction; a reader beyond this waits (backpressure)
_LINGER_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST

_Queued = tuple[float, bytes] | None


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close a connection with an RST, dropping anything not yet sent."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    writer.transport.abort()


class _Link:
    """One proxied connection: the client's end and, once connected, PostgreSQL's."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.severed = False  # bytes were dropped: this stream can never resume
        self.aborted = False

    def _ends(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]

    def abort(self) -> None:
        """RST both ends."""
        self.aborted = True
        for writer in self._ends():
            _abort(writer)

    def close(self) -> None:
        """Close both ends in order (FIN after what is already written)."""
        for writer in self._ends():
            if not writer.transport.is_closing():
                writer.close()


class FaultProxy:
    """Forwards ``listen_host``:<free port> to ``target_host``:``target_port``.

    ``await start()`` binds and returns the port; ``set_mode`` switches faults at
    any time from the same event loop; ``await stop()`` closes everything.
    """

    def __init__(
        self, target_host: str, target_port: int, *, listen_host: str = "127.0.0.1"
    ) -> None:
        self._target_host = target_host
        self._target_port = target_port
        self._listen_host = listen_host
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._mode = "pass"
        self._delay_s = 0.0
        self._jitter_s = 0.0
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._work: set[asyncio.Task[None]] = set()
        self._stopping = False

    # -- public API ------------------------------------------------------------

    async def start(self) -> int:
        """Bind a free port on ``listen_host`` and start accepting; returns the port."""
        if self._server is not None:
            raise RuntimeError("FaultProxy already started")
        self._stopping = False
        self._server = await asyncio.start_server(self._handle, self._listen_host, 0)
        port: int = self._server.sockets[0].getsockname()[1]
        self._port = port
        return port

    @property
    def port(self) -> int:
        """The port clients connect to (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("FaultProxy not started")
        return self._port

    @property
    def mode(self) -> str:
        """The mode set last."""
        return self._mode

    @property
    def connections(self) -> int:
        """Client connections currently open through the proxy (silent ones included)."""
        return len(self._links)

    def set_mode(self, mode: str, *, delay_ms: float = 0, jitter_ms: float = 0) -> None:
        """Switch to ``mode`` now (see the module docstring for what each does)."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}; known: {', '.join(MODES)}")
        if delay_ms < 0 or jitter_ms < 0:
            raise ValueError("delay_ms and jitter_ms must not be negative")
        previous = self._mode
        self._mode = mode
        self._delay_s = delay_ms / 1000 if mode == "delay" else 0.0
        self._jitter_s = jitter_ms / 1000 if mode == "delay" else 0.0
        if mode == "reset":
            for link in list(self._links):
                link.abort()
        elif previous == "blackhole" and mode != "blackhole":
            for link in list(self._links):
                if link.severed:
                    link.abort()

    async def stop(self) -> None:
        """Stop listening, abort every connection and wait for the proxy's tasks."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for link in list(self._links):
            link.abort()
        work = list(self._work)
        for task in work:
            task.cancel()
        await asyncio.gather(*work, return_exceptions=True)
        if self._handlers:
            await asyncio.wait(list(self._handlers))
        if server is not None:
            await server.wait_closed()

    # -- connections -------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The server's own task only waits: the work runs in a task of ours, so
        # stop() can cancel it without cancelling a task asyncio's stream
        # machinery inspects (Python 3.11 logs an error for a cancelled one).
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        link = _Link(writer)
        self._links.add(link)
        work = asyncio.create_task(self._run_link(link, reader))
        self._work.add(work)
        try:
            await asyncio.wait([work])
        finally:
            self._work.discard(work)
            self._handlers.discard(handler)

    async def _run_link(self, link: _Link, reader: asyncio.StreamReader) -> None:
        try:
            await self._serve(link, reader)
        finally:
            if link.severed or link.aborted:
                link.abort()
            else:
                link.close()
            self._links.discard(link)

    async def _serve(self, link: _Link, reader: asyncio.StreamReader) -> None:
        if self._stopping or self._mode == "refuse":
            link.abort()
            return
        if self._mode == "blackhole":
            link.severed = True
            await _swallow(reader)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(
                self._target_host, self._target_port
            )
        except OSError:
            link.abort()  # PostgreSQL refused: so does the proxy
            return
        link.upstream = up_writer
        if link.aborted or self._stopping:
            link.abort()
            return
        await asyncio.gather(
            self._pump(link, reader, up_writer),
            self._pump(link, up_reader, link.client),
        )

    def _chunk_delay(self) -> float:
        if self._delay_s == 0 and self._jitter_s == 0:
            return 0.0
        return max(0.0, self._delay_s + random.uniform(-self._jitter_s, self._jitter_s))

    def _silenced(self, link: _Link) -> bool:
        """True when this link must stay silent (and marks it so for good)."""
        if self._mode == "blackhole":
            link.severed = True
        return link.severed

    async def _pump(
        self, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        """Read from ``src`` and hand chunks, stamped with their due time, to a
        delivery task writing ``dst`` in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Queued] = asyncio.Queue(maxsize=_QUEUED_CHUNKS)
        deliver = asyncio.create_task(self._deliver(link, queue, dst))
        try:
            while True:
                try:
                    data = await src.read(_CHUNK)
                except OSError:
                    if not self._silenced(link):
                        link.abort()  # the peer reset: pass the reset on
                    return
                if self._silenced(link):
                    if not data:
                        return  # not even the close goes through
                    continue
                if not data:
                    await queue.put(None)
                    await deliver  # flush what is queued, then close both ends
                    if not self._silenced(link):
                        link.close()
                    return
                await queue.put((loop.time() + self._chunk_delay(), data))
        except BaseException:
            link.abort()  # cancelled by stop(), or a bug: never leave the other side hanging
            raise
        finally:
            if not deliver.done():
                deliver.cancel()
            await asyncio.gather(deliver, return_exceptions=True)

    async def _deliver(
        self, link: _Link, queue: asyncio.Queue[_Queued], dst: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None:
                return
            due, data = item
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if self._silenced(link) or link.aborted or dst.transport.is_closing():
                continue  # keep taking chunks so that the reader never blocks
            try:
                dst.write(data)
                await dst.drain()
            except (OSError, RuntimeError):  # uvloop raises RuntimeError once closed
                link.abort()


async def _swallow(reader: asyncio.StreamReader) -> None:
    """Read and drop everything until the connection ends."""
    with contextlib.suppress(OSError):
        while await reader.read(_CHUNK):
            pass
