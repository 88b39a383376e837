"""Acceptance: event streams whose clients stop reading (issue 22, finding 1).

Before: a stream that never read held its events in the API's memory until
its client closed (1,000 of them took the API to 1.6 GiB). Now a stream whose
client takes nothing within the drain deadline is closed, and so is one
stalled while another stream waits for room in the process's byte budget;
either way the client resumes by Last-Event-ID and misses nothing. Real API
and worker processes; the figures are in docs/security.md (the load case).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio

from stint.lab.hostile_case import seed_big_events
from stint.lab.sse import SseStream
from stint.postgres.scratch import ScratchTarget
from stint.telemetry.names import API_EVENT_STREAMS
from tests.api.conftest import ApiServer, Keys, bearer, start_api
from tests.polling import wait_until
from tests.scrape import scrape, value
from tests.workers import Cluster

# Four events of 200 KB, with the API's send buffers at 64 KiB: more than the
# kernel holds for a connection, so the API itself would have to hold the rest.
_TURNS = 2
_SMALL_BUFFER = "65536"  # STINT_API_SEND_BUFFER_BYTES


async def _open_non_reader(api: ApiServer, token: str, session_id: str) -> socket.socket:
    """A stream whose client reads nothing (a 4 KiB receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", api.port))
    sock.sendall(
        f"GET /v1/sessions/{session_id}/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    return sock


async def _streams_open(api: ApiServer) -> float | None:
    samples = await scrape(f"{api.base_url}/metrics")
    return None if samples is None else value(samples, API_EVENT_STREAMS)


def _complete_ids(received: bytes) -> list[int]:
    """The ids of the events that arrived whole (an SSE event ends with a blank line;
    the body is chunked, so chunk sizes sit between, never inside an ``id:`` line)."""
    ids = []
    for block in received.split(b"\n\n")[:-1]:
        for line in block.split(b"\n"):
            if line.startswith(b"id: "):
                ids.append(int(line[4:]))
    return ids


def _drain(sock: socket.socket) -> bytes:
    """Everything the socket still holds, now that the server closed it."""
    sock.settimeout(30)
    found = b""
    try:
        while chunk := sock.recv(1 << 20):
            found += chunk
    except ConnectionError:
        pass
    return found


async def _resume_to_the_end(
    api: ApiServer, token: str, session_id: str, after: int, last: int
) -> list[int]:
    """The ids a client that reads gets after ``after``, up to the session's ``last``."""
    headers = {**bearer(token), "Last-Event-ID": str(after)}
    path = f"/v1/sessions/{session_id}/events"
    seen: list[int] = []

    async def collect(stream: SseStream) -> None:
        while not seen or seen[-1] < last:
            message = await stream.next()
            assert message is not None, seen
            if message.id is not None:
                seen.append(int(message.id))

    async with await SseStream.open("127.0.0.1", api.port, path, headers) as stream:
        try:
            await asyncio.wait_for(collect(stream), timeout=120)
        except TimeoutError:
            raise AssertionError(f"only {seen} of 1..{last} came") from None
    return seen


@pytest_asyncio.fixture(loop_scope="session")
async def draining_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = await start_api(
        db,
        tmp_path / "api.log",
        STINT_API_METRICS_PUBLIC="true",
        STINT_API_SEND_BUFFER_BYTES=_SMALL_BUFFER,
        STINT_API_STREAM_DRAIN_SECONDS="1",
        STINT_API_STREAM_PAGE_BYTES="65536",
    )
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def tight_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = await start_api(
        db,
        tmp_path / "api.log",
        STINT_API_METRICS_PUBLIC="true",
        STINT_API_SEND_BUFFER_BYTES=_SMALL_BUFFER,
        STINT_API_STREAM_DRAIN_SECONDS="600",
        STINT_API_STREAM_PAGE_BYTES="65536",
        STINT_API_STREAM_BUDGET_BYTES="65536",
    )
    try:
        yield server
    finally:
        server.stop()


async def _seeded(api: ApiServer, keys: Keys, cluster: Cluster) -> tuple[str, int]:
    cluster.start_worker(slots=1)
    async with httpx.AsyncClient(base_url=api.base_url, headers=bearer(keys.a), timeout=60) as h:
        return await seed_big_events(h, _TURNS)


async def test_a_stream_whose_client_stops_reading_is_closed_and_resumes_whole(
    draining_api: ApiServer, keys: Keys, cluster: Cluster
) -> None:
    session_id, last = await _seeded(draining_api, keys, cluster)
    sock = await _open_non_reader(draining_api, keys.a, session_id)
    try:

        async def opened() -> bool:
            return await _streams_open(draining_api) == 1

        async def closed() -> bool:
            return await _streams_open(draining_api) == 0

        await wait_until(opened, what="the stream to be open")
        await wait_until(closed, what="the server to close the stream nobody reads")
        received = _drain(sock)
    finally:
        sock.close()
    ids = _complete_ids(received)
    assert ids == list(range(1, len(ids) + 1)) and len(ids) < last
    resumed = await _resume_to_the_end(
        draining_api, keys.a, session_id, ids[-1] if ids else 0, last
    )
    assert ids + resumed == list(range(1, last + 1))


async def test_a_stalled_stream_makes_room_for_one_that_reads(
    tight_api: ApiServer, keys: Keys, cluster: Cluster
) -> None:
    """The budget holds one page: a client that reads gets the whole log although a
    stalled stream held the budget (with a drain deadline of 10 minutes)."""
    session_id, last = await _seeded(tight_api, keys, cluster)
    stalled = await _open_non_reader(tight_api, keys.a, session_id)
    try:

        async def one_open() -> bool:
            return await _streams_open(tight_api) == 1

        await wait_until(one_open, what="the stalled stream to be open")
        reader = await _resume_to_the_end(tight_api, keys.a, session_id, 0, last)
        assert reader == list(range(1, last + 1))

        async def none_open() -> bool:
            return await _streams_open(tight_api) == 0

        await wait_until(none_open, what="the stalled stream closed to make room")
    finally:
        stalled.close()
