"""One fenced statement of a slot, sent in the worker's next batch.

Every write a slot makes for a session first matches the session row on the
lease's owner and epoch (the fence). This is the one place that builds those
parameters and turns "no row back" into ``LeaseLost``, shared by the worker
store and the wait statements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypeVar
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.batch import StatementBatcher
from stint.store.config import StoreConfig
from stint.store.errors import LeaseLost
from stint.store.models import Claim
from stint.store.vocabulary import EventKind

__all__ = ["EventSpec", "run_fenced"]

EventSpec: TypeAlias = tuple[EventKind, Mapping[str, Any]]
"""An event to append: its kind and its JSON payload."""

_R = TypeVar("_R")


async def run_fenced(
    batcher: StatementBatcher,
    config: StoreConfig,
    name: str,
    claim: Claim,
    turn_id: UUID | None,
    events: Sequence[EventSpec],
    row: type[_R],
    *,
    prelude: str | None = None,
    **extra: Any,
) -> _R:
    """Run one fenced statement in the next batch (``prelude`` just before it, in
    its transaction: ``StatementBatcher.fetch_optional``); no row back means the
    fence failed: ``LeaseLost``."""
    params = {
        "session_id": claim.session_id,
        "owner": claim.owner,
        "epoch": claim.epoch,
        "turn_id": turn_id,
        # One jsonb parameter ([[kind, payload], ...]) unpacked in SQL: psycopg dumps it
        # once, where a text[] and a jsonb[] were dumped element by element.
        "events": Jsonb([[kind, dict(payload)] for kind, payload in events]),
        "events_channel": config.events_channel,
        "work_channel": config.work_channel,
        **extra,
    }
    found = await batcher.fetch_optional(
        name, row, params, lock_order=str(claim.session_id), prelude=prelude
    )
    if found is None:
        raise LeaseLost(session=claim.session_id, epoch=claim.epoch, operation=name)
    return found
