"""The load an outage test keeps going through the outage, and what each part saw.

- ``feed``: turns enqueued through the store, round-robin over the sessions, one
  at a time (each retried with its idempotency key until acknowledged).
- ``ApiTraffic``: authenticated GETs of sessions at a steady rate, each stamped
  with the wall clock when it was sent and how it was answered.
- ``EventFollower``: one SSE stream of a session through the API; a stream that
  ends is opened again with ``Last-Event-ID`` (and counted: it did not survive).
- ``HealthWatch``: every worker's ``/livez`` and ``/readyz``, sampled steadily.

Wall-clock stamps (``time.time()``) are compared with the database's clock: the
test's PostgreSQL runs on this machine, so both read the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import httpx

from stint.lab.sse import SseError, SseStream, http_status
from tests.api.conftest import ApiServer, bearer, free_port
from tests.faults.private import Producer, StintOn
from tests.polling import wait_until
from tests.workers import WorkerProc

_HOST = "127.0.0.1"
_REOPEN_S = 0.2  # between attempts to open a stream again
_SAMPLE_S = 0.1  # between two health samples of one endpoint


class Background:
    """Tasks running beside the test; ``stop()`` cancels them and awaits their end."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(coro))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        failures = [r for r in results if isinstance(r, BaseException)]
        failures = [r for r in failures if not isinstance(r, asyncio.CancelledError)]
        if failures:
            raise failures[0]


async def feed(producer: Producer, sessions: Sequence[UUID], stop: asyncio.Event) -> None:
    """One turn after another on the sessions in turn, until ``stop`` is set."""
    i = 0
    while not stop.is_set():
        await producer.enqueue(f"feed-{i}", sessions[i % len(sessions)])
        i += 1
        await asyncio.sleep(0.02)  # paces the producer; nothing waits on it


@dataclass(frozen=True)
class Answer:
    sent: float  # wall clock when the request went out
    answered: float  # and when its answer (or error) came
    status: int | None  # None: no HTTP answer (connection error, timeout)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class ApiTraffic:
    """GET /v1/sessions/{id} at ``rate`` per second, cycling over ``sessions``,
    whatever the earlier requests are still waiting for."""

    base_url: str
    token: str
    sessions: Sequence[UUID]
    rate: float = 20.0
    timeout: float = 30.0
    answers: list[Answer] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
        async with httpx.AsyncClient(
            base_url=self.base_url,
            headers=bearer(self.token),
            timeout=self.timeout,
            limits=limits,
        ) as http:
            pending: set[asyncio.Task[None]] = set()
            loop = asyncio.get_running_loop()
            due = loop.time()
            i = 0
            while not self._stop.is_set():
                path = f"/v1/sessions/{self.sessions[i % len(self.sessions)]}"
                task = asyncio.create_task(self._one(http, path))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
                due += 1 / self.rate
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), max(0.0, due - loop.time()))
            if pending:
                await asyncio.wait(pending)  # every request sent gets its answer

    async def _one(self, http: httpx.AsyncClient, path: str) -> None:
        sent = time.time()
        try:
            response = await http.get(path)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.answers.append(Answer(sent, time.time(), None, error))
        else:
            answer = Answer(sent, time.time(), response.status_code, response.text[:200])
            self.answers.append(answer)

    def stop(self) -> None:
        self._stop.set()

    def failed(self, since: float, until: float = float("inf")) -> list[Answer]:
        """Failed requests sent from ``since`` until (before) ``until``."""
        return [a for a in self.answers if since <= a.sent < until and not a.ok]

    async def answered_since(self, moment: float, count: int) -> bool:
        """At least ``count`` requests sent from ``moment`` on have their answer."""
        return sum(1 for a in self.answers if a.sent >= moment) >= count

    def failed_before(self, moment: float) -> list[Answer]:
        """Failed requests answered before ``moment``."""
        return [a for a in self.answers if a.answered < moment and not a.ok]


