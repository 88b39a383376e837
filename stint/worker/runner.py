"""Runs one claimed session's turns, in order, under its lease.

A runner lives in one slot. It starts the session's next turn, hands the
harness a durable context, records the outcome with the turn's terminal event,
and goes on while turns are queued, up to the fairness limits. A turn ends as
``succeeded`` or ``failed``; ``interrupted`` past its time limit or on request;
``cancelled`` on request; or it parks on a question, or is handed back to
wait for provider quota (a not-before time), and frees the slot. Losing
the lease ends the runner without another write; cancellation for a drain or a
lost lease leaves the hand-back to the worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stint.config.logs import log_fields
from stint.store.batch import Late
from stint.store.errors import LeaseLost, StoreError, TurnStopRequested
from stint.store.models import Claim, ControlRequest, FinishResult, TurnStart
from stint.store.vocabulary import EventKind, TurnStatus
from stint.worker.context import Deferred, Parked, TurnContext, Waiting
from stint.worker.failpoints import failpoint
from stint.worker.harness import Harness
from stint.worker.protocols import WorkerStore
from stint.worker.slots import Held
from stint.worker.telemetry import (
    SPAN_TURN,
    record_handed_back,
    record_lease_lost,
    record_parked,
    record_turn_finished,
    record_turn_started,
    span,
)

__all__ = ["Limits", "SessionRunner"]

log = logging.getLogger("stint.worker.runner")

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Limits:
    """Per-turn time limit and the fairness limits of one claim."""

    turn_timeout: float
    max_turns_per_claim: int
    max_claim_seconds: float


@dataclass(frozen=True)
class Outcome:
    """How a turn ended: its terminal status and event, output or error, and why."""

    status: TurnStatus
    output: Any
    error: str | None
    kind: EventKind
    reason: str | None = None


class SessionRunner:
    """Stateless apart from its collaborators; one ``run`` call per slot task.

    A slot task runs turns back to back: each finish statement also starts the
    slot's next turn, on the same session while it has turns queued and its
    fair share is not used up, else on another session claimed in that same
    statement. The slot ends when there is nothing left to claim.
    """

    def __init__(
        self,
        *,
        store: WorkerStore,
        harness: Harness,
        limits: Limits,
        may_write: Callable[[], bool],
        stopping: Callable[[], bool],
        switch: Callable[[Held, Claim], Held],
        pins: Sequence[str],
        lease_seconds: float,
    ) -> None:
        self._store = store
        self._harness = harness
        self._limits = limits
        self._may_write = may_write
        self._stopping = stopping
        self._switch = switch
        self._pins = list(pins)
        self._lease_seconds = lease_seconds

    async def run(self, held: Held, turn: TurnStart | None) -> None:
        """Run ``turn`` (already started on ``held``'s session) and whatever follows."""
        claimed_at = time.monotonic()
        turns = 0
        try:
            while True:
                if not self._may_write():
                    await self._hand_back_fenced(held, turn)
                    return
                if turn is None:  # claimed with nothing left to start: give it back
                    held.releasing = True
                    await self._store.sessions_release(held.claim)
                    return
                finished = await self._run_and_finish(held, turn, turns + 1, claimed_at)
                if finished is None:
                    return  # parked: the lease is released, the slot is free
                turns += 1
                following = finished.next
                if following is None:
                    held.found_nothing = True
                    return
                if following.claim.session_id != held.claim.session_id:
                    held = self._switch(held, following.claim)
                    claimed_at = time.monotonic()
                    turns = 0
                held.releasing = False
                turn = following.turn
        except LeaseLost as exc:  # LeaseExpired too: the worker fenced itself
            held.lost = True
            record_lease_lost()
            log.warning(
                "session %s: lease lost, stopping its slot (%s)", held.claim.session_id, exc
            )
        except StoreError as exc:
            log.warning("session %s: store failed, giving it back (%s)", held.claim.session_id, exc)
            await self._give_back(held)

    async def _run_and_finish(
        self, held: Held, turn: TurnStart, nth: int, claimed_at: float
    ) -> FinishResult | None:
        """Run one turn and record how it ended; None when it freed the slot
        unfinished (parked on a question, or deferred for provider quota).

        The turn's span continues its producer's trace (the traceparent stored
        at enqueue), and every log line inside carries its session, turn and epoch.
        """
        claim = held.claim
        held.turn_id = turn.turn_id
        with (
            log_fields(session=str(claim.session_id), turn=str(turn.turn_id), epoch=claim.epoch),
            span(
                SPAN_TURN,
                parent=turn.traceparent,
                session_id=str(claim.session_id),
                turn_id=str(turn.turn_id),
                attempt=turn.attempts,
            ) as current,
        ):
            began = time.monotonic()
            outcome = await self._run_turn(held, turn)
            held.turn_id = None  # from here the finish (or park, or defer) write owns the turn
            if isinstance(outcome, TurnStatus):
                current.set_attribute("status", outcome)
                return None
            current.set_attribute("status", outcome.status)
            held.releasing = True  # finishing releases the lease when nothing is queued
            finished = await self._store.turns_finish(
                claim,
                turn_id=turn.turn_id,
                status=outcome.status,
                output=outcome.output,
                error=outcome.error,
                events=[(outcome.kind, _terminal_payload(outcome, turn))],
                # A worker that fenced itself (or stops) starts no next turn: it keeps
                # no lease and claims nothing, here as in the claimer. Read as the
                # finish is sent: it may have waited through an outage for a
                # connection, and the fence may have fallen meanwhile.
                release=Late(
                    lambda: not self._may_continue() or self._should_yield(nth, claimed_at)
                ),
                reason=outcome.reason,
                claim_next=Late(self._may_continue),
                pins=self._pins,
                lease_seconds=self._lease_seconds,
            )
            seconds = time.monotonic() - began
            record_turn_finished(outcome.status, seconds)
            log.info(
                "turn %s %s in %.3fs (attempt %d)",
                turn.turn_id,
                outcome.status,
                seconds,
                turn.attempts,
                extra={
                    "status": str(outcome.status),
                    "duration_s": round(seconds, 4),
                    "attempt": turn.attempts,
                },
            )
            following = finished.next
            if following is not None and following.turn is not None:
                record_turn_started(following.turn.queue_wait)
            failpoint("after_turn_finish")
            if finished.parent_id is not None:
                await self._report_to_parent(claim)
            return finished

    async def _report_to_parent(self, claim: Claim) -> None:
        """The session is a child: tell its parent the turn ended (``child.finished``,
        and a wake if it waits for it). Best effort here: a report that fails, or a
        worker that dies first, is left to the schedulers' sweep."""
        try:
            await self._store.children.children_report(child_id=claim.session_id)
        except StoreError as exc:
            log.warning("session %s: its parent is told later (%s)", claim.session_id, exc)

    def _may_continue(self) -> bool:
        """May this slot start another turn: not stopping, and not fenced."""
        return not self._stopping() and self._may_write()

    def _should_yield(self, turns: int, claimed_at: float) -> bool:
        """Give the session up (back to the end of the line) after this claim's
        share, so one long queue cannot starve other sessions."""
        return (
            turns >= self._limits.max_turns_per_claim
            or time.monotonic() - claimed_at >= self._limits.max_claim_seconds
        )

    async def _run_turn(self, held: Held, turn: TurnStart) -> Outcome | TurnStatus:
        """The turn's outcome; or the status it was left in when it freed the slot
        unfinished (parked on a question, or back to queued for quota)."""
        claim = held.claim
        control = held.control
        if control is not None and control.turn_id == turn.turn_id:
            return _stopped(control)
        steps = {}
        if turn.attempts > 1:
            steps = await self._store.steps_for_turn(claim, turn.turn_id)
            control = held.control  # a request that came during that read found no harness
            if control is not None and control.turn_id == turn.turn_id:
                return _stopped(control)
        ctx = TurnContext(
            store=self._store,
            claim=claim,
            turn_id=turn.turn_id,
            turn_input=turn.input,
            attempt=turn.attempts,
            steps=steps,
            may_write=self._may_write,
        )
        outcome = await self._outcome(held, turn, ctx)
        if isinstance(outcome, Outcome):
            await ctx.settle_open_steps()  # the turn ends: no step may stay started
        return outcome

    async def _outcome(self, held: Held, turn: TurnStart, ctx: TurnContext) -> Outcome | TurnStatus:
        """Run the harness under the turn's time limit; map how it ended."""
        claim = held.claim
        limit = turn.timeout_seconds or self._limits.turn_timeout
        deadline = asyncio.timeout(limit)
        held.in_harness = True
        try:
            async with deadline:
                output = await self._harness.run_turn(ctx)
            json.dumps(output)
        except Parked as parked:
            held.in_harness = False
            held.releasing = True
            requested = await self._store.turns_park(
                claim,
                turn_id=turn.turn_id,
                step_key=parked.step_key,
                digest=parked.digest,
                question=parked.question,
            )
            if requested is None:
                record_parked()
                log.info("turn %s parked on a question", turn.turn_id)
                return TurnStatus.PARKED
            held.releasing = False  # not parked: a cancel or interrupt came first
            return _stopped(requested)
        except Deferred as deferred:
            held.in_harness = False
            held.releasing = True
            requested = await self._store.turns_defer(
                claim,
                turn_id=turn.turn_id,
                scope=deferred.scope,
                wait_seconds=deferred.wait_seconds,
                waited_seconds=deferred.waited,
            )
            if requested is None:
                record_handed_back("quota")
                log.info("turn %s handed back: %s", turn.turn_id, deferred)
                return TurnStatus.QUEUED
            held.releasing = False  # not deferred: a cancel or interrupt came first
            return _stopped(requested)
        except Waiting as waiting:
            held.in_harness = False
            held.releasing = True
            requested = await self._store.waits.turns_wait(
                claim, turn_id=turn.turn_id, step_key=waiting.step_key
            )
            if requested is None:
                record_handed_back("wait")
                log.info("turn %s waits (%s)", turn.turn_id, waiting.step_key)
                return TurnStatus.QUEUED
            held.releasing = False  # not set aside: a cancel or interrupt came first
            return _stopped(requested)
        except asyncio.CancelledError:
            control = held.control
            if held.lost or control is None or control.turn_id != turn.turn_id:
                raise  # a drain or a lost lease: the worker decides what happens next
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return _stopped(control)
        except TimeoutError as exc:
            if not deadline.expired():
                return _failed(turn, exc)
            return Outcome(
                TurnStatus.INTERRUPTED,
                None,
                f"turn timed out after {limit:g}s",
                EventKind.TURN_INTERRUPTED,
                reason="timeout",
            )
        except TurnStopRequested as asked:  # a spawn refused: the stop was asked first
            return _asked_first(held, asked.request)
        except StoreError:  # LeaseLost and LeaseExpired among them
            raise
        except Exception as exc:
            if ctx.stop_asked is not None:  # the harness caught the refusal, then failed
                return _asked_first(held, ctx.stop_asked)
            return _failed(turn, exc)
        finally:
            held.in_harness = False
        if ctx.stop_asked is not None:  # the harness caught the refusal and went on
            return _asked_first(held, ctx.stop_asked)
        return Outcome(TurnStatus.SUCCEEDED, output, None, EventKind.TURN_COMPLETED)

    async def _hand_back_fenced(self, held: Held, turn: TurnStart | None) -> None:
        """The worker fenced itself (its leases went unrenewed for a whole lease)
        while this slot held ``held``: no harness runs for it any more. Its lease
        may be another worker's by now, and then the fenced release writes
        nothing; if it is still ours (a claim committed just as the fence fell)
        the session goes back at once, its started turn requeued, instead of
        waiting a lease for its expiry."""
        held.lost = True
        held.releasing = True
        record_lease_lost()
        sid = held.claim.session_id
        log.warning("session %s: worker fenced itself, handing the session back", sid)
        try:
            requeued = await self._store.sessions_release(
                held.claim, turn_id=None if turn is None else turn.turn_id, reason="fenced"
            )
        except LeaseLost:
            return
        except StoreError as exc:
            log.warning("session %s: left to lease expiry (%s)", sid, exc)
            return
        if requeued:
            record_handed_back("fenced")

    async def _give_back(self, held: Held) -> None:
        held.lost = True
        held.releasing = True
        try:
            if await self._store.sessions_release(held.claim, turn_id=held.turn_id, reason="error"):
                record_handed_back("error")
        except StoreError as exc:
            log.warning("session %s: left to lease expiry (%s)", held.claim.session_id, exc)


def _stopped(control: ControlRequest) -> Outcome:
    status = control.action.turn_status
    reason = control.reason or "operator"
    return Outcome(status, None, f"{status}: {reason}", control.action.event_kind, reason=reason)


def _asked_first(held: Held, control: ControlRequest) -> Outcome:
    """A write of the turn was refused because a cancel or an interrupt of it had
    committed first (``TurnStopRequested``): the turn ends as that request asks,
    as it would had the request reached the slot first (the lease keeper then
    finds it already known, and stops nothing more)."""
    log.info(
        "turn %s: %s requested before its write; ending it as asked",
        control.turn_id,
        control.action,
    )
    held.control = control
    return _stopped(control)


def _failed(turn: TurnStart, exc: Exception) -> Outcome:
    log.info("turn %s failed: %s", turn.turn_id, exc)
    error = f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]
    return Outcome(TurnStatus.FAILED, None, error, EventKind.TURN_FAILED)


def _terminal_payload(outcome: Outcome, turn: TurnStart) -> dict[str, Any]:
    payload: dict[str, Any] = {"attempt": turn.attempts, "status": outcome.status}
    if outcome.error is not None:
        payload["error"] = outcome.error
    if outcome.reason is not None:
        payload["reason"] = outcome.reason
    return payload
