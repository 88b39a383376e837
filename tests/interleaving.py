"""Simulated processes whose transactions a test interleaves statement by statement.

Each ``Actor`` has a pool of one connection (so one backend, named by its
``application_name``) and runs the real store's methods in tasks whose context
carries the actor's gate (``stint.store.interleave``): before each statement
it sends, the actor stops until the test lets it go. A stopped actor may be in
the middle of a transaction, holding row locks; an actor let go may block in
PostgreSQL on another's lock. ``Interleaver.settle`` waits until every actor is
stopped at a gate, blocked on a lock, or done: the moment a test (or the race
model's scheduler) decides who goes next.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from stint.postgres.scratch import ScratchTarget
from stint.store.interleave import install_gate
from stint.store.pool import Pool, open_pool

__all__ = ["Actor", "Interleaver"]

T = TypeVar("T")

_POLL = 0.003
_SETTLE_WITHIN = 20.0


def _always(_: str) -> bool:
    return True


@dataclass(eq=False)
class Actor:
    """One simulated process (a worker, a client) with its own backend."""

    name: str
    pool: Pool
    pause: Callable[[str], bool] = _always
    waiting: str | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    _go: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def application_name(self) -> str:
        return f"race_{self.name}"

    async def _gate(self, statement: str) -> None:
        if not self.pause(statement):
            return
        self.waiting = statement
        try:
            await self._go.wait()
        finally:
            self._go.clear()
            self.waiting = None

    def start(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` as this actor: every statement it sends passes the gate."""
        context = contextvars.copy_context()
        context.run(install_gate, self._gate)
        task = asyncio.create_task(work, context=context)
        self.tasks.append(task)
        return task

    def go(self) -> str:
        """Let the stopped actor send the statement it stopped before; its name."""
        assert self.waiting is not None, f"{self.name} is not stopped at a gate"
        statement = self.waiting
        self._go.set()
        return statement

    @property
    def busy(self) -> bool:
        """Has a task that has not ended."""
        return any(not t.done() for t in self.tasks)


class Interleaver:
    """Makes actors on one test database and tells when they have all settled."""

    def __init__(self, db: ScratchTarget, observer: Pool) -> None:
        self._db = db
        self._observer = observer
        self.actors: list[Actor] = []

    async def actor(self, name: str, *, pause: Callable[[str], bool] = _always) -> Actor:
        pool = await open_pool(self._db.config, f"race_{name}", min_size=1, max_size=1)
        made = Actor(name, pool, pause)
        self.actors.append(made)
        return made

    async def close(self) -> None:
        for actor in self.actors:
            for task in actor.tasks:
                task.cancel()
            await asyncio.gather(*actor.tasks, return_exceptions=True)
            await actor.pool.close()

    async def blocked(self) -> set[str]:
        """The actors whose backend now waits for a lock another holds."""
        return set(await self._blockers())

    async def _blockers(self) -> dict[str, set[str]]:
        """Each actor waiting for a lock: the application names of its blockers."""
        async with self._observer.connection() as conn:
            cur = await conn.execute(
                "SELECT w.application_name, coalesce(b.application_name, '') "
                "FROM pg_stat_activity w "
                "CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker (pid) "
                "LEFT JOIN pg_stat_activity b ON b.pid = blocker.pid "
                "WHERE w.application_name LIKE 'race\\_%%'"
            )
            rows = await cur.fetchall()
        found: dict[str, set[str]] = {}
        for waiter, blocker in rows:
            found.setdefault(str(waiter), set()).add(str(blocker))
        return found

    async def settle(self) -> dict[str, str]:
        """Wait until every actor is stopped at a gate, blocked on a lock, or
        done; return each actor's state (the statement it waits before, or
        ``blocked``, or ``idle``).

        An actor counts as blocked only while what blocks it is frozen too: an
        actor stopped at a gate, or itself blocked by frozen ones. A lock whose
        holder is running (or has just committed) is about to be granted, and
        returning then would let the next move race with it."""
        deadline = time.monotonic() + _SETTLE_WITHIN
        while True:
            await asyncio.sleep(0)  # a task let go runs up to its next await first
            running = [a for a in self.actors if a.busy and a.waiting is None]
            blockers = await self._blockers() if running else {}
            frozen = {a.application_name for a in self.actors if a.waiting is not None}
            grew = True
            while grew:
                grew = False
                for actor in running:
                    name = actor.application_name
                    holders = blockers.get(name)
                    if name not in frozen and holders and holders <= frozen:
                        frozen.add(name)
                        grew = True
            if all(a.application_name in frozen for a in running):
                return {a.name: a.waiting or ("blocked" if a.busy else "idle") for a in self.actors}
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"actors did not settle within {_SETTLE_WITHIN}s: "
                    f"{[(a.name, a.waiting, a.busy) for a in self.actors]}; blockers {blockers}"
                )
            await asyncio.sleep(_POLL)

    async def until_waiting(self, actor: Actor, statement: str) -> None:
        """Wait until ``actor`` stops before ``statement``."""
        deadline = time.monotonic() + _SETTLE_WITHIN
        while actor.waiting != statement:
            if time.monotonic() > deadline or not actor.busy:
                raise AssertionError(f"{actor.name} never stopped before {statement}")
            await asyncio.sleep(_POLL)

    async def until_blocked(self, actor: Actor) -> None:
        """Wait until ``actor``'s backend waits for a lock."""
        deadline = time.monotonic() + _SETTLE_WITHIN
        while actor.application_name not in await self.blocked():
            if time.monotonic() > deadline or not actor.busy:
                raise AssertionError(f"{actor.name} never blocked on a lock")
            await asyncio.sleep(_POLL)
