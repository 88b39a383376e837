"""Claiming a session the way a worker's claimer does, for store-level tests."""

from __future__ import annotations

from stint.store.models import Claim, TurnStart
from stint.store.worker_store import SqlWorkerStore


async def claim_one(
    runtime: SqlWorkerStore, owner: str, *, lease_seconds: float = 30.0
) -> tuple[Claim, TurnStart]:
    """Claim the oldest claimable session and the turn the claim started on it."""
    [work] = await runtime.turns_claim(owner=owner, pins=[], limit=1, lease_seconds=lease_seconds)
    assert work.turn is not None
    return work.claim, work.turn
