"""The store's protocols against real PostgreSQL: enqueue, claim, fencing, events."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.errors import IdempotencyConflict, LeaseLost, QueueFull, UnknownSession
from stint.store.models import Claim, EnqueueResult, FinishResult, Work
from stint.store.pool import Pool, open_pool
from stint.store.vocabulary import AdmissionLimit, EventKind, StepKind, TurnStatus
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.polling import wait_until
from tests.workers import count_rows, set_limits


@pytest.fixture
def client(db: ScratchTarget, pool: Pool) -> ClientStore:
    return ClientStore(db.config, pool)


@pytest.fixture
def runtime(db: ScratchTarget, pool: Pool) -> SqlWorkerStore:
    return SqlWorkerStore(db.config, pool, concurrency=2)


async def test_idempotent_enqueue_race_yields_exactly_the_intended_turns(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 100})
    first = await client.turns_enqueue(session_id=None, idempotency_key="seed", turn_input={})

    async def producer(p: int) -> list[uuid.UUID]:
        ids = []
        for t in range(4):
            for _attempt in range(2):  # every call is retried once
                result = await client.turns_enqueue(
                    session_id=first.session_id,
                    idempotency_key=f"p{p}-t{t}",
                    turn_input={"p": p, "t": t},
                )
                ids.append(result.turn_id)
        return ids

    results = await asyncio.gather(*(producer(p) for p in range(12)))
    distinct = {turn_id for ids in results for turn_id in ids}
    assert len(distinct) == 48
    assert await count_rows(pool, "turns") == 49
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT array_agg(seq ORDER BY seq), max(queued_turns) "
            "FROM turns JOIN sessions s ON s.id = turns.session_id"
        )
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == list(range(1, 50))
    assert row[1] == 49


async def test_enqueue_refusals_write_nothing(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 2})
    first = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={"x": 1})
    await client.turns_enqueue(session_id=first.session_id, idempotency_key="b", turn_input={})
    before = (await count_rows(pool, "turns"), await count_rows(pool, "sessions"))
    with pytest.raises(
        QueueFull, match=r"queue full: max_session_queue limit of 2 unfinished turns reached"
    ):
        await client.turns_enqueue(session_id=first.session_id, idempotency_key="c", turn_input={})
    with pytest.raises(IdempotencyConflict):
        await client.turns_enqueue(
            session_id=first.session_id, idempotency_key="a", turn_input={"x": 2}
        )
    with pytest.raises(UnknownSession):
        await client.turns_enqueue(session_id=uuid.uuid4(), idempotency_key="z", turn_input={})
    assert (await count_rows(pool, "turns"), await count_rows(pool, "sessions")) == before
    same = await client.turns_enqueue(
        session_id=first.session_id, idempotency_key="a", turn_input={"x": 1}
    )
    assert (same.turn_id, same.created) == (first.turn_id, False)


async def test_claim_respects_limit_pins_and_order(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    plain = [
        (await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})).session_id
        for _ in range(3)
    ]
    pinned = (
        await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={}, pin="v2")
    ).session_id
    got = await runtime.turns_claim(owner="w1", pins=[], limit=2, lease_seconds=30)
    assert [w.claim.session_id for w in got] == plain[:2]
    assert all(w.claim.epoch == 1 and w.turn is not None for w in got)
    rest = await runtime.turns_claim(owner="w2", pins=[], limit=5, lease_seconds=30)
    assert [w.claim.session_id for w in rest] == plain[2:]
    v2 = await runtime.turns_claim(owner="w3", pins=["v2"], limit=5, lease_seconds=30)
    assert [w.claim.session_id for w in v2] == [pinned]


async def test_stale_owner_is_fenced_and_writes_nothing(
    pool: Pool, client: ClientStore, runtime: SqlWorkerStore
) -> None:
    queued = await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})
    old, turn = await claim_one(runtime, "a", lease_seconds=0.2)

    async def taken_over() -> list[Work]:
        return await runtime.turns_claim(owner="b", pins=[], limit=1, lease_seconds=30)

    [retry] = await wait_until(taken_over, what="lease expiry lets b claim", within=10)
    new = retry.claim
    assert (new.session_id, new.epoch) == (queued.session_id, old.epoch + 1)
    # b's claim started the turn again: a retry, attempt 2
    assert retry.turn is not None and (retry.turn.turn_id, retry.turn.attempts) == (turn.turn_id, 2)
    events_before = await count_rows(pool, "events")
    with pytest.raises(LeaseLost):
        await runtime.events_append(
            old, turn_id=turn.turn_id, events=[(EventKind.MESSAGE, {"x": 1})]
        )
    with pytest.raises(LeaseLost):
        await runtime.steps_start(
            old, turn_id=turn.turn_id, step_key="s", kind=StepKind.TOOL, digest="d"
        )
    with pytest.raises(LeaseLost):
        await runtime.turns_finish(
            old,
            turn_id=turn.turn_id,
            status=TurnStatus.SUCCEEDED,
            output={},
            error=None,
            events=[(EventKind.TURN_COMPLETED, {})],
            release=False,
        )
    with pytest.raises(LeaseLost):
        await runtime.sessions_release(old, turn_id=turn.turn_id)
    assert await runtime.leases_renew(owner="a", pid=1, claims=[old], lease_seconds=30) == {}
    assert await count_rows(pool, "events") == events_before
    assert await count_rows(pool, "steps") == 0


async def test_events_are_contiguous_under_concurrent_appends(
    pool: Pool, client: ClientStore, runtime: SqlWorkerStore
) -> None:
    await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})
    claim, turn = await claim_one(runtime, "a")
    await asyncio.gather(
        *(
            runtime.events_append(
                claim, turn_id=turn.turn_id, events=[(EventKind.MESSAGE, {"i": i})] * 3
            )
            for i in range(20)
        )
    )
    events = await client.events_after(session_id=claim.session_id, after=0)
    assert [e.seq for e in events] == list(range(1, 62))


async def test_release_requeues_the_running_turn_with_an_event(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    queued = await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})
    claim, turn = await claim_one(runtime, "a")
    assert await runtime.sessions_release(claim, turn_id=turn.turn_id, reason="drain")
    kinds = [e.kind for e in await client.events_after(session_id=queued.session_id, after=0)]
    assert kinds == ["turn.started", "turn.released"]
    [again] = await runtime.turns_claim(owner="b", pins=[], limit=1, lease_seconds=30)
    assert again.claim.session_id == queued.session_id


async def _kinds(client: ClientStore, session_id: uuid.UUID) -> list[str]:
    return [e.kind for e in await client.events_after(session_id=session_id, after=0)]


async def _finish(
    runtime: SqlWorkerStore, claim: Claim, turn_id: uuid.UUID, *, release: bool, claim_next: bool
) -> FinishResult:
    return await runtime.turns_finish(
        claim,
        turn_id=turn_id,
        status=TurnStatus.SUCCEEDED,
        output={"ok": True},
        error=None,
        events=[(EventKind.TURN_COMPLETED, {})],
        release=release,
        claim_next=claim_next,
        lease_seconds=30,
    )


async def test_finishing_starts_the_same_sessions_next_turn(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    first = await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    second = await client.turns_enqueue(
        session_id=first.session_id, idempotency_key="2", turn_input={"n": 2}
    )
    claim, turn = await claim_one(runtime, "a")
    done = await _finish(runtime, claim, turn.turn_id, release=False, claim_next=True)
    assert done.still_held and done.queued_turns == 1
    assert done.next is not None and done.next.claim == claim
    assert done.next.turn is not None and done.next.turn.turn_id == second.turn_id
    assert done.next.turn.input == {"n": 2}
    assert await _kinds(client, claim.session_id) == [
        "turn.started",
        "turn.completed",
        "turn.started",
    ]


async def test_finishing_and_yielding_claims_the_oldest_other_session(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    mine = await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    await client.turns_enqueue(session_id=mine.session_id, idempotency_key="2", turn_input={})
    other = await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    claim, turn = await claim_one(runtime, "a")
    assert claim.session_id == mine.session_id
    done = await _finish(runtime, claim, turn.turn_id, release=True, claim_next=True)
    assert not done.still_held and done.queued_turns == 1
    assert done.next is not None and done.next.claim.session_id == other.session_id
    assert done.next.turn is not None and done.next.turn.turn_id == other.turn_id
    assert await _kinds(client, other.session_id) == ["turn.started"]
    # the yielded session waits at the back of the line for the next claim
    [back] = await runtime.turns_claim(owner="b", pins=[], limit=5, lease_seconds=30)
    assert back.claim.session_id == mine.session_id


async def test_finishing_with_nothing_left_releases_the_session(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    claim, turn = await claim_one(runtime, "a")
    done = await _finish(runtime, claim, turn.turn_id, release=False, claim_next=True)
    assert (done.still_held, done.queued_turns, done.next) == (False, 0, None)
    assert await runtime.leases_renew(owner="a", pid=1, claims=[claim], lease_seconds=30) == {}


async def test_a_draining_finish_claims_nothing(
    client: ClientStore, runtime: SqlWorkerStore
) -> None:
    await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    waiting = await client.turns_enqueue(session_id=None, idempotency_key="1", turn_input={})
    claim, turn = await claim_one(runtime, "a")
    done = await _finish(runtime, claim, turn.turn_id, release=True, claim_next=False)
    assert done.next is None
    [later] = await runtime.turns_claim(owner="b", pins=[], limit=5, lease_seconds=30)
    assert later.claim.session_id == waiting.session_id


async def test_session_creation_race_with_one_key_yields_one_session_and_one_turn(
    db: ScratchTarget, pool: Pool
) -> None:
    """12 producers, each retrying once, all enqueue with the same key and no session
    (a producer retrying after a dropped connection): one session, one turn."""
    wide = await open_pool(db.config, ROLE_CLI, min_size=12, max_size=12)
    try:
        client = ClientStore(db.config, wide)

        async def producer() -> list[EnqueueResult]:
            return [
                await client.turns_enqueue(
                    session_id=None,
                    idempotency_key="order-7",
                    session_key="order-7",
                    tenant="acme",
                    turn_input={"order": 7},
                )
                for _attempt in range(2)
            ]

        results = [r for rs in await asyncio.gather(*(producer() for _ in range(12))) for r in rs]
    finally:
        await wide.close()
    assert len({(r.session_id, r.turn_id, r.seq) for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert (await count_rows(pool, "sessions"), await count_rows(pool, "turns")) == (1, 1)
    other = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None,
        idempotency_key="order-7",
        session_key="order-7",
        tenant="globex",
        turn_input={"order": 7},
    )
    assert other.created and other.session_id != results[0].session_id
