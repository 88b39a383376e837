"""``ctx.spawn_many``: N children in one fenced statement, against real PostgreSQL.

A replay finds the same N children (never more), a replay that finds some of
them spawns only the others, a changed request is caught, and a batch past a
limit is refused whole with nothing written. The kill -9 after the statement
is in tests/acceptance/test_children.py."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.admission import DEFAULT_ROW, AdmissionStore
from stint.store.client import ClientStore
from stint.store.errors import ChildRefused
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from stint.store.worker_store import SqlWorkerStore
from stint.worker.context import Child, NondeterministicReplay
from tests.integration.claims import claim_one, replay_context
from tests.workers import event_kinds, fetch


async def _parent(db: ScratchTarget, pool: Pool) -> tuple[SqlWorkerStore, Claim, TurnStart]:
    await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="p", turn_input={}
    )
    runtime = SqlWorkerStore(db.config, pool, concurrency=2)
    claim, turn = await claim_one(runtime, "w")
    return runtime, claim, turn


async def _written(pool: Pool, parent: UUID) -> dict[str, Any]:
    """Everything a spawn writes, as seen from the database."""
    links = await fetch(
        pool,
        "SELECT c.step_key, c.child_id, t.input FROM children c "
        "JOIN turns t ON t.id = c.child_turn_id WHERE c.parent_id = %s ORDER BY c.step_key",
        parent,
    )
    steps = await fetch(
        pool,
        "SELECT step_key, result FROM steps WHERE session_id = %s AND kind = 'spawn' "
        "ORDER BY step_key",
        parent,
    )
    sessions = await fetch(
        pool, "SELECT count(*) FROM sessions WHERE parent_id = %s AND depth = 1", parent
    )
    seqs = await fetch(pool, "SELECT seq FROM events WHERE session_id = %s ORDER BY seq", parent)
    return {
        "links": [(key, child, turn_input) for key, child, turn_input in links],
        "steps": [(key, UUID(result["child_id"])) for key, result in steps],
        "sessions": sessions[0][0],
        "started": (await event_kinds(pool, parent)).count("child.started"),
        "seqs": [s for (s,) in seqs],
    }


async def test_one_statement_spawns_n_children_and_a_replay_finds_the_same_ones(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _parent(db, pool)
    inputs = [{"part": i} for i in range(3)]
    first = await (await replay_context(runtime, claim, turn)).spawn_many(inputs)
    written = await _written(pool, claim.session_id)
    keys = ["spawn:0", "spawn:1", "spawn:2"]
    assert written["links"] == [(k, c.id, i) for k, c, i in zip(keys, first, inputs, strict=True)]
    assert written["steps"] == [(k, c.id) for k, c in zip(keys, first, strict=True)]
    assert written["sessions"] == 3 and written["started"] == 3
    assert written["seqs"] == list(range(1, len(written["seqs"]) + 1))  # contiguous

    # A replay (the steps read back from the database) returns the same children, writing nothing.
    again = await (await replay_context(runtime, claim, turn)).spawn_many(inputs)
    assert again == first
    assert await _written(pool, claim.session_id) == written

    # A replay that finds only some of them recorded spawns the others, in one statement.
    more = await (await replay_context(runtime, claim, turn)).spawn_many([*inputs, {"part": 3}])
    assert more[:3] == first and len(more) == 4
    grown = await _written(pool, claim.session_id)
    assert [key for key, _ in grown["steps"]] == [*keys, "spawn:3"]
    assert grown["sessions"] == 4 and grown["started"] == 4


async def test_a_replay_asking_for_other_children_is_caught_and_writes_nothing(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _parent(db, pool)
    await (await replay_context(runtime, claim, turn)).spawn_many([{"part": 0}, {"part": 1}])
    written = await _written(pool, claim.session_id)
    replay = await replay_context(runtime, claim, turn)
    with pytest.raises(NondeterministicReplay, match="spawn:1"):
        await replay.spawn_many([{"part": 0}, {"part": 9}, {"part": 2}])
    assert await _written(pool, claim.session_id) == written


async def test_a_spawn_and_a_spawn_many_find_each_others_steps(
    db: ScratchTarget, pool: Pool
) -> None:
    """The same keys and digests: code that moved from one to the other replays."""
    runtime, claim, turn = await _parent(db, pool)
    ctx = await replay_context(runtime, claim, turn)
    one = [await ctx.spawn({"part": 0}), await ctx.spawn({"part": 1})]
    replay = await replay_context(runtime, claim, turn)
    assert await replay.spawn_many([{"part": 0}, {"part": 1}]) == one
    assert (await _written(pool, claim.session_id))["sessions"] == 2


async def test_the_limits_refuse_a_whole_batch_and_nothing_is_written(
    db: ScratchTarget, pool: Pool
) -> None:
    admission = AdmissionStore(db.config, pool)
    await admission.admission_set(
        tenant=DEFAULT_ROW, limits={AdmissionLimit.MAX_FANOUT: 3, AdmissionLimit.MAX_DEPTH: 1}
    )
    runtime, claim, turn = await _parent(db, pool)
    ctx = await replay_context(runtime, claim, turn)
    first: Child = await ctx.spawn({"part": 0})
    before = await _written(pool, claim.session_id)
    with pytest.raises(ChildRefused, match="3 children refused: max_fanout limit of 3") as refused:
        await ctx.spawn_many([{"part": i} for i in range(1, 4)])  # 1 + 3 > 3
    assert (refused.value.limit, refused.value.value) == ("max_fanout", 3)
    assert await _written(pool, claim.session_id) == before
    # Up to the limit exactly is allowed: a replay finds spawn:0 and spawns two more (1 + 2).
    replay = await replay_context(runtime, claim, turn)
    [again, *fits] = await replay.spawn_many([{"part": 0}, {"part": 1}, {"part": 2}])
    assert again == first and len(fits) == 2
    assert (await _written(pool, claim.session_id))["sessions"] == 3

    # A child (depth 1) may not have children of its own under max_depth 1.
    child_claim, child_turn = await claim_one(runtime, "w2")
    assert child_claim.session_id in {first.id, *(c.id for c in fits)}
    child_ctx = await replay_context(runtime, child_claim, child_turn)
    with pytest.raises(ChildRefused, match="2 children refused: max_depth limit of 1"):
        await child_ctx.spawn_many([{}, {}])
    after = await _written(pool, child_claim.session_id)
    assert (after["links"], after["steps"], after["sessions"], after["started"]) == ([], [], 0, 0)


async def test_the_tenants_session_limit_counts_the_whole_batch(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _parent(db, pool)  # the one session so far
    await AdmissionStore(db.config, pool).admission_set(
        tenant=DEFAULT_ROW, limits={AdmissionLimit.MAX_SESSIONS: 3}
    )
    ctx = await replay_context(runtime, claim, turn)
    before = await _written(pool, claim.session_id)
    with pytest.raises(
        ChildRefused, match="3 children refused: max_sessions limit of 3"
    ) as refused:
        await ctx.spawn_many([{"part": i} for i in range(3)])  # 1 + 3 > 3
    assert (refused.value.limit, refused.value.value) == ("max_sessions", 3)
    assert await _written(pool, claim.session_id) == before
    fits = await (await replay_context(runtime, claim, turn)).spawn_many([{"part": 0}, {"part": 1}])
    assert len(fits) == 2 and (await _written(pool, claim.session_id))["sessions"] == 2
