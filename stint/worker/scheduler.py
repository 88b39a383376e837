"""The worker's scheduler: runs the ticks of due schedules, once each across the fleet.

Every worker runs one. A pass is one transaction (``ScheduleStore.run_due``): due
schedules are locked ``FOR UPDATE SKIP LOCKED``, so each is run by exactly one
worker at a time, and each tick is recorded under its primary key before its
turn is enqueued. Between passes the scheduler sleeps until the earliest
schedule is due, at most ``STINT_SCHEDULE_POLL_SECONDS``.

Each poll also sweeps children whose end their parent was not told (the child's
worker reports it right after the finish; one killed in between leaves it to
this sweep): ``ChildStore.children_report``, one child per transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from stint.store.children import ChildStore
from stint.store.errors import StoreError
from stint.store.schedules import SchedulePass, ScheduleStore
from stint.worker.failpoints import failpoint
from stint.worker.service import Service, Wakeup

__all__ = ["Scheduler", "SchedulerPlan"]

log = logging.getLogger("stint.worker.scheduler")

_BATCH = 16  # schedules locked per transaction
_SHORTEST_SLEEP = 0.05  # an overdue schedule another worker holds is not polled harder


@dataclass(frozen=True)
class SchedulerPlan:
    poll_seconds: float
    grace_seconds: float


class Scheduler(Service):
    """Runs ``run_once`` whenever a schedule may be due."""

    name = "scheduler"

    def __init__(
        self,
        *,
        store: ScheduleStore,
        plan: SchedulerPlan,
        worker: str,
        on_failure: Callable[[str, BaseException], None],
        children: ChildStore | None = None,
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._children = children
        self._plan = plan
        self._worker = worker
        self._wakeup = Wakeup()

    async def run_once(self) -> SchedulePass:
        """Passes until one finds fewer due schedules than a batch; their sum."""
        total = SchedulePass()
        while True:
            done = await self._store.run_due(
                worker=self._worker,
                grace_seconds=self._plan.grace_seconds,
                limit=_BATCH,
                before_commit=lambda: failpoint("schedule_before_commit"),
            )
            if done.schedules:
                failpoint("schedule_after_commit")
            total.schedules += done.schedules
            total.enqueued += done.enqueued
            total.refused += done.refused
            total.skipped += done.skipped
            total.ticks.extend(done.ticks)
            if done.schedules < _BATCH:
                break
        if total.ticks or total.skipped:
            log.info(
                "schedules: %d tick(s) enqueued, %d refused, %d missed and skipped",
                total.enqueued,
                total.refused,
                total.skipped,
            )
        return total

    async def sweep_children(self) -> int:
        """Report every ended child its parent has not heard of; how many."""
        reported = 0
        while self._children is not None:
            if await self._children.children_report() is None:
                break
            reported += 1
        if reported:
            log.info("children: %d end(s) reported to their parents by the sweep", reported)
        return reported

    async def run(self) -> None:
        poll = self._plan.poll_seconds
        while True:
            wait = poll
            try:
                await self.sweep_children()
            except StoreError as exc:
                log.warning("children sweep failed, trying again: %s", exc)
            try:
                due_in = await self._store.next_due_seconds()  # idle: one read per poll
                if due_in is not None and due_in <= 0:
                    await self.run_once()
                    due_in = await self._store.next_due_seconds()
                if due_in is not None:
                    wait = min(poll, max(_SHORTEST_SLEEP, due_in))
            except StoreError as exc:
                log.warning("schedule pass failed, trying again: %s", exc)
            await self._wakeup.sleep(wait)
