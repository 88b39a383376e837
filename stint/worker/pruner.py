"""Retention's loop: prune what is older than its horizon, batch by batch.

``prune`` is one run: the events pass (the head of each log, up to turns
finished before the events horizon), the turns pass (turns finished before
the turns horizon, with their steps, messages and remaining events), idle
sessions with no turn left (unchanged since their horizon), worker rows,
ended dashboard sign-ins, then the journals in this process's workspace whose sessions have no
turn left. Each batch is its own short transaction, so a run never blocks
claims for long; a run stops when a batch comes back smaller than asked.

``Pruner`` runs it on a schedule inside a worker. Every worker tries once per
interval; one takes the database's share (``maintenance_take``), every one
sweeps its own workspace (workspaces need not be shared).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from stint.config.settings import Settings
from stint.store.errors import DatabaseError, StoreError
from stint.store.retention import Keyset, RetentionStore
from stint.worker.journal import EffectJournal
from stint.worker.service import Service, Wakeup

__all__ = ["PruneReport", "Pruner", "RetentionPlan", "prune"]

log = logging.getLogger("stint.worker.pruner")

_DAY = 86_400.0
_JOURNALS_PER_QUERY = 1000
_INSUFFICIENT_PRIVILEGE = "42501"


@dataclass(frozen=True)
class RetentionPlan:
    """Horizons in days (0 keeps for ever), rows per batch, seconds between runs."""

    events_days: float
    turns_days: float
    workers_days: float
    batch: int
    every_seconds: float
    idle_sessions_days: float = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPlan:
        return cls(
            events_days=settings.retain_events_days,
            turns_days=settings.retain_turns_days,
            workers_days=settings.retain_workers_days,
            batch=settings.prune_batch,
            every_seconds=settings.prune_interval,
            idle_sessions_days=settings.retain_idle_sessions_days,
        )


@dataclass
class PruneReport:
    """What one run removed, for logs, ``stint prune`` and the soak's figures."""

    database: bool = False
    events: int = 0
    turns: int = 0
    steps: int = 0
    messages: int = 0
    reservations: int = 0
    workers: int = 0
    sessions: int = 0
    dashboard_sessions: int = 0
    schedule_ticks: int = 0
    webhook_deliveries: int = 0
    journals: int = 0
    batches: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def prune(
    store: RetentionStore,
    plan: RetentionPlan,
    *,
    journals: EffectJournal | None,
    worker: str,
    every_seconds: float,
) -> PruneReport:
    """One run. ``every_seconds`` 0 always takes the database's share (the CLI);
    a scheduled worker passes its interval and skips it when another worker
    already took this interval's run."""
    report = PruneReport()
    started = time.monotonic()
    after = await store.maintenance_take(task="prune", worker=worker, every_seconds=every_seconds)
    if after is not None:
        report.database = True
        await _prune_database(store, plan, after, report)
    if journals is not None and plan.turns_days > 0:
        report.journals = await _sweep_journals(store, journals, plan.turns_days * _DAY)
    report.seconds = round(time.monotonic() - started, 3)
    return report


async def _prune_database(
    store: RetentionStore, plan: RetentionPlan, after: Keyset, report: PruneReport
) -> None:
    if plan.events_days > 0:
        while True:
            events = await store.prune_events(
                horizon_seconds=plan.events_days * _DAY, batch=plan.batch, after=after
            )
            report.batches += 1
            report.events += events.events
            if events.until is None or events.until_id is None or events.turns < plan.batch:
                break
            after = Keyset(events.until, events.until_id)
    if plan.turns_days > 0:
        while True:
            turns = await store.prune_turns(
                horizon_seconds=plan.turns_days * _DAY, batch=plan.batch
            )
            report.batches += 1
            report.turns += turns.turns
            report.events += turns.events
            report.steps += turns.steps
            report.messages += turns.messages
            report.reservations += turns.reservations
            if turns.turns < plan.batch:
                break
    if plan.idle_sessions_days > 0:
        report.sessions = await _in_batches(
            store.prune_idle_sessions,
            horizon_seconds=plan.idle_sessions_days * _DAY,
            batch=plan.batch,
        )
    if plan.workers_days > 0:
        report.workers = await store.prune_workers(horizon_seconds=plan.workers_days * _DAY)
    report.dashboard_sessions = await _in_batches(store.prune_dashboard_sessions, batch=plan.batch)
    await _prune_automation(store, plan, report)


