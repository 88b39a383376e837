"""Every method of the client, sync and async, against a real ``stint api`` and a
real worker running the turns; what the client says is checked against what
PostgreSQL holds."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import pytest

from stint.client import (
    ApiError,
    Conflict,
    EventKind,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    SessionStatus,
    TurnStatus,
    Unauthorized,
    Unreachable,
)
from stint.client.retry import RetryPolicy
from stint.errors import StintError
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from tests.api.conftest import ApiServer, Keys
from tests.client.conftest import Either, event_log, make_client, seqs_and_kinds
from tests.client.taps import Record, tap
from tests.polling import wait_until
from tests.workers import Cluster, count_rows, fetch, set_limits

pytestmark = pytest.mark.acceptance

SCRIPTED = [
    EventKind.TURN_STARTED,
    EventKind.TOOL_CALLED,
    EventKind.TOOL_RETURNED,
    EventKind.TURN_COMPLETED,
]


async def _turn_status(pool: Pool, turn_id: UUID) -> str:
    rows = await fetch(pool, "SELECT status FROM turns WHERE id = %s", turn_id)
    return str(rows[0][0])


async def test_a_turn_from_session_to_events_through_every_read(
    stint: Either, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    session = await stint.call("create_session")
    assert session.status is SessionStatus.IDLE and session.tenant == "a"
    assert (await stint.call("get_session", session.id)).id == session.id
    queued = await stint.call("enqueue", session.id, {"min_wait_ms": 0})
    assert (queued.created, queued.seq, queued.session_id) == (True, 1, session.id)

    events = await stint.follow(session.id)
    assert seqs_and_kinds(events) == await event_log(pool, session.id)
    assert [e.kind for e in events] == SCRIPTED and events[-1].ends_turn
    assert all(e.turn_id == queued.turn_id and e.session_id == session.id for e in events)

    turn = await stint.call("get_turn", session.id, queued.turn_id)
    assert (turn.status, turn.finished, turn.output["waited_ms"]) == (TurnStatus.SUCCEEDED, True, 0)
    assert turn.idempotency_key.startswith("stint-client-") and turn.attempts == 1
    turns = await stint.call("list_turns", session.id)
    assert ([t.id for t in turns.turns], turns.next_after_seq) == ([queued.turn_id], None)
    page = await stint.call("events", session.id, after=1, limit=2)
    assert ([e.seq for e in page.events], page.next_after) == ([2, 3], 3)
    assert page.events == events[1:3]
    status = await stint.call("status")
    assert status.tenant == "a" and status.sessions.get("idle") == 1
    assert status.live_workers == 1 and status.queued_turns == 0


async def test_sessions_list_newest_first_in_pages_and_by_status(
    stint: Either, api: ApiServer, keys: Keys
) -> None:
    made = [await stint.call("create_session", pin=f"pin-{i}") for i in range(3)]
    first = await stint.call("list_sessions", limit=2)
    assert [s.id for s in first.sessions] == [made[2].id, made[1].id]
    rest = await stint.call("list_sessions", limit=2, cursor=first.next_cursor)
    assert ([s.id for s in rest.sessions], rest.next_cursor) == ([made[0].id], None)
    idle = await stint.call("list_sessions", status=[SessionStatus.IDLE, "parked"])
    assert {s.id for s in idle.sessions} == {s.id for s in made}
    assert (await stint.call("list_sessions", status=["running"])).sessions == []
    assert [s.id for s in (await stint.call("list_sessions", pin="pin-1")).sessions] == [made[1].id]
    other = make_client(stint.kind, api.base_url, keys.b)
    try:
        assert (await Either(other).call("list_sessions")).sessions == []
    finally:
        await Either(other).close()


async def test_a_lost_enqueue_answer_is_retried_with_the_same_key_and_queues_one_turn(
    kind: str, api: ApiServer, keys: Keys, pool: Pool
) -> None:
    record = Record(lose=lambda r: r.method == "POST" and r.url.path.endswith("/turns"), losses=1)
    client = Either(make_client(kind, api.base_url, keys.a, transport=tap(kind, record)))
    try:
        session = await client.call("create_session")
        queued = await client.call("enqueue", session.id, {"n": 1})
        posts = record.to("POST", "/turns")
        assert len(posts) == 2, "the lost answer was not retried"
        sent = [p.headers["Idempotency-Key"] for p in posts]
        assert sent[0] == sent[1] and sent[0].startswith("stint-client-")
        # The first request queued the turn; the retry was answered with it (200).
        assert queued.created is False
        rows = await fetch(pool, "SELECT id, idempotency_key FROM turns")
        assert rows == [(queued.turn_id, sent[0])]
        # A key of the caller's own is sent as given, and retried as well.
        record.losses = 1
        again = await client.call("enqueue", session.id, {"n": 2}, idempotency_key="order-42")
        assert [p.headers["Idempotency-Key"] for p in record.to("POST", "/turns")[2:]] == [
            "order-42",
            "order-42",
        ]
        assert again.created is False and await count_rows(pool, "turns") == 2
    finally:
        await client.close()


async def test_a_lost_answer_to_an_unkeyed_write_is_not_retried(
    kind: str, api: ApiServer, keys: Keys, pool: Pool
) -> None:
    """Creating a session has no idempotency key: a retry after a lost answer could
    make a second session, so the caller gets Unreachable and decides."""
    record = Record(lose=lambda r: r.method == "POST", losses=1)
    client = Either(make_client(kind, api.base_url, keys.a, transport=tap(kind, record)))
    try:
        with pytest.raises(Unreachable) as lost:
            await client.call("create_session")
        assert lost.value.method == "POST" and "ReadError" in lost.value.reason
        assert len(record.to("POST", "/v1/sessions")) == 1
        assert await count_rows(pool, "sessions") == 1  # the one the lost answer made
    finally:
        await client.close()


async def test_refusals_are_typed_errors_carrying_the_problem(
    stint: Either, api: ApiServer, keys: Keys, pool: Pool
) -> None:
    session = await stint.call("create_session")
    await stint.call("enqueue", session.id, {"n": 1}, idempotency_key="k1")
    before = await count_rows(pool, "turns")

    async def refused(cls: type[ApiError], status: int, either: Either, name: str,
                      *args: Any, **kwargs: Any) -> ApiError:  # fmt: skip
        with pytest.raises(cls) as caught:
            await either.call(name, *args, **kwargs)
        error = caught.value
        assert isinstance(error, StintError) and error.status == status
        assert error.problem["status"] == status and error.problem["detail"] == error.detail
        assert error.title and error.detail and error.type == "about:blank"
        return error

    missing = uuid.uuid4()
    error = await refused(NotFound, 404, stint, "get_session", missing)
    assert str(missing) in error.detail and f"GET /v1/sessions/{missing}" in str(error)
    await refused(NotFound, 404, stint, "get_turn", session.id, uuid.uuid4())
    await refused(Conflict, 409, stint, "enqueue", session.id, {"n": 2}, idempotency_key="k1")
    await refused(InvalidRequest, 422, stint, "enqueue", session.id, {}, timeout_seconds=0.01)
    await refused(Conflict, 409, stint, "answer", session.id, "no-such-step", "yes")

    other = Either(make_client(stint.kind, api.base_url, keys.b))
    reader = Either(make_client(stint.kind, api.base_url, keys.a_read_only))
    bad_key = "stk_" + "x" * 40
    stranger = Either(make_client(stint.kind, api.base_url, bad_key))
    try:
        await refused(NotFound, 404, other, "enqueue", session.id, {"n": 3})
        await refused(Forbidden, 403, reader, "create_session")
        error = await refused(Unauthorized, 401, stranger, "status")
        for text in (str(error), repr(error), repr(stranger.client), str(error.problem)):
            assert bad_key not in text and keys.a not in text
    finally:
        for either in (other, reader, stranger):
            await either.close()
    assert await count_rows(pool, "turns") == before  # no refusal wrote anything


async def test_a_capacity_refusal_is_retried_after_its_retry_after_then_raised(
    kind: str, api: ApiServer, keys: Keys, pool: Pool, db: Any
) -> None:
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 1}, tenant="a")
    record = Record()
    retry = RetryPolicy(attempts=2, first=0.05, cap=0.1)
    client = Either(
        make_client(kind, api.base_url, keys.a, transport=tap(kind, record), retry=retry)
    )
    try:
        session = await client.call("create_session")
        await client.call("enqueue", session.id, {"n": 1})
        with pytest.raises(RateLimited) as refused:
            await client.call("enqueue", session.id, {"n": 2})
        assert refused.value.retry_after == 1.0 and refused.value.status == 429
        posts = record.to("POST", "/turns")
        assert len(posts) == 3  # the first turn, then the refused one twice
        assert posts[1].headers["Idempotency-Key"] == posts[2].headers["Idempotency-Key"]
        assert await count_rows(pool, "turns") == 1
    finally:
        await client.close()


async def _running(pool: Pool, turn_id: UUID) -> bool:
    return await _turn_status(pool, turn_id) == "running"


async def test_cancel_and_interrupt_end_turns_and_say_what_they_did(
    stint: Either, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    session = await stint.call("create_session")
    held = {"min_wait_ms": 0, "gate": "never"}
    first, second, third = [(await stint.call("enqueue", session.id, held)).turn_id for _ in "123"]
    await wait_until(lambda: _running(pool, first), what="the first turn runs")

    interrupted = await stint.call("interrupt", session.id, wait=True, wait_seconds=30)
    assert (interrupted.active_turn, interrupted.settled) == (first, True)
    assert interrupted.turn.status is TurnStatus.INTERRUPTED and interrupted.cancelled_queued == []
    await wait_until(lambda: _running(pool, second), what="the second turn runs")

    cancelled = await stint.call("cancel", session.id, reason="test", wait=True)
    assert (cancelled.active_turn, cancelled.settled) == (second, True)
    assert cancelled.cancelled_queued == [third]
    assert cancelled.turn.status is TurnStatus.CANCELLED and cancelled.turn.reason == "test"
    assert [await _turn_status(pool, t) for t in (first, second, third)] == [
        "interrupted",
        "cancelled",
        "cancelled",
    ]
    # A control naming its turn is replay-safe; the turn has ended: nothing to do.
    again = await stint.call("cancel", session.id, turn_id=second)
    assert again.active_turn is None and again.cancelled_queued == []


async def test_an_answer_resumes_a_parked_turn(stint: Either, cluster: Cluster, pool: Pool) -> None:
    cluster.start_worker(slots=1)
    session = await stint.call("create_session")
    queued = await stint.call("enqueue", session.id, {"min_wait_ms": 0, "ask": "proceed?"})
    asked = await stint.follow_until(
        session.id, lambda e: e.kind == EventKind.APPROVAL_REQUESTED, until=None
    )
    step_key = asked[-1].payload["step_key"]
    assert asked[-1].payload["question"] == "proceed?"
    answered = await stint.call("answer", session.id, step_key, {"go": True})
    assert (answered.turn_id, answered.resumed) == (queued.turn_id, True)
    # The same answer again is a retry: accepted, nothing written twice.
    assert (await stint.call("answer", session.id, step_key, {"go": True})).resumed
    rest = await stint.follow(session.id, after=asked[-1].seq, turn_id=queued.turn_id)
    assert seqs_and_kinds(asked + rest) == await event_log(pool, session.id)
    assert rest[-1].kind == EventKind.TURN_COMPLETED
    kinds = [str(e.kind) for e in rest]
    assert kinds.count("approval.answered") == 1
    turn = await stint.call("get_turn", session.id, queued.turn_id)
    assert turn.output["answer"] == {"go": True}


async def test_a_signal_is_delivered_once_per_key(
    stint: Either, api: ApiServer, keys: Keys
) -> None:
    session = await stint.call("create_session")
    sent = await stint.call("signal", session.id, "approved", {"by": "me"}, idempotency_key="s1")
    again = await stint.call("signal", session.id, "approved", {"by": "me"}, idempotency_key="s1")
    first, retry = sent.model_dump(), again.model_dump()
    assert (first.pop("created", True), retry.pop("created", False)) == (True, False)
    assert retry == first  # the retry is answered with the signal the first call recorded
    with pytest.raises(Conflict):
        await stint.call("signal", session.id, "approved", {"by": "else"}, idempotency_key="s1")
    other = Either(make_client(stint.kind, api.base_url, keys.b))
    try:
        with pytest.raises(NotFound):
            await other.call("signal", session.id, "approved", {"by": "them"})
    finally:
        await other.close()


async def test_a_signal_resumes_a_waiting_turn_and_children_are_listed(
    stint: Either, cluster: Cluster, pool: Pool
) -> None:
    cluster.start_worker(slots=1)
    session = await stint.call("create_session")
    spawn = {"count": 2, "input": {"min_wait_ms": 0}}
    queued = await stint.call(
        "enqueue", session.id, {"min_wait_ms": 0, "wait_for": "go", "spawn": spawn}
    )
    waiting = await stint.follow_until(
        session.id, lambda e: e.kind == EventKind.WAIT_STARTED, until=None
    )
    assert waiting[-1].payload["name"] == "go"
    sent = await stint.call("signal", session.id, "go", {"n": 1}, idempotency_key="go-1")
    rest = await stint.follow(session.id, after=waiting[-1].seq, turn_id=queued.turn_id)
    assert rest[-1].kind == EventKind.TURN_COMPLETED
    turn = await stint.call("get_turn", session.id, queued.turn_id)
    assert turn.output["signal"] == {"id": str(sent.signal_id), "payload": {"n": 1}}
    page = await stint.call("children", session.id)
    assert [c.status for c in page.children] == [TurnStatus.SUCCEEDED] * 2
    assert [str(c.id) for c in page.children] == [c["id"] for c in turn.output["children"]]
    child = await stint.call("get_session", page.children[0].id)
    assert (child.parent_id, child.depth) == (session.id, 1)
    assert (await stint.call("children", child.id)).children == []