@dataclass
class EventFollower:
    """One session's SSE stream, resumed with Last-Event-ID whenever it ends."""

    session_id: UUID
    seqs: list[int] = field(default_factory=list)
    opened: int = 0  # streams opened (1 when the first one survived everything)
    ended: int = 0  # streams the server ended while we followed
    refused: int = 0  # attempts to open a stream again that were refused

    @property
    def survived(self) -> bool:
        return self.opened == 1 and self.ended == 0

    async def run(self, port: int, token: str) -> None:
        path = f"/v1/sessions/{self.session_id}/events"
        while True:
            headers = bearer(token)
            if self.seqs:
                headers["Last-Event-ID"] = str(self.seqs[-1])
            try:
                stream = await SseStream.open(_HOST, port, path, headers)
            except (SseError, OSError, asyncio.IncompleteReadError):
                self.refused += 1
                await asyncio.sleep(_REOPEN_S)
                continue
            self.opened += 1
            async with stream:
                while (message := await stream.next()) is not None:
                    if message.comment is None:
                        self.seqs.append(int(message.id or 0))
            self.ended += 1


@dataclass(frozen=True)
class Sample:
    at: float  # wall clock when the answer came
    port: int
    path: str
    status: int | None  # None: nothing answered


@dataclass
class HealthWatch:
    """``/livez`` and ``/readyz`` of every worker's health port, every 100 ms."""

    ports: Sequence[int]
    samples: list[Sample] = field(default_factory=list)

    async def run(self) -> None:
        await asyncio.gather(
            *(self._watch(port, path) for port in self.ports for path in ("/livez", "/readyz"))
        )

    async def _watch(self, port: int, path: str) -> None:
        while True:
            status = await http_status(_HOST, port, path)
            self.samples.append(Sample(time.time(), port, path, status))
            await asyncio.sleep(_SAMPLE_S)

    def not_live(self, since: float) -> list[Sample]:
        """``/livez`` answers other than 200 from ``since`` on."""
        return [s for s in self.samples if s.path == "/livez" and s.at >= since and s.status != 200]

    def ready_since(self, since: float) -> dict[int, float]:
        """Per port, when ``/readyz`` first answered 200 at or after ``since``."""
        first: dict[int, float] = {}
        for s in self.samples:
            if s.path == "/readyz" and s.status == 200 and s.at >= since:
                first.setdefault(s.port, s.at)
        return first

    async def all_ready_since(self, since: float) -> bool:
        return len(self.ready_since(since)) == len(self.ports)


async def every_stream_delivered(followers: Sequence[EventFollower]) -> bool:
    return all(f.seqs for f in followers)


async def create_key(p: StintOn, tenant: str) -> str:
    """A key through the CLI, as an operator makes one."""
    done = await asyncio.to_thread(p.workers.stint, "keys", "create", "--tenant", tenant)
    assert done.returncode == 0, done.stderr
    token: str = json.loads(done.stdout)["token"]
    return token


@dataclass
class UnderLoad:
    """The load of an outage or failover test, running: 2 workers x 4 slots with their
    health watched, the producer feeding turns, API traffic and one stream a session."""

    workers: list[WorkerProc]
    health: HealthWatch
    followers: list[EventFollower]
    traffic: ApiTraffic
    feeding: asyncio.Task[None]
    requests: asyncio.Task[None]
    feed_stop: asyncio.Event

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    async def stop_feeding(self) -> None:
        self.feed_stop.set()
        await asyncio.wait_for(self.feeding, timeout=60)

    async def stop_traffic(self) -> None:
        self.traffic.stop()
        await asyncio.wait_for(self.requests, timeout=60)


@contextlib.asynccontextmanager
async def under_load(
    p: StintOn, api: ApiServer, producer: Producer, sessions: Sequence[UUID], token: str
) -> AsyncIterator[UnderLoad]:
    """Start the load and wait until both workers are ready and every stream delivers;
    afterwards stop whatever still runs."""
    ports = [free_port(), free_port()]
    workers = [p.workers.start_worker(slots=4, health_port=port) for port in ports]
    health = HealthWatch(ports)
    followers = [EventFollower(sid) for sid in sessions]
    traffic = ApiTraffic(api.base_url, token, sessions)
    watchers = Background()
    watchers.start(health.run())
    for follower in followers:
        watchers.start(follower.run(api.port, token))
    feed_stop = asyncio.Event()
    load = UnderLoad(
        workers,
        health,
        followers,
        traffic,
        asyncio.create_task(feed(producer, sessions, feed_stop)),
        asyncio.create_task(traffic.run()),
        feed_stop,
    )
    try:
        await wait_until(lambda: health.all_ready_since(0.0), what="both workers ready")
        await wait_until(
            lambda: every_stream_delivered(followers), what="every stream is under way"
        )
        yield load
    finally:
        feed_stop.set()
        traffic.stop()
        await asyncio.gather(load.feeding, load.requests, return_exceptions=True)
        await watchers.stop()