async def _in_batches(
    prune_batch: Callable[..., Awaitable[int]], *, batch: int, **params: float
) -> int:
    """Run one batch statement until a batch comes back smaller than asked; the total."""
    removed = 0
    while True:
        done = await prune_batch(batch=batch, **params)
        removed += done
        if done < batch:
            return removed


async def _prune_automation(
    store: RetentionStore, plan: RetentionPlan, report: PruneReport
) -> None:
    """Schedule ticks go with the turns horizon (their turns do), webhook deliveries with
    the events horizon (their events do), batch by batch (``batches`` counts the history
    passes' batches only)."""
    passes = (
        (plan.turns_days, store.prune_schedule_ticks, "schedule_ticks"),
        (plan.events_days, store.prune_webhook_deliveries, "webhook_deliveries"),
    )
    for days, prune_batch, field in passes:
        if days > 0:
            removed = await _in_batches(prune_batch, horizon_seconds=days * _DAY, batch=plan.batch)
            setattr(report, field, getattr(report, field) + removed)


async def _sweep_journals(
    store: RetentionStore, journals: EffectJournal, quiet_seconds: float
) -> int:
    """Remove journals whose sessions have no turn left and that were quiet for
    the whole turns horizon (a journal written since is kept, whatever the
    database said a moment before). Only the quiet ones are asked about: the
    question costs the database a look-up per session, every prune, and a
    fleet's recent sessions are most of its journals."""
    removed = 0
    sessions = list(journals.quiet_sessions(quiet_seconds=quiet_seconds))
    for first in range(0, len(sessions), _JOURNALS_PER_QUERY):
        unused = await store.journals_unused(sessions[first : first + _JOURNALS_PER_QUERY])
        for session_id in unused:
            if journals.remove_if_quiet(session_id, quiet_seconds=quiet_seconds):
                removed += 1
    return removed


class Pruner(Service):
    """Runs ``prune`` every ``plan.every_seconds`` (the first run comes at a
    random point of the first interval, so workers started together spread out)."""

    name = "pruner"

    def __init__(
        self,
        *,
        store: RetentionStore,
        plan: RetentionPlan,
        journals: EffectJournal | None,
        worker: str,
        on_failure: Callable[[str, BaseException], None],
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._plan = plan
        self._journals = journals
        self._worker = worker
        self._wakeup = Wakeup()

    async def run_once(self) -> PruneReport:
        report = await prune(
            self._store,
            self._plan,
            journals=self._journals,
            worker=self._worker,
            every_seconds=self._plan.every_seconds,
        )
        if report.database or report.journals:
            log.info("pruned: %s", report.as_json())
        return report

    async def run(self) -> None:
        await self._wakeup.sleep(random.uniform(0, self._plan.every_seconds))
        while True:
            try:
                await self.run_once()
            except DatabaseError as exc:
                if exc.context.get("sqlstate") != _INSUFFICIENT_PRIVILEGE:
                    log.warning("prune failed, trying again next interval: %s", exc)
                else:  # a least-privilege app role: pruning is the owner's job
                    log.warning(
                        "retention off in this worker: its role may not delete history "
                        "(%s); run `stint prune` as the schema's owner on a schedule",
                        exc.context.get("server"),
                    )
                    return
            except StoreError as exc:
                log.warning("prune failed, trying again next interval: %s", exc)
            await self._wakeup.sleep(self._plan.every_seconds)
