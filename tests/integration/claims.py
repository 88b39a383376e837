"""Claiming a session the way a worker's claimer does, and running it the way a
slot does, for store-level tests."""

from __future__ import annotations

from collections.abc import Callable

from stint.store.children import NewChild, SpawnedChild
from stint.store.client import ClientStore
from stint.store.config import StoreConfig
from stint.store.models import Claim, EnqueueResult, TurnStart
from stint.store.pool import Pool
from stint.store.worker_store import SqlWorkerStore
from stint.worker.context import TurnContext
from stint.worker.harness import Harness
from stint.worker.runner import Limits, SessionRunner
from stint.worker.slots import Held


async def claim_one(
    runtime: SqlWorkerStore, owner: str, *, lease_seconds: float = 30.0
) -> tuple[Claim, TurnStart]:
    """Claim the oldest claimable session and the turn the claim started on it."""
    [work] = await runtime.turns_claim(owner=owner, pins=[], limit=1, lease_seconds=lease_seconds)
    assert work.turn is not None
    return work.claim, work.turn


async def parent_running(
    config: StoreConfig, pool: Pool, runtime: SqlWorkerStore, owner: str = "w1"
) -> tuple[EnqueueResult, Claim, TurnStart]:
    """A new session whose first turn ``owner`` claimed and started (enqueued through
    ``pool``): the parent a spawn or a control test starts from."""
    queued = await ClientStore(config, pool).turns_enqueue(
        session_id=None, idempotency_key="p", turn_input={}
    )
    claim, turn = await claim_one(runtime, owner)
    return queued, claim, turn


async def spawn_child(
    runtime: SqlWorkerStore,
    claim: Claim,
    turn: TurnStart,
    n: int,
    *,
    pin: str = "cold",
    on_cancel: str = "cascade",
) -> SpawnedChild:
    """The turn's n-th spawn; a ``cold`` pin keeps the child from every claim."""
    return await runtime.children.children_spawn(
        claim,
        turn_id=turn.turn_id,
        step_key=f"spawn:{n}",
        digest=f"d{n}",
        child=NewChild({}, pin=pin, on_cancel=on_cancel),
    )


async def replay_context(
    runtime: SqlWorkerStore,
    claim: Claim,
    turn: TurnStart,
    *,
    attempt: int = 2,
    may_write: Callable[[], bool] = lambda: True,
) -> TurnContext:
    """A fresh context for ``turn`` with the steps recorded so far, as a retry builds it."""
    return TurnContext(
        store=runtime,
        claim=claim,
        turn_id=turn.turn_id,
        turn_input=turn.input,
        attempt=attempt,
        steps=await runtime.steps_for_turn(claim, turn.turn_id),
        may_write=may_write,
    )


def slot_runner(
    runtime: SqlWorkerStore, harness: Harness, *, may_write: Callable[[], bool]
) -> SessionRunner:
    """A slot's runner over ``runtime``, fenced by ``may_write`` (never stopping)."""
    return SessionRunner(
        store=runtime,
        harness=harness,
        limits=Limits(turn_timeout=30, max_turns_per_claim=100, max_claim_seconds=60),
        may_write=may_write,
        stopping=lambda: False,
        switch=lambda held, new: Held(new),
        pins=[],
        lease_seconds=30,
    )
