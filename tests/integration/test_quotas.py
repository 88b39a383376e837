"""Provider quotas against real PostgreSQL: the window refuses what would exceed
a limit and says when room frees, the counters balance exactly, reservations
are idempotent per key, a holder that lost its turn leaves an unknown request,
and a deferred turn is not claimable before its not-before time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.errors import QuotaScopeUnknown
from stint.store.models import Claim, QuotaScope, TurnStart
from stint.store.pool import Pool
from stint.store.quotas import QuotaLimits, QuotaStore
from stint.store.vocabulary import EventKind, TurnStatus
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.interleaving import Interleaver
from tests.workers import event_kinds, fetch


@dataclass
class Running:
    """A claimed turn to reserve quota under, and the stores."""

    quotas: QuotaStore
    runtime: SqlWorkerStore
    client: ClientStore
    claim: Claim
    turn: TurnStart

    async def reserve(self, key: str, estimate: int = 100, scope: str = "p") -> bool:
        grant = await self.quotas.quota_reserve(
            self.claim, scope=scope, key=key, turn_id=self.turn.turn_id, estimate=estimate
        )
        return grant.granted

    async def scope(self, name: str = "p") -> QuotaScope:
        [found] = await self.quotas.quota_list(name)
        return found


@pytest.fixture
async def running(db: ScratchTarget, pool: Pool) -> Running:
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=2)
    await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})
    claim, turn = await claim_one(runtime, "w")
    return Running(runtime.quotas, runtime, client, claim, turn)


def balanced(s: QuotaScope) -> bool:
    return (
        s.tokens_reserved
        == (
            s.tokens_reconciled
            + s.tokens_refunded
            - s.tokens_debt
            + s.tokens_unknown
            + s.tokens_in_flight
        )
        and s.requests_reserved == s.requests_reconciled + s.requests_unknown + s.requests_in_flight
    )


async def test_the_window_refuses_the_request_over_rpm_and_says_when_room_frees(
    running: Running,
) -> None:
    await running.quotas.quota_set("p", QuotaLimits(rpm=2, window_seconds=30))
    assert await running.reserve("a") and await running.reserve("b")
    refused = await running.quotas.quota_reserve(
        running.claim, scope="p", key="c", turn_id=running.turn.turn_id, estimate=100
    )
    assert not refused.granted and refused.wait_seconds is None  # both still in flight
    await running.quotas.quota_settle(scope="p", key="a", actual=50)
    refused = await running.quotas.quota_reserve(
        running.claim, scope="p", key="c", turn_id=running.turn.turn_id, estimate=100
    )
    # "a" settled: it leaves the window a full window after it was answered.
    assert not refused.granted and refused.wait_seconds is not None
    assert 0 < refused.wait_seconds <= 30
    scope = await running.scope()
    assert (scope.requests_reserved, scope.window_requests) == (2, 2)


async def test_tpm_counts_reported_usage_once_reconciled(running: Running) -> None:
    await running.quotas.quota_set("p", QuotaLimits(tpm=1000))
    assert await running.reserve("a", 900)
    assert not await running.reserve("b", 200)
    await running.quotas.quota_settle(scope="p", key="a", actual=300)  # 600 refunded
    assert await running.reserve("b", 700)
    scope = await running.scope()
    assert scope.window_tokens == 1000
    refused = await running.quotas.quota_reserve(
        running.claim, scope="p", key="huge", turn_id=running.turn.turn_id, estimate=1001
    )
    assert refused.too_big and not refused.granted


async def test_counters_add_up_exactly(running: Running) -> None:
    await running.quotas.quota_set("p", QuotaLimits(rpm=100))
    for key in "abcde":
        assert await running.reserve(key, 100)
    await running.quotas.quota_settle(scope="p", key="a", actual=60)  # refund 40
    await running.quotas.quota_settle(scope="p", key="b", actual=130)  # debt 30
    await running.quotas.quota_settle(scope="p", key="c", actual=0)  # refused: refund 100
    await running.quotas.quota_settle(scope="p", key="d", actual=None)  # unknown 100
    assert not await running.quotas.quota_settle(scope="p", key="d", actual=5)  # settled once
    s = await running.scope()
    assert (s.tokens_reserved, s.tokens_reconciled, s.tokens_refunded, s.tokens_debt) == (
        500,
        190,
        140,
        30,
    )
    assert (s.tokens_unknown, s.tokens_in_flight) == (100, 100)
    assert (s.requests_reconciled, s.requests_unknown, s.requests_in_flight) == (3, 1, 1)
    assert balanced(s)
    await running.quotas.quota_settle(scope="p", key="e", actual=100)
    s = await running.scope()
    assert s.tokens_in_flight == 0
    # At rest: reserved = reconciled + refunded - debt + unknown, exactly.
    assert s.tokens_reserved == s.tokens_reconciled + s.tokens_refunded - s.tokens_debt + (
        s.tokens_unknown
    )


async def test_a_reservation_is_counted_once_per_key(running: Running) -> None:
    await running.quotas.quota_set("p", QuotaLimits(rpm=1))
    assert await running.reserve("a")
    assert await running.reserve("a")  # a retried statement: the same reservation
    assert (await running.scope()).requests_reserved == 1


async def test_a_request_whose_turn_moved_on_is_counted_unknown(
    running: Running, pool: Pool
) -> None:
    await running.quotas.quota_set("p", QuotaLimits(concurrency=1))
    assert await running.reserve("a", 70)
    assert not await running.reserve("b")  # concurrency 1: "a" is in flight
    # The worker crashes; its lease goes (here: handed back), the turn is queued again.
    await running.runtime.sessions_release(running.claim, turn_id=running.turn.turn_id)
    claim, turn = await claim_one(running.runtime, "w2")
    grant = await running.quotas.quota_reserve(
        claim, scope="p", key="a-replayed", turn_id=turn.turn_id, estimate=70
    )
    assert grant.granted
    s = await running.scope()
    assert (s.requests_unknown, s.tokens_unknown, s.requests_in_flight) == (1, 70, 1)
    assert balanced(s)
    rows = await fetch(pool, "SELECT key, state FROM quota_reservations ORDER BY key")
    assert rows == [("a", "unknown"), ("a-replayed", "reserved")]


async def test_an_unknown_scope_is_refused_by_name(running: Running) -> None:
    with pytest.raises(QuotaScopeUnknown, match="stint quota set"):
        await running.reserve("a", scope="nowhere")


async def test_set_keeps_unnamed_limits_and_delete_removes_the_scope(running: Running) -> None:
    assert await running.quotas.quota_set("p", QuotaLimits(rpm=5, tpm=500))
    assert not await running.quotas.quota_set("p", QuotaLimits(concurrency=2))
    s = await running.scope()
    assert (s.rpm, s.tpm, s.concurrency, s.window_seconds) == (5, 500, 2, 60)
    await running.quotas.quota_set("p", QuotaLimits(clear=frozenset({"rpm"})))
    assert (await running.scope()).rpm is None
    assert await running.quotas.quota_delete("p")
    assert not await running.quotas.quota_delete("p")
    assert await running.quotas.quota_list() == []


async def test_a_deferred_turn_waits_out_its_not_before_time(running: Running, pool: Pool) -> None:
    await running.quotas.quota_set("p", QuotaLimits(rpm=1))
    session = running.claim.session_id
    assert (
        await running.runtime.turns_defer(
            running.claim, turn_id=running.turn.turn_id, scope="p", wait_seconds=600
        )
        is None
    )
    assert await running.runtime.turns_claim(owner="w2", pins=[], limit=4, lease_seconds=30) == []
    kinds = await event_kinds(pool, session)
    assert kinds[-1] == EventKind.TURN_DEFERRED
    [(payload,)] = await fetch(
        pool, "SELECT payload FROM events WHERE session_id = %s AND kind = 'turn.deferred'", session
    )
    assert payload["scope"] == "p" and payload["wait_s"] == 600 and payload["not_before"]
    [(status,)] = await fetch(pool, "SELECT status FROM turns WHERE id = %s", running.turn.turn_id)
    assert status == TurnStatus.QUEUED
    assert (await running.scope()).deferrals == 1
    # The not-before time passes (moved here, not waited for): the turn is claimed again.
    await fetch(
        pool,
        "UPDATE sessions SET ready_at = now() - interval '1 second' WHERE id = %s RETURNING id",
        session,
    )
    claim, turn = await claim_one(running.runtime, "w2")
    assert (claim.session_id, turn.turn_id, turn.attempts) == (
        session,
        running.turn.turn_id,
        2,
    )


async def test_a_cancel_requested_first_wins_over_the_deferral(
    running: Running, pool: Pool
) -> None:
    await fetch(
        pool,
        "UPDATE sessions SET control = 'cancel', control_turn_id = %s, "
        "control_requested_at = now() WHERE id = %s RETURNING id",
        running.turn.turn_id,
        running.claim.session_id,
    )
    requested = await running.runtime.turns_defer(
        running.claim, turn_id=running.turn.turn_id, scope="p", wait_seconds=5
    )
    assert requested is not None and requested.turn_id == running.turn.turn_id


async def test_reservers_queued_behind_the_scope_lock_count_each_other(
    db: ScratchTarget, pool: Pool, running: Running
) -> None:
    """Reservers of three workers wait for the scope row's lock at once; each in
    turn must count the reservation it waited for. Before the fix the window was
    counted from the snapshot taken before the wait: with rpm 1 all three were
    granted (the provider saw 8 requests in a window of 6)."""
    await running.quotas.quota_set("p", QuotaLimits(rpm=1, window_seconds=60))
    interleaver = Interleaver(db, pool)
    try:
        reservers = []
        for n in range(3):
            actor = await interleaver.actor(f"w{n}", pause=lambda name: False)
            reservers.append((actor, SqlWorkerStore(db.config, actor.pool, concurrency=1).quotas))
        async with pool.connection() as holder, holder.transaction():
            await holder.execute("SELECT FROM quota_scopes WHERE scope = 'p' FOR UPDATE")
            tasks = [
                actor.start(
                    quotas.quota_reserve(
                        running.claim,
                        scope="p",
                        key=f"k{n}",
                        turn_id=running.turn.turn_id,
                        estimate=10,
                    )
                )
                for n, (actor, quotas) in enumerate(reservers)
            ]
            for actor, _quotas in reservers:
                await interleaver.until_blocked(actor)
        grants = [await task for task in tasks]
    finally:
        await interleaver.close()
    assert sum(g.granted for g in grants) == 1
    scope = await running.scope()
    assert (scope.requests_reserved, scope.window_requests) == (1, 1)
    assert balanced(scope)
