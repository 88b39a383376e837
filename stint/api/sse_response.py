"""The response that carries an event stream, and closes it when its client
stops taking what is sent.

Each chunk, and each ``DRAIN`` (an empty send: uvicorn waits until the
socket's buffer is below its high-water mark before it returns), must go
within ``STINT_API_STREAM_DRAIN_SECONDS``. A client that lets that pass has
its connection aborted: its unsent bytes are dropped at once, and the
follower's grant returns to the budget. Its last complete event had an
``id``, so it reconnects with ``Last-Event-ID`` and misses nothing. The
abort comes from ``stint.api.connections`` through the request's ASGI
extensions; under another server the stream just ends.

The client going away ends the stream too (the response listens for
``http.disconnect`` while it sends, as Starlette's own streams do).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from stint.api.budget import Holder
from stint.api.stream import Drain
from stint.store.errors import StoreError

__all__ = ["ABORT_EXTENSION", "EventStreamResponse"]

log = logging.getLogger("stint.api")

ABORT_EXTENSION = "stint.abort"


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        items: AsyncGenerator[bytes | Drain, None],
        *,
        holder: Holder,
        drain_seconds: float,
        headers: Mapping[str, str],
        what: str,
    ) -> None:
        self._items = items
        self._holder = holder
        self._drain_seconds = drain_seconds
        self._what = what
        self.status_code = 200
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        streaming = asyncio.create_task(self._stream(scope, send))
        listening = asyncio.create_task(self._until_disconnect(receive))
        try:
            await asyncio.wait({streaming, listening}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streaming, listening):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if streaming.done() and not streaming.cancelled():
            streaming.result()

    async def _until_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _stream(self, scope: Scope, send: Send) -> None:
        self._holder.task = asyncio.current_task()
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        try:
            async with contextlib.aclosing(self._items) as items:
                async for item in items:
                    chunk = b"" if isinstance(item, Drain) else item
                    if not await self._send_in_time(send, chunk):
                        log.info(
                            "%s closed: its client stopped taking what it was sent (it may resume)",
                            self._what,
                        )
                        await self._abort(scope, send)
                        return
        except StoreError as exc:
            # The response has started: end the stream; the client resumes by Last-Event-ID.
            log.warning("%s ended early: %s", self._what, exc)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_in_time(self, send: Send, chunk: bytes) -> bool:
        """False when the client did not take it within the drain deadline, or the
        budget closed this stream as stalled while others waited for room."""
        self._holder.stalled()  # until the send returns; at once, unless the socket is full
        try:
            async with asyncio.timeout(self._drain_seconds):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except TimeoutError:
            return False
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._holder.evicted and task is not None and task.uncancel() == 0:
                return False
            raise
        finally:
            self._holder.moving()
        return True

    async def _abort(self, scope: Scope, send: Send) -> None:
        abort = scope.get("extensions", {}).get(ABORT_EXTENSION, {}).get("abort")
        if callable(abort):
            abort()  # the server then marks the request disconnected: the send returns
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._drain_seconds):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
