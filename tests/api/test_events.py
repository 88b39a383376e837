"""Acceptance: real workers and a real API process; sessions followed over SSE.

Every stream is read with the load test's SSE client; every expectation is
checked against the events PostgreSQL holds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stint.lab.sse import SseError, SseMessage, SseStream
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys, bearer, start_api
from tests.polling import wait_until
from tests.workers import Cluster, fetch

EVENTS_PER_TURN = 4  # turn.started, tool.called, tool.returned, turn.completed


async def _session(http: httpx.AsyncClient, keys: Keys) -> str:
    created = await http.post("/v1/sessions", json={}, headers=bearer(keys.a))
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    return session_id


async def _enqueue(
    http: httpx.AsyncClient, keys: Keys, session_id: str, turn_input: dict[str, Any]
) -> str:
    queued = await http.post(
        f"/v1/sessions/{session_id}/turns", json={"input": turn_input}, headers=bearer(keys.a)
    )
    assert queued.status_code == 201, queued.text
    turn_id: str = queued.json()["turn_id"]
    return turn_id


async def _open(
    api: ApiServer, token: str, session_id: str, query: str = "", last_event_id: int | None = None
) -> SseStream:
    headers = bearer(token)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    path = f"/v1/sessions/{session_id}/events{query}"
    return await SseStream.open("127.0.0.1", api.port, path, headers)


async def _events(stream: SseStream, count: int | None = None) -> list[SseMessage]:
    """Events (not comments) until the stream ends, or ``count`` of them."""
    found: list[SseMessage] = []
    while count is None or len(found) < count:
        message = await asyncio.wait_for(stream.next(), timeout=30)
        if message is None:
            break
        if message.comment is None:
            found.append(message)
    return found


async def _log(pool: Pool, session_id: str) -> list[tuple[int, str]]:
    rows = await fetch(
        pool, "SELECT seq, kind FROM events WHERE session_id = %s ORDER BY seq", session_id
    )
    return [(int(seq), str(kind)) for seq, kind in rows]


async def _turns_succeeded(pool: Pool, count: int) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
    return int(rows[0][0]) >= count


async def test_a_turn_streams_from_its_first_event_to_its_end(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = await _session(http, keys)
    async with await _open(api, keys.a, session_id, "?until=turn_end") as stream:
        cluster.start_worker(slots=1)
        turn_id = await _enqueue(http, keys, session_id, {"min_wait_ms": 0})
        got = await _events(stream)
    log = await _log(pool, session_id)
    assert [(int(m.id or 0), m.event) for m in got] == log
    assert log[-1][1] == "turn.completed" and len(log) == EVENTS_PER_TURN
    for message in got:
        data = json.loads(message.text)
        assert data["seq"] == int(message.id or 0) and data["session_id"] == session_id
        assert data["turn_id"] == turn_id and data["kind"] == message.event
    turn = await http.get(f"/v1/sessions/{session_id}/turns/{turn_id}", headers=bearer(keys.a))
    assert turn.json()["status"] == "succeeded" and turn.json()["output"]["waited_ms"] == 0


async def _long_session(
    http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster, turns: int
) -> str:
    session_id = await _session(http, keys)
    cluster.start_worker(slots=1)
    for _ in range(turns):
        await _enqueue(http, keys, session_id, {"min_wait_ms": 0})
    await wait_until(lambda: _turns_succeeded(pool, turns), what=f"{turns} turns done", within=120)
    return session_id


async def test_reconnecting_at_every_seq_resumes_exactly(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    turns = 10
    session_id = await _long_session(http, keys, pool, cluster, turns)
    log = await _log(pool, session_id)
    total = len(log)
    assert total == turns * EVENTS_PER_TURN
    for k in range(total):
        by_header = k % 2 == 0
        async with await _open(
            api,
            keys.a,
            session_id,
            "?until=turn_end" if by_header else f"?until=turn_end&after={k}",
            last_event_id=k if by_header else None,
        ) as stream:
            got = await _events(stream)
        # until=turn_end: from k+1 up to and including the next terminal event.
        end = next(i for i in range(k, total) if log[i][1] == "turn.completed")
        assert [(int(m.id or 0), m.event) for m in got] == log[k : end + 1], k
    # Last-Event-ID wins over ?after= (the browser's reconnection says where it is).
    async with await _open(api, keys.a, session_id, "?after=0", last_event_id=total - 1) as s:
        assert [int(m.id or 0) for m in await _events(s, 1)] == [total]
    # The JSON page form walks the same log.
    seen: list[int] = []
    after = 0
    while True:
        page = await http.get(
            f"/v1/sessions/{session_id}/events",
            params={"after": after, "limit": 7},
            headers={**bearer(keys.a), "Accept": "application/json"},
        )
        body = page.json()
        seen += [e["seq"] for e in body["events"]]
        if not body["events"]:
            assert body["next_after"] == after
            break
        after = body["next_after"]
    assert seen == list(range(1, total + 1))


async def test_any_reconnect_schedule_sees_every_event_once_in_order(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    """Property: disconnect after any number of events, resume with Last-Event-ID, again
    and again: the events received are exactly 1..N in order. The worker is still
    appending while the first schedules run, so resumes land on a growing log too."""
    turns = 30
    total = turns * EVENTS_PER_TURN
    session_id = await _session(http, keys)
    cluster.start_worker(slots=1)
    for _ in range(turns):
        await _enqueue(http, keys, session_id, {"min_wait_ms": 20})

    async def reconnecting(schedule: list[int]) -> None:
        received: list[int] = []
        step = 0
        while len(received) < total:
            take = schedule[step % len(schedule)]
            step += 1
            last = received[-1] if received else None
            async with await _open(api, keys.a, session_id, last_event_id=last) as stream:
                got = await _events(stream, min(take, total - len(received)))
            received += [int(m.id or 0) for m in got]
        assert received == list(range(1, total + 1)), schedule

    # Hypothesis drives synchronous functions: it runs in a thread, and each
    # example runs on this test's event loop (where the fixtures live).
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(schedule=st.lists(st.integers(min_value=1, max_value=25), min_size=1, max_size=40))
    def property_holds(schedule: list[int]) -> None:
        asyncio.run_coroutine_threadsafe(reconnecting(schedule), loop).result(timeout=120)

    await asyncio.to_thread(property_holds)
    assert [seq for seq, _ in await _log(pool, session_id)] == list(range(1, total + 1))


async def test_one_listen_connection_serves_every_follower(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    sessions = [await _session(http, keys) for _ in range(3)]
    streams = [
        await _open(api, keys.a, sid, "?until=turn_end") for sid in sessions for _ in range(10)
    ]
    try:
        connections = await fetch(
            pool,
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE application_name LIKE 'stint-api%%' GROUP BY 1 ORDER BY 1",
        )
        by_role = {name: int(n) for name, n in connections}
        assert by_role["stint-api-listen"] == 1, by_role
        assert sum(by_role.values()) <= 1 + 8 + 4, by_role  # LISTEN + the two pools at most
        cluster.start_worker(slots=3)
        for sid in sessions:
            await _enqueue(http, keys, sid, {"min_wait_ms": 0})
        results = await asyncio.gather(*(_events(s) for s in streams))
    finally:
        for stream in streams:
            await stream.close()
    for i, got in enumerate(results):
        expected = await _log(pool, sessions[i // 10])
        assert [(int(m.id or 0), m.event) for m in got] == expected


async def test_an_idle_stream_sends_keepalive_comments(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys
) -> None:
    session_id = await _session(http, keys)
    async with await _open(api, keys.a, session_id) as stream:
        message = await asyncio.wait_for(stream.next(), timeout=30)
        assert message is not None and message.comment == "keepalive"


async def test_the_hub_reconnects_and_followers_miss_nothing(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = await _session(http, keys)
    async with await _open(api, keys.a, session_id, "?until=turn_end") as stream:
        killed = await fetch(
            pool,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'stint-api-listen'",
        )
        assert killed == [(True,)]
        cluster.start_worker(slots=1)
        await _enqueue(http, keys, session_id, {"min_wait_ms": 0})
        got = await _events(stream)
    assert [(int(m.id or 0), m.event) for m in got] == await _log(pool, session_id)

    async def listening_again() -> bool:
        rows = await fetch(
            pool,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stint-api-listen'",
        )
        return int(rows[0][0]) == 1

    await wait_until(listening_again, what="the hub listens again")


async def test_sigterm_ends_open_streams_and_exits_0(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys
) -> None:
    session_id = await _session(http, keys)
    streams = [await _open(api, keys.a, session_id) for _ in range(5)]
    try:
        assert await asyncio.to_thread(api.stop) == 0
        for stream in streams:
            while (message := await asyncio.wait_for(stream.next(), timeout=30)) is not None:
                assert message.comment == "keepalive"
    finally:
        for stream in streams:
            await stream.close()
    assert "Traceback" not in api.log_text()


async def test_cancel_with_wait_answers_once_the_turn_has_ended(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = await _session(http, keys)
    cluster.start_worker(slots=1, lease_seconds=30)
    turn_id = await _enqueue(http, keys, session_id, {"min_wait_ms": 0, "gate": "never"})

    async def running() -> bool:
        return "tool.returned" in [kind for _, kind in await _log(pool, session_id)]

    await wait_until(running, what="the turn is running")
    done = await http.post(
        f"/v1/sessions/{session_id}/cancel",
        params={"wait": "true", "wait_seconds": 60},
        json={"reason": "user"},
        headers=bearer(keys.a),
    )
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["active_turn"] == turn_id and body["settled"] is True
    assert body["turn"]["status"] == "cancelled" and body["turn"]["reason"] == "user"
    assert (await _log(pool, session_id))[-1][1] == "turn.cancelled"


async def test_a_parked_question_is_answered_over_http(
    api: ApiServer, http: httpx.AsyncClient, keys: Keys, pool: Pool, cluster: Cluster
) -> None:
    session_id = await _session(http, keys)
    cluster.start_worker(slots=1)
    turn_id = await _enqueue(http, keys, session_id, {"min_wait_ms": 0, "ask": "ship it?"})
    async with await _open(api, keys.a, session_id) as stream:
        asked = None
        while asked is None:
            (message,) = await _events(stream, 1)
            if message.event == "approval.requested":
                asked = json.loads(message.text)["payload"]
    assert asked["question"] == "ship it?"
    answered = await http.post(
        f"/v1/sessions/{session_id}/answers",
        json={"step_key": asked["step_key"], "answer": {"ok": True}},
        headers=bearer(keys.a),
    )
    assert answered.status_code == 200 and answered.json()["turn_id"] == turn_id
    async with await _open(api, keys.a, session_id, "?until=turn_end&after=0") as stream:
        kinds = [m.event for m in await _events(stream)]
    assert "approval.answered" in kinds and kinds[-1] == "turn.completed"
    turn = (
        await http.get(f"/v1/sessions/{session_id}/turns/{turn_id}", headers=bearer(keys.a))
    ).json()
    assert turn["status"] == "succeeded" and turn["output"]["answer"] == {"ok": True}


async def test_readiness_needs_current_migrations(db: ScratchTarget, tmp_path: Path) -> None:
    fresh = await start_api(db, tmp_path / "api.log", STINT_SCHEMA="not_migrated")
    try:
        async with httpx.AsyncClient(base_url=fresh.base_url) as client:
            assert (await client.get("/healthz")).status_code == 200
            ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["database"] is True and ready.json()["pending_migrations"]
    finally:
        assert fresh.stop() == 0


async def test_readiness_says_ready(http: httpx.AsyncClient) -> None:
    ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True


async def test_followers_beyond_the_cap_are_told_to_retry(
    db: ScratchTarget, tmp_path: Path, keys: Keys
) -> None:
    capped = await start_api(db, tmp_path / "api.log", STINT_API_MAX_FOLLOWERS="2")
    try:
        async with httpx.AsyncClient(base_url=capped.base_url) as client:
            session_id = await _session(client, keys)
        streams = [await _open(capped, keys.a, session_id) for _ in range(2)]
        try:
            for stream in streams:  # both are being served before the third asks
                assert await asyncio.wait_for(stream.next(), timeout=30) is not None
            try:
                await _open(capped, keys.a, session_id)
            except SseError as refused:
                assert refused.status == 503 and "follows as many" in refused.body
            else:
                raise AssertionError("a third follower was served")
        finally:
            for stream in streams:
                await stream.close()
    finally:
        assert capped.stop() == 0
