"""Schedules: turns enqueued on a cron expression or an interval, once per tick.

The doors (CLI, API) create, list, pause, resume and delete schedules here; the
workers' scheduler calls ``run_due``, one transaction that locks due schedules
``FOR UPDATE SKIP LOCKED``, records each tick it runs under the primary key
(schedule, tick time), enqueues the tick's turn with the enqueue's own
statements, and moves the schedule to its next tick. The commit makes all of it
visible at once; a worker that dies before it leaves nothing behind
(docs/design.md, "Schedules").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from stint.store.client import enqueue_in
from stint.store.config import StoreConfig
from stint.store.errors import (
    AdmissionRefused,
    InvalidInput,
    NameTaken,
    SessionBusy,
    UnknownSchedule,
    UnknownSession,
)
from stint.store.fetch import execute, fetch_all, fetch_one, fetch_optional
from stint.store.models import Row, SessionRecord
from stint.store.pool import Pool
from stint.store.timetable import Timetable
from stint.store.translate import guarded, translated
from stint.store.vocabulary import BusyStrategy, TickOutcome

__all__ = [
    "MAX_TICKS_PER_PASS",
    "NewSchedule",
    "Schedule",
    "SchedulePass",
    "ScheduleStore",
    "Tick",
    "check_schedule",
    "tick_key",
]

MAX_TICKS_PER_PASS = 100
"""Ticks one schedule runs in one transaction at most (a long catch-up goes on next pass)."""


@dataclass(frozen=True)
class Schedule(Row):
    """A schedule as every door shows it; ``next_run_at`` is its next tick."""

    id: UUID
    tenant: str | None
    name: str
    cron: str | None
    interval_seconds: float | None
    timezone: str
    anchor_at: datetime
    session_id: UUID | None
    pin: str | None
    input: dict[str, Any]
    timeout_seconds: float | None
    busy: BusyStrategy
    catch_up: int
    paused_at: datetime | None
    next_run_at: datetime
    last_tick_at: datetime | None
    ticks_enqueued: int
    ticks_skipped: int
    ticks_refused: int
    created_at: datetime
    updated_at: datetime

    @property
    def timetable(self) -> Timetable:
        return Timetable(self.cron, self.interval_seconds, self.timezone, self.anchor_at)


@dataclass(frozen=True)
class _Locked(Schedule):
    now: datetime = field(kw_only=True)


@dataclass(frozen=True)
class Tick(Row):
    """One tick a scheduler ran."""

    tick_at: datetime
    outcome: TickOutcome
    session_id: UUID | None
    turn_id: UUID | None
    detail: str | None
    worker: str
    created_at: datetime


@dataclass(frozen=True)
class NewSchedule:
    """A schedule as a door checked it (JSON, labels); the timetable is checked here."""

    tenant: str | None
    name: str
    input: dict[str, Any]
    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    session_id: UUID | None = None
    pin: str | None = None
    timeout_seconds: float | None = None
    busy: BusyStrategy = BusyStrategy.ENQUEUE
    catch_up: int = 0


_NAME = re.compile(r"[A-Za-z0-9._:/-]{1,200}")
_TENANT = re.compile(r"[A-Za-z0-9._-]{1,100}")
MAX_CATCH_UP = 1000
MAX_TIMEOUT_SECONDS = 86_400.0


def check_schedule(new: NewSchedule) -> None:
    """The rules every door applies besides the timetable's (the table's CHECKs, said
    in words); ``InvalidInput`` with one clear line otherwise."""
    if not _NAME.fullmatch(new.name):
        raise InvalidInput("name must be 1..200 letters, digits or . _ : / -")
    if new.tenant is not None and not _TENANT.fullmatch(new.tenant):
        raise InvalidInput("tenant must be 1..100 letters, digits or . _ -")
    if not 0 <= new.catch_up <= MAX_CATCH_UP:
        raise InvalidInput(f"catch-up must be 0..{MAX_CATCH_UP} missed ticks")
    if new.session_id is not None and new.pin is not None:
        raise InvalidInput("a pin is for the new session of each tick: not with a session")
    if new.timeout_seconds is not None and not (
        math.isfinite(new.timeout_seconds) and 0.1 <= new.timeout_seconds <= MAX_TIMEOUT_SECONDS
    ):
        raise InvalidInput(f"timeout must be 0.1..{MAX_TIMEOUT_SECONDS:g} seconds")
    if new.busy not in {strategy.value for strategy in BusyStrategy}:
        raise InvalidInput("busy must be enqueue, reject or interrupt")


@dataclass
class SchedulePass:
    """What one ``run_due`` did, for logs and tests."""

    schedules: int = 0
    enqueued: int = 0
    refused: int = 0
    skipped: int = 0
    ticks: list[tuple[UUID, datetime]] = field(default_factory=list)


@dataclass(frozen=True)
class _Now:
    now: datetime


@dataclass(frozen=True)
class _Seconds:
    seconds: float | None


@dataclass(frozen=True)
class _Claimed:
    tick_at: datetime


def tick_key(schedule_id: UUID, tick_at: datetime) -> str:
    """The turn's idempotency key (and a new session's creation key) for one tick."""
    return f"schedule:{schedule_id}:{tick_at.isoformat()}"


class ScheduleStore:
    """One method per door action, and the scheduler's pass."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def create(self, new: NewSchedule) -> Schedule:
        """Check the timetable and the target, then insert; on refusal nothing is written.
        Without a tenant (the operator's CLI) a target session's tenant is the schedule's."""
        check_schedule(new)
        async with (
            guarded("schedules_create", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            now = (await fetch_one(conn, _Now, "schedules_clock")).now
            table = Timetable.parse(
                cron=new.cron, every=new.every, timezone=new.timezone, anchor_at=now
            )
            tenant = new.tenant
            if new.session_id is not None:
                target = await fetch_optional(
                    conn, SessionRecord, "sessions_get", session_id=new.session_id, tenant=tenant
                )
                if target is None:
                    raise UnknownSession(session=new.session_id)
                tenant = target.tenant
            row = await fetch_optional(
                conn,
                Schedule,
                "schedules_insert",
                tenant=tenant,
                name=new.name,
                cron=table.cron,
                interval_seconds=table.interval_seconds,
                timezone=table.timezone,
                anchor_at=now,
                session_id=new.session_id,
                pin=new.pin,
                input=Jsonb(new.input),
                timeout_seconds=new.timeout_seconds,
                busy=BusyStrategy(new.busy).value,
                catch_up=new.catch_up,
                next_run_at=table.next_after(now),
            )
        if row is None:
            raise NameTaken(f"a schedule named {new.name!r} already exists; nothing was written")
        return row

    async def list_all(self, *, tenant: str | None, limit: int = 1000) -> list[Schedule]:
        async with guarded("schedules_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, Schedule, "schedules_list", tenant=tenant, limit=limit)

    async def get(self, *, schedule_id: UUID, tenant: str | None) -> Schedule:
        return await self._one("schedules_get", schedule_id, tenant)

    async def _one(self, name: str, schedule_id: UUID, tenant: str | None) -> Schedule:
        """One statement on one schedule of ``tenant`` (None: any); ``UnknownSchedule``
        when there is none."""
        async with guarded(name, self._config), self._pool.connection() as conn:
            row = await fetch_optional(conn, Schedule, name, schedule_id=schedule_id, tenant=tenant)
        if row is None:
            raise UnknownSchedule(schedule=schedule_id)
        return row

    async def recent_ticks(self, *, schedule_id: UUID, limit: int = 20) -> list[Tick]:
        async with guarded("schedule_ticks_recent", self._config), self._pool.connection() as c:
            return await fetch_all(
                c, Tick, "schedule_ticks_recent", schedule_id=schedule_id, limit=limit
            )

    async def pause(self, *, schedule_id: UUID, tenant: str | None) -> Schedule:
        return await self._one("schedules_pause", schedule_id, tenant)

    async def resume(self, *, schedule_id: UUID, tenant: str | None) -> Schedule:
        """Unpause; the next run is the first tick after now (paused ticks never run).
        Resuming a running schedule changes nothing."""
        async with (
            guarded("schedules_resume", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            locked = await fetch_optional(
                conn, _Locked, "schedules_lock", schedule_id=schedule_id, tenant=tenant
            )
            if locked is None:
                raise UnknownSchedule(schedule=schedule_id)
            if locked.paused_at is None:
                return locked
            return await fetch_one(
                conn,
                Schedule,
                "schedules_resume",
                schedule_id=schedule_id,
                next_run_at=locked.timetable.next_after(locked.now),
            )

    async def delete(self, *, schedule_id: UUID, tenant: str | None) -> Schedule:
        return await self._one("schedules_delete", schedule_id, tenant)

    async def next_due_seconds(self) -> float | None:
        """Seconds until the earliest unpaused schedule is due (None: there is none)."""
        async with guarded("schedules_next_due", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Seconds, "schedules_next_due")).seconds

    async def run_due(
        self,
        *,
        worker: str,
        grace_seconds: float,
        limit: int = 16,
        before_commit: Callable[[], None] | None = None,
    ) -> SchedulePass:
        """One pass: run the due ticks of up to ``limit`` schedules no other worker holds,
        in one transaction. ``before_commit`` (fault tests) runs just before the commit."""
        report = SchedulePass()
        async with (
            guarded("schedules_run_due", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            due = await fetch_all(conn, _Locked, "schedules_take_due", limit=limit)
            for schedule in due:
                await self._run_schedule(conn, schedule, worker, grace_seconds, report)
            report.schedules = len(due)
            if before_commit is not None and due:
                before_commit()
        return report

    async def _run_schedule(
        self,
        conn: AsyncConnection[TupleRow],
        schedule: _Locked,
        worker: str,
        grace_seconds: float,
        report: SchedulePass,
    ) -> None:
        plan = schedule.timetable.due(
            start=schedule.next_run_at,
            now=schedule.now,
            grace=grace_seconds,
            catch_up=schedule.catch_up,
        )
        run, next_run_at = plan.run, plan.next_run_at
        if len(run) > MAX_TICKS_PER_PASS:  # the rest next pass, from the first not run
            run, next_run_at = run[:MAX_TICKS_PER_PASS], run[MAX_TICKS_PER_PASS]
        enqueued = refused = 0
        for tick_at in run:
            claimed = await fetch_optional(
                conn,
                _Claimed,
                "schedule_ticks_insert",
                schedule_id=schedule.id,
                tick_at=tick_at,
                worker=worker,
            )
            if claimed is None:
                continue  # recorded already: never run a tick twice
            outcome = await self._enqueue_tick(conn, schedule, tick_at)
            report.ticks.append((schedule.id, tick_at))
            if outcome.outcome is TickOutcome.ENQUEUED:
                enqueued += 1
            else:
                refused += 1
            await execute(
                conn,
                "schedule_ticks_record",
                schedule_id=schedule.id,
                tick_at=tick_at,
                outcome=outcome.outcome.value,
                session_id=outcome.session_id,
                turn_id=outcome.turn_id,
                detail=outcome.detail,
            )
        await execute(
            conn,
            "schedules_advance",
            schedule_id=schedule.id,
            next_run_at=next_run_at,
            last_tick_at=run[-1] if run else None,
            enqueued=enqueued,
            skipped=plan.skipped,
            refused=refused,
        )
        report.enqueued += enqueued
        report.refused += refused
        report.skipped += plan.skipped

    async def _enqueue_tick(
        self, conn: AsyncConnection[TupleRow], schedule: Schedule, tick_at: datetime
    ) -> _TickResult:
        """The tick's turn, in a savepoint: a refusal undoes only the turn, and is the
        tick's recorded outcome."""
        key = tick_key(schedule.id, tick_at)
        try:
            # translated: a value PostgreSQL refuses is this tick's refusal (InvalidInput),
            # not a failed pass that would stop every schedule behind this one.
            with translated("schedule_tick"):
                async with conn.transaction():
                    result = await enqueue_in(
                        conn,
                        self._config,
                        session_id=schedule.session_id,
                        idempotency_key=key,
                        turn_input=schedule.input,
                        tenant=schedule.tenant,
                        pin=schedule.pin,
                        timeout_seconds=schedule.timeout_seconds,
                        busy=schedule.busy,
                        session_key=key if schedule.session_id is None else None,
                    )
        except SessionBusy as exc:
            return _TickResult(TickOutcome.BUSY, schedule.session_id, None, exc.message)
        except (AdmissionRefused, InvalidInput) as exc:
            return _TickResult(TickOutcome.REFUSED, schedule.session_id, None, str(exc)[:500])
        return _TickResult(TickOutcome.ENQUEUED, result.session_id, result.turn_id, None)


@dataclass(frozen=True)
class _TickResult:
    outcome: TickOutcome
    session_id: UUID | None
    turn_id: UUID | None
    detail: str | None
