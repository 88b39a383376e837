"""At most ``STINT_API_MAX_REQUESTS`` requests worked on at once; 503 beyond.

Without a bound, a burst queues unlimited work behind the API's few database
connections and every client waits, then times out. Past the bound a request
is refused at once with a problem body and ``Retry-After``, before it
costs anything. A request holds its place until its response head is sent: an
event stream then leaves it (streams have their own bound,
``STINT_API_MAX_FOLLOWERS``), so streams that last hours never starve short
requests. Health probes are never refused here.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stint.api.problems import problem_response

__all__ = ["RequestLimit"]

_EXEMPT = frozenset({"/healthz", "/livez", "/readyz"})


class RequestLimit:
    """Pure ASGI, outermost but for the metrics, so a refusal is counted too."""

    def __init__(self, app: ASGIApp, *, max_requests: int, retry_after: int) -> None:
        self._app = app
        self._max = max_requests
        self._retry_after = retry_after
        self.in_progress = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in _EXEMPT:
            await self._app(scope, receive, send)
            return
        if self.in_progress >= self._max:
            refusal = problem_response(
                503,
                f"this API process is working on {self._max} requests, its limit",
                retry_after=self._retry_after,
            )
            await refusal(scope, receive, send)
            return
        self.in_progress += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.in_progress -= 1

        async def releasing(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            await send(message)

        try:
            await self._app(scope, receive, releasing)
        finally:
            release()
