"""The turn context: what a harness may do, each step made durable.

Every non-deterministic step (tool call, model call) is recorded ``started``
before it runs and ``committed`` with its result after. On a retry the recorded
results are returned instead of running again; a step left ``started`` is
reconciled by its tool, or marked ``unknown`` and surfaced as an event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from stint.errors import StintError
from stint.store.children import NewChild, NewChildren
from stint.store.conversation import MessageWindow
from stint.store.errors import LeaseLost, TurnStopRequested
from stint.store.models import Claim, ControlRequest, StepRecord
from stint.store.quotas import Grant
from stint.store.vocabulary import EventKind, StepKind, StepStatus, WaitKind
from stint.store.waits import WaitUntil
from stint.worker.failpoints import failpoint
from stint.worker.protocols import WorkerStore
from stint.worker.telemetry import SPAN_STEP, record_unknown_effect, span
from stint.worker.tools import Reconciled, Tool, ToolCall, Verdict

__all__ = [
    "Child",
    "ChildEnd",
    "Deferred",
    "LeaseExpired",
    "NondeterministicReplay",
    "Parked",
    "Signal",
    "TurnContext",
    "UnknownEffect",
    "Waiting",
    "request_digest",
]

HARNESS_EVENT_KINDS = frozenset(
    {
        EventKind.MESSAGE,
        EventKind.MESSAGE_DELTA,
        EventKind.MODEL_RETRIED,
        EventKind.HISTORY_TRUNCATED,
    }
)

# The events a step appends when it is recorded started, and when it returns.
_STEP_EVENTS = {
    StepKind.TOOL: (EventKind.TOOL_CALLED, EventKind.TOOL_RETURNED),
    StepKind.MODEL: (EventKind.MODEL_CALLED, EventKind.MODEL_RETURNED),
}


class Parked(BaseException):
    """The turn waits for an answer: the runner parks it and frees the slot.

    A BaseException, so a harness's ``except Exception`` cannot swallow it.
    """

    def __init__(self, step_key: str, question: Any, digest: str) -> None:
        super().__init__(step_key)
        self.step_key = step_key
        self.question = question
        self.digest = digest


class Waiting(BaseException):
    """The turn waits (a timer, a signal, children): the runner sets it aside,
    queued until the wait can end, and frees the slot; when claimed again it
    replays, and the wait step returns its outcome once it has one.

    A BaseException, so a harness's ``except Exception`` cannot swallow it.
    """

    def __init__(self, step_key: str) -> None:
        super().__init__(step_key)
        self.step_key = step_key


@dataclass(frozen=True)
class Signal:
    """A signal a wait consumed: its name, JSON payload, id and when it was sent."""

    id: str
    name: str
    payload: Any
    sent_at: str


@dataclass(frozen=True)
class Child:
    """A child session ``ctx.spawn`` started, and its first turn."""

    id: UUID
    turn_id: UUID


@dataclass(frozen=True)
class ChildEnd:
    """How a joined child's turn ended: ``status`` None while it has not (a join
    that timed out, or waited for any); ``output`` or ``error`` as on the turn."""

    id: UUID
    status: str | None
    output: Any
    error: str | None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class Deferred(BaseException):
    """The turn cannot get provider quota soon: the runner hands it back to the
    queue until ``wait_seconds`` from now and frees the slot; when claimed
    again it replays, its committed steps returning their recorded results.

    A BaseException, so a harness's ``except Exception`` cannot swallow it.
    """

    def __init__(self, scope: str, wait_seconds: float, *, waited: float = 0.0) -> None:
        super().__init__(f"quota scope {scope!r}: capacity in {wait_seconds:.3f}s")
        self.scope = scope
        self.wait_seconds = wait_seconds
        self.waited = waited
        """Seconds the call had already waited in its slot before giving it up."""


class LeaseExpired(LeaseLost):
    """This worker could not renew its leases in time and fenced itself: the lease
    may still be ours in the database, but nothing more may be written under it."""


class UnknownEffect(StintError):
    """A step's effect may or may not have happened, and its tool cannot tell."""


class NondeterministicReplay(StintError):
    """A replayed step asked for something different than what was recorded."""


