"""Acceptance: resuming an event stream at the edges of the log (issue 22, finding 6).

Retention removes the head of a session's log; a resume from a seq it removed
is told so (a ``pruned`` event first; ``pruned_through`` on a JSON page),
never moved on silently. A resume from beyond the last event is refused with
409. Real workers, a real API process, real retention statements.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from uuid import UUID

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stint.lab.sse import SseError, SseMessage, SseStream
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.retention import Keyset, RetentionStore
from tests.api.conftest import ApiServer, Keys, bearer
from tests.polling import wait_until
from tests.workers import Cluster, fetch

EVENTS_PER_TURN = 4


async def _done_session(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, turns: int
) -> tuple[str, datetime]:
    """A session of ``turns`` finished turns, and a moment before the first ended."""
    created = await http.post("/v1/sessions", json={}, headers=bearer(keys.a))
    session_id: str = created.json()["id"]
    for _ in range(turns):
        queued = await http.post(
            f"/v1/sessions/{session_id}/turns",
            json={"input": {"min_wait_ms": 0}},
            headers=bearer(keys.a),
        )
        assert queued.status_code == 201, queued.text

    async def finished() -> list[tuple[datetime]] | None:
        rows = await fetch(
            pool,
            "SELECT min(finished_at) FROM turns WHERE session_id = %s "
            "HAVING count(*) FILTER (WHERE status = 'succeeded') = %s",
            session_id,
            turns,
        )
        return [(row[0],) for row in rows] or None

    rows = await wait_until(finished, what=f"{turns} turns done", within=120)
    first_end = rows[0][0]
    assert isinstance(first_end, datetime)
    return session_id, first_end


async def _pruned_through(pool: Pool, session_id: str) -> int:
    rows = await fetch(pool, "SELECT events_pruned_through FROM sessions WHERE id = %s", session_id)
    return int(rows[0][0])


class _Pruner:
    """Retention's own statement, one finished turn at a time, oldest first."""

    def __init__(self, db: ScratchTarget, pool: Pool, since: datetime) -> None:
        self._store = RetentionStore(db.config, pool)
        # Just before the session's first finished turn: the keyset walks from there.
        self._after = Keyset(since - timedelta(microseconds=1), UUID(int=0))

    async def one_turn(self) -> None:
        done = await self._store.prune_events(horizon_seconds=0, batch=1, after=self._after)
        if done.until is not None and done.until_id is not None:
            self._after = Keyset(done.until, done.until_id)


async def _messages(stream: SseStream, count: int) -> list[SseMessage]:
    """The next ``count`` events (keepalive comments skipped); a stream that sends
    fewer fails the test after a minute, whatever keepalives keep coming."""
    found: list[SseMessage] = []

    async def collect() -> None:
        while len(found) < count:
            message = await stream.next()
            assert message is not None, found
            if message.comment is None:
                found.append(message)

    try:
        await asyncio.wait_for(collect(), timeout=60)
    except TimeoutError:
        raise AssertionError(f"{len(found)} of {count} events came: {found}") from None
    return found


async def _open(api: ApiServer, keys: Keys, session_id: str, last: int) -> SseStream:
    headers = {**bearer(keys.a), "Last-Event-ID": str(last)}
    return await SseStream.open("127.0.0.1", api.port, f"/v1/sessions/{session_id}/events", headers)


async def test_a_resume_from_a_pruned_seq_is_told_what_is_gone(
    api: ApiServer,
    http: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    cluster: Cluster,
    db: ScratchTarget,
) -> None:
    """Before: after retention pruned 1-4, Last-Event-ID: 2 resumed silently at 5."""
    cluster.start_worker(slots=1)
    session_id, since = await _done_session(http, keys, pool, 2)
    await _Pruner(db, pool, since).one_turn()
    assert await _pruned_through(pool, session_id) == EVENTS_PER_TURN
    async with await _open(api, keys, session_id, 2) as stream:
        got = await _messages(stream, 1 + EVENTS_PER_TURN)
    notice = got[0]
    assert (notice.event, notice.id) == ("pruned", None)
    assert json.loads(notice.text) == {"after": 2, "pruned_through": 4, "next_seq": 5}
    assert [int(m.id or 0) for m in got[1:]] == [5, 6, 7, 8]
    page = await http.get(
        f"/v1/sessions/{session_id}/events",
        params={"after": 2, "format": "json"},
        headers=bearer(keys.a),
    )
    body = page.json()
    assert body["pruned_through"] == 4 and [e["seq"] for e in body["events"]] == [5, 6, 7, 8]
    whole = await http.get(
        f"/v1/sessions/{session_id}/events",
        params={"after": 4, "format": "json"},
        headers=bearer(keys.a),
    )
    assert whole.json()["pruned_through"] is None  # nothing after 4 is missing


