"""Durable waits of a turn: timers, signals, children (the SQL is in ``sql/waits.sql``).

A wait is a step of kind ``wait``. ``waits_begin`` records it started with its
deadline from the database clock; ``waits_settle`` ends it when its time has
come (committing the step, and consuming the signal it got in the same
statement); ``turns_wait`` sets the turn aside until then: queued, its session
ready at the deadline, its lease and slot free. All three are fenced writes of
the lease holder, sent in the worker's batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from stint.store.batch import StatementBatcher
from stint.store.config import StoreConfig
from stint.store.fenced import run_fenced
from stint.store.models import Claim, ControlRequest, ParkResult
from stint.store.vocabulary import WaitKind

__all__ = ["WaitStore", "WaitUntil"]


@dataclass(frozen=True)
class WaitUntil:
    """When a wait ends if nothing else ends it: ``seconds`` from its first
    reaching, or the time ``at``; neither: never (it waits for its event)."""

    seconds: float | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class _Begun:
    deadline: datetime | None


@dataclass(frozen=True)
class _Waited(ParkResult):
    notified: bool | None  # woken at once: something may have arrived meanwhile


@dataclass(frozen=True)
class _Settled:
    last_event_seq: int
    result: Any


class WaitStore:
    """The fenced statements of durable waits, through the worker's batches."""

    def __init__(self, config: StoreConfig, batcher: StatementBatcher) -> None:
        self._config = config
        self._batcher = batcher

    async def waits_begin(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        digest: str,
        kind: WaitKind,
        until: WaitUntil,
        name: str | None = None,
        children: list[UUID] | None = None,
        wait_all: bool | None = None,
    ) -> datetime | None:
        """Record the wait started; returns its deadline (database clock), or None."""
        begun = await run_fenced(
            self._batcher,
            self._config,
            "waits_begin",
            claim,
            turn_id,
            (),
            _Begun,
            step_key=step_key,
            digest=digest,
            wait_kind=str(kind),
            seconds=until.seconds,
            until=until.at,
            signal_name=name,
            children=children,
            wait_all=wait_all,
        )
        return begun.deadline

    async def waits_settle(self, claim: Claim, *, turn_id: UUID, step_key: str) -> Any | None:
        """End the wait if it is over: its committed result (a JSON object with its
        ``outcome``), or None while it must go on waiting."""
        settled = await run_fenced(
            self._batcher,
            self._config,
            "waits_settle",
            claim,
            turn_id,
            (),
            _Settled,
            step_key=step_key,
        )
        return settled.result

    async def turns_wait(
        self, claim: Claim, *, turn_id: UUID, step_key: str
    ) -> ControlRequest | None:
        """Set the turn aside until its wait ``step_key`` can end: the lease is
        released, the slot is free. Returns the cancel or interrupt already
        requested for this turn instead, having changed nothing."""
        result = await run_fenced(
            self._batcher,
            self._config,
            "turns_wait",
            claim,
            turn_id,
            (),
            _Waited,
            step_key=step_key,
        )
        if result.parked:
            return None
        assert result.control is not None
        return ControlRequest(result.control, turn_id, result.control_reason)
