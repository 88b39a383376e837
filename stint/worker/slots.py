"""The sessions a worker holds, one per busy slot.

``Slots`` is the table the services share: the claimer fills it, each slot's
task runs one session's turns, the lease keeper renews what it holds and
cancels what it lost, the drain empties it. A finished slot wakes the claimer,
so a freed slot claims again at once when work is waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from stint.store.models import Claim, ControlRequest
from stint.worker.service import Wakeup

__all__ = ["Held", "Slots"]


@dataclass
class Held:
    """A session this worker holds: its lease, its slot task, its running turn."""

    claim: Claim
    task: asyncio.Task[None] | None = None
    turn_id: UUID | None = None
    in_harness: bool = False
    control: ControlRequest | None = None
    lost: bool = False
    # Set while a write that may give the lease up is in flight (finish, park,
    # hand-back): a renewal that no longer finds the session is then not a loss.
    releasing: bool = False
    # Set when the slot ends because its last finish claimed the next session in
    # the same statement and found none ready: a claim now would find none either
    # (whatever became ready since sent a NOTIFY), so the claimer is not woken.
    found_nothing: bool = False

    def stop_turn(self, control: ControlRequest) -> None:
        """An operator asked to stop a turn: cancel the harness if it runs that turn."""
        self.control = control
        if self.in_harness and self.turn_id == control.turn_id and self.task is not None:
            self.task.cancel()

    def lose(self) -> None:
        """The lease was taken: the slot stops without another write."""
        self.lost = True
        if self.task is not None:
            self.task.cancel()


class Slots:
    """At most ``capacity`` held sessions, each running in a task of its own."""

    def __init__(self, capacity: int, *, claim_wakeup: Wakeup) -> None:
        self.capacity = capacity
        self._held: dict[UUID, Held] = {}
        # The session each slot task holds now (a task moves on from session to session).
        self._by_task: dict[asyncio.Task[None], Held] = {}
        self._claim_wakeup = claim_wakeup
        # Set by a claimer woken with no slot free: the next slot to end wakes it,
        # whatever that slot found (the wake-up it could not act on was for a session
        # that may have become ready after that slot's last finish looked).
        self.claim_owed = False

    @property
    def free(self) -> int:
        return self.capacity - len(self._held)

    def holds(self, session_id: UUID) -> bool:
        return session_id in self._held

    def current(self, held: Held) -> bool:
        """Is this still the slot holding its session (not finished, not replaced)?"""
        return self._held.get(held.claim.session_id) is held

    def snapshot(self) -> list[Held]:
        return list(self._held.values())

    def running(self) -> list[Held]:
        """Held sessions whose slot task has not ended."""
        return [h for h in self._held.values() if h.task is not None and not h.task.done()]

    def start(self, claim: Claim, run: Callable[[Held], Coroutine[Any, Any, None]]) -> Held:
        """Hold ``claim`` and run ``run(held)`` in a new slot task."""
        held = Held(claim)
        self._held[claim.session_id] = held
        task = asyncio.create_task(run(held), name="slot")
        held.task = task
        self._by_task[task] = held
        task.add_done_callback(self._done)
        return held

    def switch(self, held: Held, claim: Claim) -> Held:
        """The slot running ``held`` moves on to ``claim`` (its session was given
        back, another was claimed in the same statement)."""
        self._forget(held)
        following = Held(claim, task=held.task)
        self._held[claim.session_id] = following
        if held.task is not None:
            self._by_task[held.task] = following
        return following

    def _forget(self, held: Held) -> None:
        if self.current(held):
            del self._held[held.claim.session_id]

    def _done(self, task: asyncio.Task[None]) -> None:
        held = self._by_task.pop(task, None)
        if held is not None:
            self._forget(held)
            if held.found_nothing and not self.claim_owed:
                return
        self._claim_wakeup.set()