def request_digest(kind: str, name: str, request: Mapping[str, Any]) -> str:
    """What a step asked for, so a replay that asks for something else is caught."""
    canonical = json.dumps([kind, name, request], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _spawn_digest(
    turn_input: Mapping[str, Any], pin: str | None, timeout_seconds: float | None, on_cancel: str
) -> str:
    """One child's spawn request digest: the same whether ``spawn`` or ``spawn_many``
    made it, so either finds the other's steps on a replay."""
    request = {
        "input": dict(turn_input),
        "pin": pin,
        "timeout_seconds": timeout_seconds,
        "on_cancel": on_cancel,
    }
    return request_digest(StepKind.SPAWN, "spawn", request)


def _replayed_child(key: str, recorded: StepRecord, digest: str) -> Child:
    """The child a committed spawn step recorded; a different request is an error."""
    if recorded.kind is not StepKind.SPAWN or recorded.request_digest != digest:
        raise NondeterministicReplay(f"step {key!r} replayed with a different spawn")
    return Child(UUID(recorded.result["child_id"]), UUID(recorded.result["child_turn_id"]))


class TurnContext:
    """Handed to ``Harness.run_turn``; one per turn attempt."""

    def __init__(
        self,
        *,
        store: WorkerStore,
        claim: Claim,
        turn_id: UUID,
        turn_input: dict[str, Any],
        attempt: int,
        steps: dict[str, StepRecord],
        may_write: Callable[[], bool],
    ) -> None:
        self.session_id = claim.session_id
        self.turn_id = turn_id
        self.input = turn_input
        self.attempt = attempt
        self._store = store
        self._claim = claim
        self._steps = steps
        self._may_write = may_write
        # Steps this attempt recorded started (or found started) and has not yet
        # committed or marked unknown, with the tool's reconcile for each.
        self._open: dict[str, tuple[StepKind, str, Callable[[], Awaitable[Reconciled]]]] = {}
        self._at_step_end: dict[str, list[tuple[EventKind, Mapping[str, Any]]]] = {}
        self._waits = 0  # waits reached in this attempt: the default key of the next one
        self._spawns = 0  # spawns reached in this attempt: the default key of the next one
        self._stop_asked: ControlRequest | None = None

    @property
    def stop_asked(self) -> ControlRequest | None:
        """The cancel or interrupt of this turn a write was refused for
        (``TurnStopRequested``), if any: the runner ends the turn as it asks, even
        when the harness caught the error and went on."""
        return self._stop_asked

    async def emit(self, payload: Mapping[str, Any], *, kind: str = EventKind.MESSAGE) -> int:
        """Append an event to the session log; returns its seq."""
        if kind not in HARNESS_EVENT_KINDS:
            raise ValueError(f"a harness may emit {sorted(HARNESS_EVENT_KINDS)}, not {kind!r}")
        self._guard()
        return await self._store.events_append(
            self._claim, turn_id=self.turn_id, events=[(EventKind(kind), payload)]
        )

    async def emit_at_step_end(
        self, key: str, payload: Mapping[str, Any], *, kind: str = EventKind.MESSAGE
    ) -> None:
        """Append an event with the end of the open step ``key``: in the statement
        that commits the step (or marks it unknown), just before the step's own
        event, so a step body's last event costs no statement of its own. Nothing
        else of the turn is written between the body's end and that statement, so
        the log's order is the same as with ``emit``; a step that never ends (the
        turn cancelled, the lease lost) writes neither. Outside the open step
        ``key``, the event is appended at once, as by ``emit``."""
        if kind not in HARNESS_EVENT_KINDS:
            raise ValueError(f"a harness may emit {sorted(HARNESS_EVENT_KINDS)}, not {kind!r}")
        if key not in self._open:
            await self.emit(payload, kind=kind)
            return
        self._at_step_end.setdefault(key, []).append((EventKind(kind), payload))

    async def history(self, *, limit: int) -> MessageWindow:
        """The session's conversation before this turn: its newest ``limit`` messages,
        oldest first, and how many there are in all (the caller records any cut)."""
        return await self._store.conversation.messages_recent(
            session_id=self.session_id, turn_id=self.turn_id, limit=limit
        )

    async def remember(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Add this turn's messages to the session's conversation, under the lease.

        Idempotent per turn: a replay that writes them again adds nothing.
        Returns how many messages were new.
        """
        self._guard()
        return await self._store.conversation.messages_append(
            self._claim, turn_id=self.turn_id, messages=messages
        )

    async def call_tool(self, key: str, tool: Tool, args: Mapping[str, Any]) -> Any:
        """Run ``tool`` at most once for this step key, durably."""
        call = ToolCall(self.session_id, self.turn_id, key, args)
        return await self._step(
            key,
            StepKind.TOOL,
            tool.name,
            args,
            run=lambda: tool.run(call),
            reconcile=lambda: tool.reconcile(call),
        )

    async def call_model(
        self,
        key: str,
        model: Callable[[Mapping[str, Any]], Awaitable[Any]],
        request: Mapping[str, Any],
        *,
        name: str = "model",
    ) -> Any:
        """Call a model once per step key; its answer is recorded and replayed."""

        async def not_done() -> Reconciled:
            return Reconciled(Verdict.NOT_DONE)  # a model call has no effect to repeat

        return await self._step(
            key, StepKind.MODEL, name, request, run=lambda: model(request), reconcile=not_done
        )

    async def ask(self, key: str, question: Any) -> Any:
        """The answer to ``question`` once a human gave it (``stint answer``).

        Until then the turn parks: the session's lease and slot are released and
        an ``approval.requested`` event carries ``key`` and the question. When the
        answer arrives the turn replays from the start; committed steps return
        their recorded results, and this call returns the answer.
        """
        digest = request_digest(StepKind.ANSWER, "ask", {"question": question})
        recorded = self._steps.get(key)
        answered = recorded is not None and recorded.status is StepStatus.COMMITTED
        with span(
            SPAN_STEP, record_errors=False, step_key=key, kind=str(StepKind.ANSWER)
        ) as current:
            current.set_attribute("stint.step.replayed", answered)
            if recorded is not None and answered:
                if recorded.kind is not StepKind.ANSWER:
                    raise NondeterministicReplay(
                        f"step {key!r} is a {recorded.kind}, not a question"
                    )
                return recorded.result
            self._guard()
            current.set_attribute("stint.step.parked", True)
            raise Parked(key, question, digest)

    async def sleep(self, seconds: float, *, key: str | None = None) -> None:
        """Wait ``seconds`` (from when the turn first reaches this call, by the
        database clock) without holding a slot.

        A durable step: the turn is set aside, queued with its session ready at
        the deadline, and replays when claimed again; the replay finds the step
        over and goes on, so a worker's restart neither loses nor repeats the
        sleep. A cancel of the turn ends it. ``key`` names the step (default:
        ``wait:<n>``, the n-th wait of the turn).
        """
        if not seconds >= 0:
            raise ValueError(f"sleep needs seconds >= 0, not {seconds!r}")
        await self._wait(key, WaitKind.TIMER, {"seconds": seconds}, WaitUntil(seconds=seconds))

    async def sleep_until(self, at: datetime, *, key: str | None = None) -> None:
        """Wait until ``at`` (timezone-aware; the database clock decides), as ``sleep``."""
        if at.tzinfo is None:
            raise ValueError("sleep_until needs a timezone-aware datetime")
        await self._wait(key, WaitKind.TIMER, {"until": at.isoformat()}, WaitUntil(at=at))

    # A durable timeout (database clock, across workers): asyncio.timeout cannot outlive a slot.
    async def wait_for(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        key: str | None = None,
    ) -> Signal | None:
        """The next signal named ``name`` sent to this session (``stint signal``,
        ``POST /v1/sessions/{id}/signals/{name}``), or None after ``timeout``
        seconds (None: no timeout).

        A signal sent before the wait is kept and consumed by the first wait on
        its name; each signal is consumed by exactly one wait, in the statement
        that commits it. Until one comes the turn is set aside as ``sleep`` is.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"wait_for needs a timeout >= 0, not {timeout!r}")
        result = await self._wait(
            key,
            WaitKind.SIGNAL,
            {"name": name, "timeout": timeout},
            WaitUntil(seconds=timeout),
            name=name,
        )
        got = result.get("signal")
        if got is None:
            return None
        return Signal(str(got["id"]), str(got["name"]), got["payload"], str(got["sent_at"]))

    async def spawn(
        self,
        turn_input: Mapping[str, Any],
        *,
        pin: str | None = None,
        timeout_seconds: float | None = None,
        on_cancel: str = "cascade",
        key: str | None = None,
    ) -> Child:
        """Start a child session (this tenant, ``pin``) whose first turn is ``turn_input``.

        A durable step (key ``spawn:<n>`` by default): the child is created and the
        step committed in one statement, so a replay returns the same child, never a
        second one. ``on_cancel``: ``cascade`` (a cancel or an interrupt of this turn
        cancels or interrupts the child's unfinished turn) or ``abandon`` (the child
        runs on). Refused with ``ChildRefused`` (nothing written) past the tenant's
        ``max_depth``, ``max_fanout`` or ``max_sessions``. Once a cancel or an
        interrupt of this turn has committed, refused with ``TurnStopRequested``
        (nothing written): the turn ends as asked, whatever the harness does with it.
        """
        if on_cancel not in ("cascade", "abandon"):
            raise ValueError(f"on_cancel must be 'cascade' or 'abandon', not {on_cancel!r}")
        key = key if key is not None else f"spawn:{self._spawns}"
        self._spawns += 1
        digest = _spawn_digest(turn_input, pin, timeout_seconds, on_cancel)
        recorded = self._steps.get(key)
        with span(SPAN_STEP, step_key=key, kind=str(StepKind.SPAWN)) as current:
            current.set_attribute("stint.step.replayed", recorded is not None)
            if recorded is not None:
                return _replayed_child(key, recorded, digest)
            self._guard()
            try:
                spawned = await self._store.children.children_spawn(
                    self._claim,
                    turn_id=self.turn_id,
                    step_key=key,
                    digest=digest,
                    child=NewChild(dict(turn_input), pin, timeout_seconds, on_cancel),
                )
            except TurnStopRequested as asked:
                self._stop_asked = asked.request
                raise
            result = {
                "child_id": str(spawned.child_id),
                "child_turn_id": str(spawned.child_turn_id),
            }
            self._steps[key] = StepRecord(key, StepKind.SPAWN, StepStatus.COMMITTED, digest, result)
            failpoint("after_spawn")
            return Child(spawned.child_id, spawned.child_turn_id)

    async def spawn_many(
        self,
        inputs: Sequence[Mapping[str, Any]],
        *,
        pin: str | None = None,
        timeout_seconds: float | None = None,
        on_cancel: str = "cascade",
        key: str | None = None,
    ) -> list[Child]:
        """Start one child session per input, as ``spawn`` does for one, in ONE
        fenced statement: the children, their first turns and their spawn steps
        commit together, so N children cost one round trip and one commit.

        Each child is a step of its own, with the keys N ``spawn`` calls would
        take (``spawn:<n>`` ...; with ``key``: ``<key>:0``, ``<key>:1`` ...), so a
        replay finds the same N children, never more; a replay that finds some
        of them recorded (the code changed between attempts) spawns only the
        others. The limits judge the batch as a whole: past ``max_depth``, or past
        ``max_fanout`` with the turn's children so far, ``ChildRefused`` and
        nothing written. A cancel or an interrupt of this turn that has committed
        refuses the whole batch, as for ``spawn``.
        """
        if on_cancel not in ("cascade", "abandon"):
            raise ValueError(f"on_cancel must be 'cascade' or 'abandon', not {on_cancel!r}")
        if not inputs:
            return []
        first = self._spawns
        self._spawns += len(inputs)
        keys = [f"spawn:{first + i}" if key is None else f"{key}:{i}" for i in range(len(inputs))]
        digests = [_spawn_digest(i, pin, timeout_seconds, on_cancel) for i in inputs]
        found: dict[str, Child] = {
            k: _replayed_child(k, self._steps[k], d)
            for k, d in zip(keys, digests, strict=True)
            if k in self._steps
        }
        missing = [n for n, k in enumerate(keys) if k not in found]
        with span(SPAN_STEP, step_key=keys[0], kind=str(StepKind.SPAWN)) as current:
            current.set_attribute("stint.step.replayed", not missing)
            current.set_attribute("stint.spawn.count", len(keys))
            if missing:
                self._guard()
                try:
                    spawned = await self._store.children.children_spawn_many(
                        self._claim,
                        turn_id=self.turn_id,
                        children=NewChildren(
                            [keys[n] for n in missing],
                            [digests[n] for n in missing],
                            [dict(inputs[n]) for n in missing],
                            pin,
                            timeout_seconds,
                            on_cancel,
                        ),
                    )
                except TurnStopRequested as asked:
                    self._stop_asked = asked.request
                    raise
                for n, child in zip(missing, spawned, strict=True):
                    result = {
                        "child_id": str(child.child_id),
                        "child_turn_id": str(child.child_turn_id),
                    }
                    self._steps[keys[n]] = StepRecord(
                        keys[n], StepKind.SPAWN, StepStatus.COMMITTED, digests[n], result
                    )
                    found[keys[n]] = Child(child.child_id, child.child_turn_id)
                failpoint("after_spawn")
            return [found[k] for k in keys]

    # A durable timeout (database clock, across workers): asyncio.timeout cannot outlive a slot.
    async def join(
        self,
        children: Sequence[Child],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        wait: str = "all",
        key: str | None = None,
    ) -> list[ChildEnd]:
        """Wait until all (``wait="all"``) or any (``"any"``) of ``children`` ended, at
        most ``timeout`` seconds, without holding a slot (as ``sleep``); then each
        child's end in the order given. A failed child is a value here, not an error
        of this turn; a child not ended yet (any, or a timeout) has status None.
        """
        if wait not in ("all", "any"):
            raise ValueError(f"wait must be 'all' or 'any', not {wait!r}")
        if not children:
            return []
        ids = [child.id for child in children]
        result = await self._wait(
            key,
            WaitKind.CHILDREN,
            {"children": [str(i) for i in ids], "wait": wait, "timeout": timeout},
            WaitUntil(seconds=timeout),
            children=ids,
            wait_all=wait == "all",
        )
        ends = result.get("children") or []
        return [
            ChildEnd(UUID(end["child_id"]), end["status"], end["output"], end["error"])
            for end in ends
        ]

    async def _wait(
        self,
        key: str | None,
        kind: WaitKind,
        request: Mapping[str, Any],
        until: WaitUntil,
        *,
        name: str | None = None,
        children: list[UUID] | None = None,
        wait_all: bool | None = None,
    ) -> dict[str, Any]:
        """One durable wait step: its committed outcome, or ``Waiting`` until it has one."""
        key = key if key is not None else f"wait:{self._waits}"
        self._waits += 1
        digest = request_digest(StepKind.WAIT, kind, request)
        recorded = self._steps.get(key)
        with span(SPAN_STEP, record_errors=False, step_key=key, kind=str(StepKind.WAIT)) as current:
            current.set_attribute("stint.step.replayed", recorded is not None)
            if recorded is not None:
                if recorded.kind is not StepKind.WAIT or recorded.request_digest != digest:
                    raise NondeterministicReplay(f"step {key!r} replayed with a different wait")
                if recorded.status is StepStatus.COMMITTED:
                    return dict(recorded.result)
            else:
                self._guard()
                await self._store.waits.waits_begin(
                    self._claim,
                    turn_id=self.turn_id,
                    step_key=key,
                    digest=digest,
                    kind=kind,
                    until=until,
                    name=name,
                    children=children,
                    wait_all=wait_all,
                )
                self._steps[key] = StepRecord(key, StepKind.WAIT, StepStatus.STARTED, digest, None)
                failpoint("after_wait_begun")
            self._guard()
            result = await self._store.waits.waits_settle(
                self._claim, turn_id=self.turn_id, step_key=key
            )
            if result is not None:
                self._steps[key] = StepRecord(
                    key, StepKind.WAIT, StepStatus.COMMITTED, digest, result
                )
                failpoint("after_wait_settled")
                return dict(result)
            self._guard()
            current.set_attribute("stint.step.parked", True)
            raise Waiting(key)

    async def quota_reserve(self, scope: str, key: str, estimate: int) -> Grant:
        """Reserve one provider request and ``estimate`` tokens of ``scope``'s window.

        ``key`` names the request within the turn (its step and try); the
        reservation is keyed by it and this turn attempt, so a repeated reserve
        of the same request counts once, and a replay (a new attempt, a new
        request) counts anew while its predecessor's open reservation is
        settled unknown by the database.
        """
        self._guard()
        return await self._store.quotas.quota_reserve(
            self._claim,
            scope=scope,
            key=self._quota_key(key),
            turn_id=self.turn_id,
            estimate=estimate,
        )

    async def quota_settle(self, scope: str, key: str, actual: int | None) -> None:
        """The request ``key`` ended: ``actual`` tokens as the provider reported,
        or None when its usage cannot be known (a transport failure)."""
        await self._store.quotas.quota_settle(scope=scope, key=self._quota_key(key), actual=actual)

    def _quota_key(self, key: str) -> str:
        return f"{self.turn_id}:{key}@{self.attempt}"

    def _guard(self) -> None:
        if not self._may_write():
            raise LeaseExpired(f"session {self.session_id}: leases not renewed in time")

    async def _step(
        self,
        key: str,
        kind: StepKind,
        name: str,
        request: Mapping[str, Any],
        *,
        run: Callable[[], Awaitable[Any]],
        reconcile: Callable[[], Awaitable[Reconciled]],
    ) -> Any:
        """One durable step, in a span of its own (a model call's span nests inside)."""
        with span(SPAN_STEP, step_key=key, kind=str(kind), step_name=name) as current:
            result, replayed = await self._durable(key, kind, name, request, run, reconcile)
            current.set_attribute("stint.step.replayed", replayed)
            return result

    async def _durable(
        self,
        key: str,
        kind: StepKind,
        name: str,
        request: Mapping[str, Any],
        run: Callable[[], Awaitable[Any]],
        reconcile: Callable[[], Awaitable[Reconciled]],
    ) -> tuple[Any, bool]:
        """The step's result, and whether it came from the journal (a replay)."""
        digest = request_digest(kind, name, request)
        recorded = self._steps.get(key)
        called = (_STEP_EVENTS[kind][0], {"step_key": key, "name": name})
        if recorded is not None:
            if recorded.request_digest != digest:
                raise NondeterministicReplay(f"step {key!r} replayed with a different request")
            if recorded.status is StepStatus.COMMITTED:
                return recorded.result, True
            if recorded.status is StepStatus.UNKNOWN:
                raise UnknownEffect(f"step {key!r} has an unknown effect")
            self._open[key] = (kind, digest, reconcile)
            found = await reconcile()
            if found.verdict is Verdict.DONE:
                await self._finish(key, kind, digest, found.result, reconciled=True)
                return found.result, True
            if found.verdict is Verdict.UNKNOWN:
                await self._mark_unknown(key, "its tool cannot tell whether it ran")
                raise UnknownEffect(f"step {key!r} has an unknown effect")
        else:
            self._guard()
            await self._store.steps_start(
                self._claim,
                turn_id=self.turn_id,
                step_key=key,
                kind=kind,
                digest=digest,
                events=[called],
            )
            self._steps[key] = StepRecord(key, kind, StepStatus.STARTED, digest, None)
            self._open[key] = (kind, digest, reconcile)
            failpoint("after_step_started")
        self._guard()
        try:
            result = await run()
        except Exception as exc:
            await self._mark_unknown(key, f"{type(exc).__name__}: {exc}")
            raise
        failpoint("after_effect")
        await self._finish(key, kind, digest, result, reconciled=False)
        failpoint("after_step_commit")
        return result, False

    async def settle_open_steps(self) -> None:
        """The turn is ending without a retry: no step may stay ``started``.

        Each open step is reconciled by its tool: done → committed with what the
        tool found; otherwise → ``unknown`` with an ``effect.unknown`` event. A
        later attempt would have done the same, but a finished turn has none.
        """
        for key, (kind, digest, reconcile) in list(self._open.items()):
            found = await reconcile()
            if found.verdict is Verdict.DONE:
                await self._finish(key, kind, digest, found.result, reconciled=True)
            else:
                await self._mark_unknown(key, "the turn ended before this step committed")

    async def _finish(
        self, key: str, kind: StepKind, digest: str, result: Any, *, reconciled: bool
    ) -> None:
        self._guard()
        await self._store.steps_finish(
            self._claim,
            turn_id=self.turn_id,
            step_key=key,
            status=StepStatus.COMMITTED,
            result=result,
            events=[
                *self._at_step_end.pop(key, ()),
                (_STEP_EVENTS[kind][1], {"step_key": key, "reconciled": reconciled}),
            ],
        )
        self._steps[key] = StepRecord(key, kind, StepStatus.COMMITTED, digest, result)
        self._open.pop(key, None)

    async def _mark_unknown(self, key: str, reason: str) -> None:
        self._guard()
        await self._store.steps_finish(
            self._claim,
            turn_id=self.turn_id,
            step_key=key,
            status=StepStatus.UNKNOWN,
            result=None,
            events=[
                *self._at_step_end.pop(key, ()),
                (EventKind.EFFECT_UNKNOWN, {"step_key": key, "reason": reason}),
            ],
        )
        record_unknown_effect()
        self._open.pop(key, None)
