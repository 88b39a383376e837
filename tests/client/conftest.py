"""The client against a real ``stint api`` process (and real workers where turns
run), each test on its own database; keys of two tenants; a way to call the sync
and the async client alike, so each behaviour is checked through both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any
from uuid import UUID

import pytest
import pytest_asyncio

from stint.client import AsyncClient, Client, Event
from stint.client.retry import FollowPolicy, RetryPolicy
from stint.store.pool import Pool

# The fixtures "api" (a stint api process), "keyed_api" (one with a webhook key) and
# "keys" (of tenants a and b), as the API's own tests have them (imported here so
# pytest finds them for these tests).
from tests.api.conftest import ApiServer, Keys, api, keyed_api, keys  # noqa: F401
from tests.workers import fetch

# Short waits, so tests that make the client retry do not idle for seconds.
FAST_RETRY = RetryPolicy(attempts=4, first=0.05, cap=0.2)
FAST_FOLLOW = FollowPolicy(first=0.05, cap=0.5, give_up_after=120.0)


class Either:
    """One client, sync or async, called the same way: ``await c.call("get_turn", ...)``.
    The sync client's calls run in a thread, as a blocking program would make them."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client

    @property
    def kind(self) -> str:
        return "sync" if isinstance(self.client, Client) else "async"

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.client, name)
        if isinstance(self.client, Client):
            return await asyncio.to_thread(method, *args, **kwargs)
        return await method(*args, **kwargs)

    async def follow(self, session_id: UUID | str, **kwargs: Any) -> list[Event]:
        """Every event ``follow()`` delivers until it ends by itself."""
        if isinstance(self.client, Client):
            sync = self.client

            def read() -> list[Event]:
                with sync.follow(session_id, **kwargs) as events:
                    return list(events)

            return await asyncio.to_thread(read)
        async with self.client.follow(session_id, **kwargs) as follower:
            return [event async for event in follower]

    async def follow_until(
        self, session_id: UUID | str, stop: Callable[[Event], bool], **kwargs: Any
    ) -> list[Event]:
        """The events ``follow()`` delivers up to the first one ``stop`` accepts; then
        the follower is closed."""
        found: list[Event] = []
        if isinstance(self.client, Client):
            sync = self.client

            def read() -> list[Event]:
                with sync.follow(session_id, **kwargs) as events:
                    for event in events:
                        found.append(event)
                        if stop(event):
                            break
                return found

            return await asyncio.to_thread(read)
        async with self.client.follow(session_id, **kwargs) as follower:
            async for event in follower:
                found.append(event)
                if stop(event):
                    break
        return found

    async def close(self) -> None:
        if isinstance(self.client, Client):
            self.client.close()
        else:
            await self.client.aclose()


def make_client(kind: str, base_url: str, key: str, **kwargs: Any) -> Client | AsyncClient:
    kwargs.setdefault("retry", FAST_RETRY)
    kwargs.setdefault("follow", FAST_FOLLOW)
    if kind == "sync":
        return Client(base_url, key, **kwargs)
    return AsyncClient(base_url, key, **kwargs)


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest_asyncio.fixture(loop_scope="session")
async def stint(kind: str, api: ApiServer, keys: Keys) -> AsyncIterator[Either]:  # noqa: F811
    """Tenant a's writer key, through the sync or the async client."""
    either = Either(make_client(kind, api.base_url, keys.a))
    try:
        yield either
    finally:
        await either.close()


async def event_log(pool: Pool, session_id: UUID | str) -> list[tuple[int, str]]:
    """The session's events as PostgreSQL holds them: (seq, kind) in seq order."""
    rows = await fetch(
        pool, "SELECT seq, kind FROM events WHERE session_id = %s ORDER BY seq", session_id
    )
    return [(int(seq), str(kind)) for seq, kind in rows]


def seqs_and_kinds(events: list[Event]) -> list[tuple[int, str]]:
    return [(e.seq, str(e.kind)) for e in events]
