"""The batch enqueue in the store: the plan and the item-by-item way give the same
answers, batches over the same sessions never deadlock, and a refusal writes nothing."""

from __future__ import annotations

import asyncio

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore, EnqueueItem
from stint.store.config import ROLE_CLI
from stint.store.errors import AdmissionRefused, InvalidInput, SessionLimitReached
from stint.store.pool import Pool, open_pool
from stint.store.vocabulary import AdmissionLimit
from tests.workers import count_rows, fetch, set_limits


async def test_batches_over_the_same_sessions_in_opposite_orders_both_commit(
    db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    sessions = [await client.sessions_create() for _ in range(6)]
    other = await open_pool(db.config, ROLE_CLI, min_size=1, max_size=1)
    try:
        second = ClientStore(db.config, other)
        forward = [EnqueueItem(f"f{i}", {"i": i}, s) for i, s in enumerate(sessions)]
        backward = [EnqueueItem(f"b{i}", {"i": i}, s) for i, s in enumerate(sessions[::-1])]
        for _ in range(5):
            await asyncio.gather(
                client.turns_enqueue_many(forward), second.turns_enqueue_many(backward)
            )
    finally:
        await other.close()
    rows = await fetch(pool, "SELECT session_id, array_agg(seq ORDER BY seq) FROM turns GROUP BY 1")
    assert {sid: list(seqs) for sid, seqs in rows} == {s: [1, 2] for s in sessions}


async def test_a_tenant_limit_is_counted_turn_by_turn_and_a_refusal_writes_nothing(
    db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    await set_limits(pool, db.config, {AdmissionLimit.MAX_QUEUED: 2}, tenant="acme")
    items = [EnqueueItem(f"k{i}", {"i": i}, tenant="acme") for i in range(3)]
    with pytest.raises(AdmissionRefused) as refused:
        await client.turns_enqueue_many(items)
    assert refused.value.context["item"] == 2
    assert await count_rows(pool, "turns") == 0
    assert await count_rows(pool, "sessions") == 0
    queued = await client.turns_enqueue_many(items[:2])
    assert [q.created for q in queued] == [True, True]


async def test_a_session_limit_holds_for_a_batch_and_for_one_enqueue(
    db: ScratchTarget, pool: Pool
) -> None:
    """New sessions of a tenant with ``max_sessions`` are counted one by one, as the
    single enqueue counts them: the plan's sessions are rolled back, not kept."""
    client = ClientStore(db.config, pool)
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSIONS: 2}, tenant="acme")
    items = [EnqueueItem(f"k{i}", {"i": i}, tenant="acme") for i in range(3)]
    with pytest.raises(SessionLimitReached) as refused:
        await client.turns_enqueue_many(items)
    assert refused.value.context["item"] == 2
    assert await count_rows(pool, "turns") == 0
    assert await count_rows(pool, "sessions") == 0
    assert len(await client.turns_enqueue_many(items[:2])) == 2
    with pytest.raises(SessionLimitReached):
        await client.turns_enqueue(
            session_id=None, idempotency_key="k9", turn_input={}, tenant="acme"
        )
    assert await count_rows(pool, "sessions") == 2


async def test_one_key_twice_in_a_batch_is_one_turn(db: ScratchTarget, pool: Pool) -> None:
    client = ClientStore(db.config, pool)
    sid = await client.sessions_create()
    same = EnqueueItem("k", {"a": 1}, sid)
    first, again = await client.turns_enqueue_many([same, same])
    assert (first.turn_id, first.created, again.created) == (again.turn_id, True, False)
    assert await count_rows(pool, "turns") == 1


@pytest.mark.parametrize("count", [0, 1001])
async def test_an_empty_or_oversized_batch_is_refused(
    db: ScratchTarget, pool: Pool, count: int
) -> None:
    items = [EnqueueItem(f"k{i}", {}) for i in range(count)]
    with pytest.raises(InvalidInput, match=r"a batch holds 1\.\.1000 turns"):
        await ClientStore(db.config, pool).turns_enqueue_many(items)


async def test_new_sessions_of_a_batch_each_get_their_own_first_turn_in_item_order(
    db: ScratchTarget, pool: Pool
) -> None:
    """The plan makes a batch's new sessions and their first turns with one statement
    each: every result names the session holding its own input, ready to claim."""
    client = ClientStore(db.config, pool)
    existing = await client.sessions_create()
    items = [
        EnqueueItem("a", {"i": 0}, tenant="acme", pin="gpu", timeout_seconds=5.0),
        EnqueueItem("b", {"i": 1}, existing),
        EnqueueItem("c", {"i": 2}, session_key="nightly", traceparent=_TRACE),
        EnqueueItem("d", {"i": 3}),
    ]
    queued = await client.turns_enqueue_many(items)
    assert [q.created for q in queued] == [True] * 4
    assert queued[1].session_id == existing
    assert len({q.session_id for q in queued}) == 4
    rows = await fetch(
        pool,
        "SELECT t.id, t.seq, t.input, t.timeout_seconds, t.traceparent, s.tenant, s.pin,"
        " s.creation_key, s.status, s.queued_turns, s.last_turn_seq"
        " FROM turns t JOIN sessions s ON s.id = t.session_id WHERE s.id = %s",
        queued[0].session_id,
    )
    assert rows == [(queued[0].turn_id, 1, {"i": 0}, 5.0, None, "acme", "gpu", None, "ready", 1, 1)]
    for q, item in zip(queued, items, strict=True):
        [(turn_id, seq, turn_input)] = await fetch(
            pool, "SELECT id, seq, input FROM turns WHERE session_id = %s", q.session_id
        )
        assert (turn_id, seq, turn_input) == (q.turn_id, q.seq, item.turn_input)
    [(key_session, traceparent)] = await fetch(
        pool,
        "SELECT s.id, t.traceparent FROM sessions s JOIN turns t ON t.session_id = s.id"
        " WHERE s.creation_key = 'nightly'",
    )
    assert (key_session, traceparent) == (queued[2].session_id, _TRACE)
    # A session key used before: the batch goes item by item, and finds that session.
    again = await client.turns_enqueue_many([items[2], EnqueueItem("e", {"i": 4})])
    assert (again[0].session_id, again[0].created) == (queued[2].session_id, False)
    assert again[1].created and await count_rows(pool, "sessions") == 5


_TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
