"""The worker's side of the store: claims, leases, and fenced writes.

Every write a slot makes for a session is one statement that first matches the
session row on ``lease_owner`` and ``lease_epoch`` (the fence). A worker whose
lease was taken gets ``LeaseLost`` and nothing of the statement is written;
event seqs come from ``sessions.last_event_seq`` under the same row lock, so a
session's log is always exactly 1..N.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.config import StoreConfig
from stint.store.conversation import ConversationStore
from stint.store.errors import LeaseLost
from stint.store.models import Claim, ControlRequest, FinishResult, StepRecord, TurnStart
from stint.store.pool import Pool
from stint.store.queries import query
from stint.store.translate import guarded

__all__ = ["EventSpec", "RuntimeStore"]

EventSpec: TypeAlias = tuple[str, Mapping[str, Any]]
"""An event to append: its kind and its JSON payload."""


class RuntimeStore:
    """Data access for one worker. Slot writes use ``slots``; claims and lease
    renewals have pools of their own so that busy slots cannot starve them."""

    def __init__(self, config: StoreConfig, *, slots: Pool, claim: Pool, lease: Pool) -> None:
        self._config = config
        self._slots = slots
        self._claim = claim
        self._lease = lease
        self.conversation = ConversationStore(config, slots)
        """Conversation memory, on the slots' pool (a turn's reads and fenced writes)."""

    async def workers_register(
        self, *, worker_id: str, host: str, pid: int, version: str, pins: Sequence[str], slots: int
    ) -> None:
        params = {
            "id": worker_id,
            "host": host,
            "pid": pid,
            "version": version,
            "pins": list(pins),
            "slots": slots,
        }
        async with guarded("workers_register", self._config), self._lease.connection() as conn:
            await conn.execute(query("workers_register"), params)

    async def workers_set_state(self, *, worker_id: str, pid: int, state: str) -> None:
        async with guarded("workers_set_state", self._config), self._lease.connection() as conn:
            await conn.execute(
                query("workers_set_state"), {"id": worker_id, "pid": pid, "state": state}
            )

    async def sessions_claim(
        self, *, owner: str, pins: Sequence[str], limit: int, lease_seconds: float
    ) -> list[Claim]:
        params = {
            "owner": owner,
            "pins": list(pins),
            "limit": limit,
            "lease_seconds": lease_seconds,
        }
        async with guarded("sessions_claim", self._config), self._claim.connection() as conn:
            cur = await conn.execute(query("sessions_claim"), params)
            rows = await cur.fetchall()
        return [Claim(session_id=sid, owner=owner, epoch=epoch) for sid, epoch in rows]

    async def leases_renew(
        self, *, owner: str, pid: int, claims: Sequence[Claim], lease_seconds: float
    ) -> dict[UUID, ControlRequest | None]:
        """Renew all leases in one statement; returns the sessions still ours, each
        with the control request waiting for it, if any."""
        params = {
            "owner": owner,
            "pid": pid,
            "session_ids": [c.session_id for c in claims],
            "epochs": [c.epoch for c in claims],
            "lease_seconds": lease_seconds,
        }
        async with guarded("leases_renew", self._config), self._lease.connection() as conn:
            cur = await conn.execute(query("leases_renew"), params)
            rows = await cur.fetchall()
        return {
            sid: ControlRequest(action, turn_id, reason) if action else None
            for sid, action, turn_id, reason in rows
        }

    async def turns_begin(self, claim: Claim) -> TurnStart | None:
        """Start the session's next turn; None when its queue is empty."""
        params = {**self._fence(claim), "events_channel": self._config.events_channel}
        async with guarded("turns_begin", self._config), self._slots.connection() as conn:
            cur = await conn.execute(query("turns_begin"), params)
            row = await cur.fetchone()
        if row is None or not row[0]:
            raise LeaseLost(session=claim.session_id, epoch=claim.epoch, operation="turns_begin")
        _, turn_id, seq, turn_input, attempts, timeout_seconds = row
        if turn_id is None:
            return None
        return TurnStart(turn_id, seq, turn_input, attempts, timeout_seconds)

    async def steps_for_turn(self, claim: Claim, turn_id: UUID) -> dict[str, StepRecord]:
        """Every step recorded for a turn (read on retries, to replay)."""
        params = {"session_id": claim.session_id, "turn_id": turn_id}
        async with guarded("steps_for_turn", self._config), self._slots.connection() as conn:
            cur = await conn.execute(query("steps_for_turn"), params)
            rows = await cur.fetchall()
        return {r[0]: StepRecord(*r) for r in rows}

    async def steps_start(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        kind: str,
        digest: str,
        events: Sequence[EventSpec] = (),
    ) -> None:
        await self._fenced(
            "steps_start",
            claim,
            turn_id,
            events,
            step_key=step_key,
            kind=kind,
            digest=digest,
        )

    async def steps_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        status: str,
        result: Any,
        events: Sequence[EventSpec] = (),
    ) -> None:
        """Record a started step as ``committed`` (with result) or ``unknown``."""
        await self._fenced(
            "steps_finish",
            claim,
            turn_id,
            events,
            step_key=step_key,
            status=status,
            result=None if status != "committed" else Jsonb(result),
        )

    async def events_append(
        self, claim: Claim, *, turn_id: UUID | None, events: Sequence[EventSpec]
    ) -> int:
        """Append events under the lease; returns the last seq written."""
        row = await self._fenced("events_append", claim, turn_id, events)
        return int(row[0])

    async def turns_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        status: str,
        output: Any,
        error: str | None,
        events: Sequence[EventSpec],
        release: bool,
        reason: str | None = None,
    ) -> FinishResult:
        """Finish a turn; the session stays leased only when more turns are queued
        and ``release`` is false."""
        row = await self._fenced(
            "turns_finish",
            claim,
            turn_id,
            events,
            status=status,
            output=None if output is None else Jsonb(output),
            error=error,
            release=release,
            reason=reason,
        )
        return FinishResult(queued_turns=row[0], still_held=row[1])

    async def turns_park(
        self, claim: Claim, *, turn_id: UUID, step_key: str, digest: str, question: Any
    ) -> ControlRequest | None:
        """Park the turn on a question: the lease is released, the slot is free.
        Returns the cancel or interrupt already requested for this turn instead,
        having parked nothing: the caller ends the turn as asked."""
        row = await self._fenced(
            "turns_park",
            claim,
            turn_id,
            (),
            step_key=step_key,
            digest=digest,
            question=Jsonb(question),
        )
        parked, action, reason = row
        return None if parked else ControlRequest(action, turn_id, reason)

    async def sessions_release(
        self, claim: Claim, *, turn_id: UUID | None = None, reason: str = "released"
    ) -> bool:
        """Give the session back; a still-running ``turn_id`` returns to queued
        (with a ``turn.released`` event). Returns whether a turn was requeued."""
        row = await self._fenced("sessions_release", claim, turn_id, (), reason=reason)
        return bool(row[0])

    def _fence(self, claim: Claim) -> dict[str, Any]:
        return {"session_id": claim.session_id, "owner": claim.owner, "epoch": claim.epoch}

    async def _fenced(
        self,
        name: str,
        claim: Claim,
        turn_id: UUID | None,
        events: Sequence[EventSpec],
        **extra: Any,
    ) -> tuple[Any, ...]:
        params = {
            **self._fence(claim),
            "turn_id": turn_id,
            "kinds": [kind for kind, _ in events],
            "payloads": [Jsonb(dict(payload)) for _, payload in events],
            "events_channel": self._config.events_channel,
            **extra,
        }
        async with guarded(name, self._config), self._slots.connection() as conn:
            cur = await conn.execute(query(name), params)
            row = await cur.fetchone()
        if row is None:
            raise LeaseLost(session=claim.session_id, epoch=claim.epoch, operation=name)
        return row
