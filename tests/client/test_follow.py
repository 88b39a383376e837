"""``follow()`` against real processes: a ``stint api`` killed (SIGKILL, and once
stopped by SIGTERM) in the middle of a stream and started again on the same port
while a real worker goes on appending; an API that is full (503 with
Retry-After); a log whose start was pruned. Every time, what the caller received
is compared with the log PostgreSQL holds: each event exactly once, in order,
nothing skipped."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from stint.client import (
    AsyncClient,
    AsyncFollower,
    Client,
    Event,
    EventKind,
    EventsPruned,
    Follower,
)
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys, bearer, start_api
from tests.client.conftest import Either, event_log, make_client, seqs_and_kinds
from tests.polling import wait_until
from tests.workers import Cluster

pytestmark = pytest.mark.acceptance

EVENTS_PER_TURN = 4


class Background:
    """``follow()`` consumed in the background (a thread for the sync client, a task
    for the async one), each event appended to ``received`` as it arrives."""

    def __init__(self, client: Client | AsyncClient, session_id: Any, **kwargs: Any) -> None:
        self.received: list[Event] = []
        self.follower: Follower | AsyncFollower = client.follow(session_id, **kwargs)
        self.done: asyncio.Future[None] = self._start()

    @property
    def reconnects(self) -> int:
        """How many times the follower had to connect again, so far."""
        return self.follower.reconnects

    def _start(self) -> asyncio.Future[None]:
        follower = self.follower
        if isinstance(follower, Follower):
            loop = asyncio.get_running_loop()
            finished: asyncio.Future[None] = loop.create_future()

            def read() -> None:
                try:
                    with follower:
                        for event in follower:
                            self.received.append(event)
                    loop.call_soon_threadsafe(finished.set_result, None)
                except BaseException as exc:  # handed to the test, which raises it
                    loop.call_soon_threadsafe(finished.set_exception, exc)

            threading.Thread(target=read, daemon=True).start()
            return finished

        async def read_async() -> None:
            async with follower:
                async for event in follower:
                    self.received.append(event)

        return asyncio.ensure_future(read_async())

    async def has(self, count: int) -> bool:
        return len(self.received) >= count


async def _logged(pool: Pool, session_id: Any, count: int) -> bool:
    return len(await event_log(pool, session_id)) >= count


async def test_follow_delivers_every_event_once_across_the_api_killed_and_restarted(
    kind: str,
    api: ApiServer,
    keys: Keys,
    db: ScratchTarget,
    cluster: Cluster,
    pool: Pool,
    tmp_path: Path,
) -> None:
    cluster.start_worker(slots=1)
    client = Either(make_client(kind, api.base_url, keys.a))
    servers = [api]

    async def restart() -> None:
        servers.append(await start_api(db, tmp_path / "api.log", port=api.port))

    def kill(signum: int = signal.SIGKILL) -> None:
        servers[-1].proc.send_signal(signum)
        assert servers[-1].proc.wait(timeout=30) == (0 if signum == signal.SIGTERM else -signum)

    try:
        session = await client.call("create_session")
        # Turns 1-2 run through; turn 3 waits at gate "mid" after its tool; turns 4-8 run
        # through; turn 9 waits at gate "last". The gates make the kill points certain.
        for n in range(1, 9):
            turn_input: dict[str, Any] = {"min_wait_ms": 20}
            if n == 3:
                turn_input["gate"] = "mid"
            await client.call("enqueue", session.id, turn_input)
        last = await client.call("enqueue", session.id, {"min_wait_ms": 0, "gate": "last"})
        at_mid = 2 * EVENTS_PER_TURN + 3
        at_last = 8 * EVENTS_PER_TURN + 3
        follower = Background(client.client, session.id, turn_id=last.turn_id)

        # Kill 1: while events flow (the worker is running turns 1-3).
        await wait_until(lambda: follower.has(3), what="the follower has 3 events")
        kill()
        killed_at = len(follower.received)
        await wait_until(lambda: _logged(pool, session.id, at_mid), what="turn 3 at its gate")
        await restart()
        await wait_until(lambda: follower.has(at_mid), what="the follower caught up (mid)")

        # Stop 2, by SIGTERM: the API ends its streams at once (a clean end, not the
        # turn's); turns 3-8 run while it is down.
        kill(signal.SIGTERM)
        cluster.open_gate("mid")
        await wait_until(lambda: _logged(pool, session.id, at_last), what="turn 9 at its gate")
        await restart()
        await wait_until(lambda: follower.has(at_last), what="the follower caught up (last)")

        # Kill 3: idle at gate "last"; the awaited turn ends while the API is down.
        kill()
        cluster.open_gate("last")
        await wait_until(lambda: _logged(pool, session.id, at_last + 1), what="the turn's end")
        await restart()
        await asyncio.wait_for(follower.done, timeout=60)
    finally:
        for server in servers[1:]:
            server.proc.kill()
            server.proc.wait()
        await client.close()

    log = await event_log(pool, session.id)
    assert [seq for seq, _ in log] == list(range(1, at_last + 2))
    assert seqs_and_kinds(follower.received) == log  # each once, in order, none skipped
    assert follower.received[-1].turn_id == last.turn_id
    assert follower.received[-1].kind == EventKind.TURN_COMPLETED
    assert 3 <= killed_at <= at_mid and follower.reconnects >= 3


async def test_follow_waits_out_a_full_api_by_its_retry_after(
    kind: str, db: ScratchTarget, keys: Keys, cluster: Cluster, pool: Pool, tmp_path: Path
) -> None:
    full = await start_api(db, tmp_path / "api.log", STINT_API_MAX_FOLLOWERS="1")
    client = Either(make_client(kind, full.base_url, keys.a))
    try:
        session = await client.call("create_session")
        async with (
            httpx.AsyncClient(base_url=full.base_url, timeout=30) as http,
            http.stream("GET", f"/v1/sessions/{session.id}/events", headers=bearer(keys.a)),
        ):
            follower = Background(client.client, session.id)

            async def refused() -> bool:
                return follower.reconnects >= 1 or follower.done.done()

            await wait_until(refused, what="the follower was refused (503)")
        # The other stream is closed: the follower gets in after the Retry-After.
        cluster.start_worker(slots=1)
        await client.call("enqueue", session.id, {"min_wait_ms": 0})
        await asyncio.wait_for(follower.done, timeout=60)
    finally:
        await client.close()
        full.proc.kill()
        full.proc.wait()
    assert seqs_and_kinds(follower.received) == await event_log(pool, session.id)
    assert len(follower.received) == EVENTS_PER_TURN and follower.reconnects >= 1


async def test_follow_refuses_to_skip_events_pruned_by_retention(
    stint: Either, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    session = await stint.call("create_session")
    first = await stint.call("enqueue", session.id, {"min_wait_ms": 0})
    assert len(await stint.follow(session.id, turn_id=first.turn_id)) == EVENTS_PER_TURN
    pruned = cluster.stint(
        "prune", STINT_RETAIN_TURNS_DAYS="0.0000001", STINT_RETAIN_EVENTS_DAYS="0.0000001"
    )
    assert pruned.returncode == 0, pruned.stderr
    assert await event_log(pool, session.id) == []
    second = await stint.call("enqueue", session.id, {"min_wait_ms": 0})
    with pytest.raises(EventsPruned) as gap:
        await stint.follow(session.id, after=1, turn_id=second.turn_id)
    assert (gap.value.after, gap.value.first_available) == (1, EVENTS_PER_TURN + 1)
    # Following on from the log's start, knowingly: the rest, once each.
    rest = await stint.follow(session.id, after=EVENTS_PER_TURN, turn_id=second.turn_id)
    assert seqs_and_kinds(rest) == await event_log(pool, session.id)
    assert [e.seq for e in rest] == list(range(5, 9))
