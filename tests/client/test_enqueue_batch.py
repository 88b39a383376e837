"""The batch enqueue through the client (sync and async) and a real ``stint api``:
all of the turns or none, each with its own key, under the same admission limits."""

from __future__ import annotations

import uuid

import pytest

from stint.client import BatchTurnCreate, BusyStrategy, Conflict, NotFound, RateLimited
from stint.store.pool import Pool
from tests.client.conftest import Either
from tests.workers import count_rows, fetch

pytestmark = pytest.mark.acceptance


async def test_a_batch_queues_every_turn_in_order_and_a_retry_queues_none(
    stint: Either, pool: Pool
) -> None:
    first = await stint.call("create_session")
    second = await stint.call("create_session")
    before = await count_rows(pool, "turns")
    turns = [
        BatchTurnCreate(session_id=first.id, input={"n": 1}, idempotency_key="k1"),
        BatchTurnCreate(session_id=second.id, input={"n": 2}, idempotency_key="k2"),
        BatchTurnCreate(session_id=first.id, input={"n": 3}, idempotency_key="k3"),
    ]
    queued = await stint.call("enqueue_batch", turns)
    assert [(t.session_id, t.seq, t.created) for t in queued.turns] == [
        (first.id, 1, True),
        (second.id, 1, True),
        (first.id, 2, True),
    ]
    rows = await fetch(
        pool,
        "SELECT input->>'n', idempotency_key FROM turns WHERE session_id IN (%s, %s) "
        "ORDER BY input->>'n'",
        first.id,
        second.id,
    )
    assert [tuple(r) for r in rows] == [("1", "k1"), ("2", "k2"), ("3", "k3")]
    again = await stint.call("enqueue_batch", turns)
    assert [t.turn_id for t in again.turns] == [t.turn_id for t in queued.turns]
    assert not any(t.created for t in again.turns)
    assert await count_rows(pool, "turns") == before + 3


async def _refused(stint: Either, turns: list[BatchTurnCreate], error: type[Exception]) -> str:
    with pytest.raises(error) as refused:
        await stint.call("enqueue_batch", turns)
    return str(refused.value)


async def test_one_refused_turn_writes_none_and_names_its_item(stint: Either, pool: Pool) -> None:
    session = await stint.call("create_session")
    await stint.call("enqueue", session.id, {"n": 0}, idempotency_key="taken")
    before = await count_rows(pool, "turns")
    clash = [
        BatchTurnCreate(session_id=session.id, input={"n": 1}),
        BatchTurnCreate(session_id=session.id, input={"n": 2}, idempotency_key="taken"),
    ]
    assert "item=1" in await _refused(stint, clash, Conflict)
    unknown = [
        BatchTurnCreate(session_id=session.id, input={"n": 1}),
        BatchTurnCreate(session_id=uuid.UUID(int=0), input={}),
    ]
    assert "item=1" in await _refused(stint, unknown, NotFound)
    busy = [
        BatchTurnCreate(session_id=session.id, input={"n": 1}),
        BatchTurnCreate(session_id=session.id, input={"n": 2}, busy=BusyStrategy.REJECT),
    ]
    assert "item=1" in await _refused(stint, busy, RateLimited)
    assert await count_rows(pool, "turns") == before
