"""Runs one claimed session's turns, in order, under its lease.

A runner lives in one slot. It starts the session's next turn, hands the
harness a durable context, records the outcome with the turn's terminal event,
and goes on while turns are queued. Losing the lease ends it without another
write; cancellation (lease lost, drain) leaves the hand-back to the worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from store.errors import LeaseLost, StoreError
from store.models import Claim, TurnStart
from store.runtime import RuntimeStore
from worker.context import LeaseExpired, TurnContext
from worker.harness import Harness
from worker.telemetry import SPAN_TURN, span

__all__ = ["Held", "SessionRunner"]

log = logging.getLogger("stint.worker.runner")

_MAX_ERROR_CHARS = 2000


@dataclass
class Held:
    """A session this worker holds: its lease, its slot task, its running turn."""

    claim: Claim
    task: asyncio.Task[None] | None = None
    turn_id: UUID | None = None
    lost: bool = field(default=False)


@dataclass(frozen=True)
class Outcome:
    status: str
    output: Any
    error: str | None
    kind: str


class SessionRunner:
    """Stateless apart from its collaborators; one ``run`` call per held session."""

    def __init__(
        self,
        *,
        store: RuntimeStore,
        harness: Harness,
        may_write: Callable[[], bool],
        stopping: Callable[[], bool],
    ) -> None:
        self._store = store
        self._harness = harness
        self._may_write = may_write
        self._stopping = stopping

    async def run(self, held: Held) -> None:
        claim = held.claim
        try:
            while True:
                if not self._may_write():
                    raise LeaseExpired(f"session {claim.session_id}: worker fenced itself")
                turn = None if self._stopping() else await self._store.turns_begin(claim)
                if turn is None:
                    await self._store.sessions_release(claim)
                    return
                held.turn_id = turn.turn_id
                with span(
                    SPAN_TURN,
                    session_id=str(claim.session_id),
                    turn_id=str(turn.turn_id),
                    attempt=turn.attempts,
                ) as current:
                    outcome = await self._run_turn(claim, turn)
                    current.set_attribute("status", outcome.status)
                    held.turn_id = None  # from here the finish write owns the turn
                    finished = await self._store.turns_finish(
                        claim,
                        turn_id=turn.turn_id,
                        status=outcome.status,
                        output=outcome.output,
                        error=outcome.error,
                        events=[(outcome.kind, _terminal_payload(outcome, turn))],
                        release=self._stopping(),
                    )
                if not finished.still_held:
                    return
        except (LeaseLost, LeaseExpired) as exc:
            held.lost = True
            log.warning("session %s: lease lost, stopping its slot (%s)", claim.session_id, exc)
        except StoreError as exc:
            log.warning("session %s: store failed, giving it back (%s)", claim.session_id, exc)
            await self._give_back(held)

    async def _run_turn(self, claim: Claim, turn: TurnStart) -> Outcome:
        steps = {}
        if turn.attempts > 1:
            steps = await self._store.steps_for_turn(claim, turn.turn_id)
        ctx = TurnContext(
            store=self._store,
            claim=claim,
            turn_id=turn.turn_id,
            turn_input=turn.input,
            attempt=turn.attempts,
            steps=steps,
            may_write=self._may_write,
        )
        try:
            output = await self._harness.run_turn(ctx)
            json.dumps(output)
        except (StoreError, LeaseExpired):
            raise
        except Exception as exc:
            log.info("turn %s failed: %s", turn.turn_id, exc)
            error = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]
            return Outcome("failed", None, error, "turn.failed")
        return Outcome("succeeded", output, None, "turn.completed")

    async def _give_back(self, held: Held) -> None:
        held.lost = True
        try:
            await self._store.sessions_release(held.claim, turn_id=held.turn_id, reason="error")
        except StoreError as exc:
            log.warning("session %s: left to lease expiry (%s)", held.claim.session_id, exc)


def _terminal_payload(outcome: Outcome, turn: TurnStart) -> dict[str, Any]:
    payload: dict[str, Any] = {"attempt": turn.attempts, "status": outcome.status}
    if outcome.error is not None:
        payload["error"] = outcome.error
    return payload