async def test_a_resume_from_beyond_the_end_is_refused(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    """Before: 200, then nothing, never ending even with until=turn_end."""
    cluster.start_worker(slots=1)
    session_id, _ = await _done_session(http, keys, pool, 1)
    headers = {**bearer(keys.a), "Last-Event-ID": str(EVENTS_PER_TURN + 1)}
    path = f"/v1/sessions/{session_id}/events?until=turn_end"
    try:
        async with await SseStream.open("127.0.0.1", api.port, path, headers):
            raise AssertionError("a stream was opened beyond the end of the log")
    except SseError as exc:
        assert exc.status == 409
        assert f"last event is {EVENTS_PER_TURN}" in str(exc)
    page = await http.get(
        f"/v1/sessions/{session_id}/events",
        params={"after": EVENTS_PER_TURN + 1, "format": "json"},
        headers=bearer(keys.a),
    )
    assert page.status_code == 409, page.text
    at_end = await http.get(
        f"/v1/sessions/{session_id}/events",
        params={"after": EVENTS_PER_TURN, "format": "json"},
        headers=bearer(keys.a),
    )
    assert at_end.status_code == 200 and at_end.json()["events"] == []


async def test_reconnecting_at_every_seq_with_pruning_in_between_misses_nothing_silently(
    api: ApiServer,
    http: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    cluster: Cluster,
    db: ScratchTarget,
) -> None:
    """Property: for a session of 4 finished turns, reconnect at every seq 0..16 in
    order, pruning whole turns in between as hypothesis chooses. Each resume gets
    exactly the events after it, or (when retention removed some) a ``pruned``
    notice naming the cut and then exactly the events after the cut."""
    turns = 4
    total = turns * EVENTS_PER_TURN
    cluster.start_worker(slots=1)
    loop = asyncio.get_running_loop()

    async def one_schedule(prune_before: list[bool]) -> None:
        session_id, since = await _done_session(http, keys, pool, turns)
        pruner = _Pruner(db, pool, since)
        for k in range(total):
            if prune_before[k]:
                await pruner.one_turn()
            cut = await _pruned_through(pool, session_id)
            start = max(k, cut)
            expected = list(range(start + 1, total + 1))
            told = k < cut
            async with await _open(api, keys, session_id, k) as stream:
                got = await _messages(stream, len(expected) + told) if expected or told else []
            if told:
                assert got[0].event == "pruned", (k, cut)
                assert json.loads(got[0].text)["pruned_through"] == cut
                got = got[1:]
            assert [int(m.id or 0) for m in got] == expected, (k, cut)
            assert all(m.event != "pruned" for m in got)

    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(prune_before=st.lists(st.booleans(), min_size=total, max_size=total))
    def property_holds(prune_before: list[bool]) -> None:
        asyncio.run_coroutine_threadsafe(one_schedule(prune_before), loop).result(timeout=300)

    await asyncio.to_thread(property_holds)


async def test_stint_tail_follows_the_same_rules(
    api: ApiServer,
    http: httpx.AsyncClient,
    keys: Keys,
    pool: Pool,
    cluster: Cluster,
    db: ScratchTarget,
) -> None:
    """``stint tail --after`` from a pruned seq says what is gone on stderr (stdout
    stays events); from beyond the end it exits 2. Before: silent, and exit 0."""
    cluster.start_worker(slots=1)
    session_id, since = await _done_session(http, keys, pool, 2)
    await _Pruner(db, pool, since).one_turn()
    told = await asyncio.to_thread(cluster.stint, "tail", session_id, "--after", "2")
    assert told.returncode == 0, told.stderr
    assert [json.loads(line)["seq"] for line in told.stdout.splitlines()] == [5, 6, 7, 8]
    assert told.stderr.strip() == (
        "stint tail: events 3..4 were removed by retention; continuing at 5"
    )
    whole = await asyncio.to_thread(cluster.stint, "tail", session_id, "--after", "4")
    assert whole.returncode == 0 and whole.stderr == ""
    beyond = await asyncio.to_thread(cluster.stint, "tail", session_id, "--after", "9")
    assert beyond.returncode == 2 and beyond.stdout == ""
    assert "beyond the session's last event 8" in beyond.stderr
