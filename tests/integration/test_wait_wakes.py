"""A signal sent while its turn is being set aside wakes it: the two windows of
``turns_wait``, each forced deterministically (``tests.interleaving``).

Before a wait sets its turn aside, ``waits_settle`` has looked for a signal and
found none; one sent after that look must not be slept through until the
wait's deadline (here: none, so for ever)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import pytest_asyncio

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import WaitKind
from stint.store.waits import WaitUntil
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.interleaving import Interleaver
from tests.workers import fetch


@pytest_asyncio.fixture(loop_scope="session")
async def interleaver(db: ScratchTarget, pool: Pool) -> AsyncIterator[Interleaver]:
    made = Interleaver(db, pool)
    try:
        yield made
    finally:
        await made.close()


async def _waiting(runtime: SqlWorkerStore, claim: Claim, turn: TurnStart) -> None:
    """The turn reaches ``wait_for("go")``: recorded, and no signal found yet."""
    waits = runtime.waits
    await waits.waits_begin(
        claim,
        turn_id=turn.turn_id,
        step_key="wait:0",
        digest="d",
        kind=WaitKind.SIGNAL,
        until=WaitUntil(),
        name="go",
    )
    assert await waits.waits_settle(claim, turn_id=turn.turn_id, step_key="wait:0") is None


async def _woken(pool: Pool, session_id: UUID) -> bool:
    [(status, due)] = await fetch(
        pool, "SELECT status, ready_at <= now() FROM sessions WHERE id = %s", session_id
    )
    assert status == "ready"
    return bool(due)


async def test_a_signal_kept_between_the_look_and_the_set_aside_wakes_the_turn(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    queued = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="a", turn_input={}
    )
    claim, turn = await claim_one(runtime, "w1")
    await _waiting(runtime, claim, turn)
    await ControlStore(db.config, pool).signal(
        session_id=queued.session_id, name="go", idempotency_key="s1", payload=1
    )
    assert await runtime.waits.turns_wait(claim, turn_id=turn.turn_id, step_key="wait:0") is None
    assert await _woken(pool, queued.session_id)


async def test_a_signal_committed_while_the_set_aside_waits_for_its_lock_wakes_the_turn(
    db: ScratchTarget, pool: Pool, interleaver: Interleaver
) -> None:
    """The set-aside's snapshot predates the signal: only the changed row version
    (xmin) tells it that something came."""
    sender = await interleaver.actor("client", pause=lambda name: name == "signals_send")
    worker = await interleaver.actor("w1", pause=lambda name: False)
    runtime = SqlWorkerStore(db.config, worker.pool, concurrency=1)
    queued = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="a", turn_input={}
    )
    claim, turn = await claim_one(runtime, "w1")
    await _waiting(runtime, claim, turn)
    sending = sender.start(
        ControlStore(db.config, sender.pool).signal(
            session_id=queued.session_id, name="go", idempotency_key="s1", payload=1
        )
    )
    await interleaver.until_waiting(sender, "signals_send")  # holds the session row lock
    setting_aside = worker.start(
        runtime.waits.turns_wait(claim, turn_id=turn.turn_id, step_key="wait:0")
    )
    await interleaver.until_blocked(worker)
    sender.go()
    await sending
    assert await setting_aside is None
    assert await _woken(pool, queued.session_id)
