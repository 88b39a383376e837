"""Transports that pass every request to the real API and record it, and can lose
an answer: the request reaches the API and does its work, then the client sees
the connection break instead of the answer (as when a proxy or the network
drops it). What the client does next is then the client's retry rule at work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

Lose = Callable[[httpx.Request], bool]


@dataclass
class Record:
    """Requests seen, in order, and how many answers are still to be lost."""

    requests: list[httpx.Request] = field(default_factory=list)
    lose: Lose = lambda request: False
    losses: int = 0

    def seen(self, request: httpx.Request) -> bool:
        """Record ``request``; True when its answer is to be lost."""
        self.requests.append(request)
        if self.losses > 0 and self.lose(request):
            self.losses -= 1
            return True
        return False

    def to(self, method: str, suffix: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path.endswith(suffix)]


class Tap(httpx.HTTPTransport):
    def __init__(self, record: Record) -> None:
        super().__init__()
        self.record = record

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        lost = self.record.seen(request)
        response = super().handle_request(request)
        if lost:
            response.read()
            response.close()
            raise httpx.ReadError("the answer was lost on its way back", request=request)
        return response


class AsyncTap(httpx.AsyncHTTPTransport):
    def __init__(self, record: Record) -> None:
        super().__init__()
        self.record = record

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lost = self.record.seen(request)
        response = await super().handle_async_request(request)
        if lost:
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("the answer was lost on its way back", request=request)
        return response


def tap(kind: str, record: Record) -> httpx.BaseTransport | httpx.AsyncBaseTransport:
    return Tap(record) if kind == "sync" else AsyncTap(record)
