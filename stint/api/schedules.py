"""/v1/schedules: the tenant's schedules (a cron expression or an interval that enqueues
a turn per tick, on a session of the tenant or on a new session per tick).

The rules are the store's (``stint.store.schedules``, ``stint.store.timetable``), the
same as ``stint schedule``'s: a bad cron expression, interval or time zone is a 422
naming it, a name already used a 409, another tenant's session or schedule a 404; a
refusal writes nothing. Every worker runs the schedules; ``next_run_at`` is the next tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from stint.api.auth import Reader, Writer
from stint.api.problems import problem_responses
from stint.api.services import Services, services
from stint.api.sessions import within_input_limit
from stint.store.schedules import MAX_CATCH_UP, NewSchedule, Schedule, Tick
from stint.store.timetable import MAX_INTERVAL_SECONDS
from stint.store.vocabulary import BusyStrategy, TickOutcome

__all__ = ["router"]

router = APIRouter(prefix="/v1")

Svc = Annotated[Services, Depends(services)]

_READ = problem_responses(401, 404, 422, 503)
_WRITE = problem_responses(400, 401, 403, 404, 413, 415, 422, 503)


class ScheduleCreate(BaseModel):
    """A schedule of the caller's tenant: give ``cron`` or ``every_seconds``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._:/-]{1,200}$", description="unique per tenant")
    input: dict[str, JsonValue] = Field(description="each tick's turn input")
    cron: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="minute hour day-of-month month day-of-week (or 6 fields, seconds first), "
        "read in timezone",
    )
    every_seconds: float | None = Field(
        None, ge=1, le=MAX_INTERVAL_SECONDS, description="an interval instead of a cron"
    )
    timezone: str = Field("UTC", min_length=1, max_length=100, description="an IANA name")
    session_id: UUID | None = Field(
        None, strict=False, description="queue on this session of the tenant (default: new)"
    )
    pin: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._:/-]{1,200}$", description="each tick's new session's pin"
    )
    catch_up: int = Field(
        0, ge=0, le=MAX_CATCH_UP, description="missed ticks to run after downtime (0: skip)"
    )
    busy: BusyStrategy = Field(
        BusyStrategy.ENQUEUE,
        strict=False,
        description="with session_id, a turn in progress at a tick: queue behind it, skip "
        "the tick (reject), or interrupt it",
    )
    timeout_seconds: float | None = Field(None, ge=0.1, le=86_400)


class TickOut(BaseModel):
    tick_at: datetime
    outcome: TickOutcome
    session_id: UUID | None
    turn_id: UUID | None
    detail: str | None

    @classmethod
    def of(cls, tick: Tick) -> TickOut:
        return cls(
            tick_at=tick.tick_at,
            outcome=tick.outcome,
            session_id=tick.session_id,
            turn_id=tick.turn_id,
            detail=tick.detail,
        )


class ScheduleOut(BaseModel):
    id: UUID
    name: str
    cron: str | None
    every_seconds: float | None
    timezone: str
    session_id: UUID | None
    pin: str | None
    input: Any
    busy: BusyStrategy
    catch_up: int
    timeout_seconds: float | None
    paused: bool
    next_run_at: datetime | None = Field(description="the next tick; null while paused")
    last_tick_at: datetime | None
    ticks_enqueued: int
    ticks_skipped: int = Field(description="missed ticks not run (catch-up)")
    ticks_refused: int = Field(description="ticks refused by admission, or busy")
    created_at: datetime
    recent_ticks: list[TickOut] | None = Field(None, description="GET of one schedule only")

    @classmethod
    def of(cls, row: Schedule, ticks: list[Tick] | None = None) -> ScheduleOut:
        return cls(
            id=row.id,
            name=row.name,
            cron=row.cron,
            every_seconds=row.interval_seconds,
            timezone=row.timezone,
            session_id=row.session_id,
            pin=row.pin,
            input=row.input,
            busy=row.busy,
            catch_up=row.catch_up,
            timeout_seconds=row.timeout_seconds,
            paused=row.paused_at is not None,
            next_run_at=None if row.paused_at else row.next_run_at,
            last_tick_at=row.last_tick_at,
            ticks_enqueued=row.ticks_enqueued,
            ticks_skipped=row.ticks_skipped,
            ticks_refused=row.ticks_refused,
            created_at=row.created_at,
            recent_ticks=None if ticks is None else [TickOut.of(t) for t in ticks],
        )


class SchedulePage(BaseModel):
    schedules: list[ScheduleOut]


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleOut,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 503),
    summary="Create a schedule",
)
async def create_schedule(body: ScheduleCreate, caller: Writer, svc: Svc) -> ScheduleOut:
    within_input_limit(svc, body.input, "input")
    row = await svc.schedules.create(
        NewSchedule(
            tenant=caller.tenant,
            name=body.name,
            input=body.input,
            cron=body.cron,
            every=body.every_seconds,
            timezone=body.timezone,
            session_id=body.session_id,
            pin=body.pin,
            timeout_seconds=body.timeout_seconds,
            busy=body.busy,
            catch_up=body.catch_up,
        )
    )
    return ScheduleOut.of(row)


@router.get(
    "/schedules",
    response_model=SchedulePage,
    responses=problem_responses(401, 422, 503),
    summary="The tenant's schedules, by name",
)
async def list_schedules(caller: Reader, svc: Svc) -> SchedulePage:
    rows = await svc.schedules.list_all(tenant=caller.tenant)
    return SchedulePage(schedules=[ScheduleOut.of(row) for row in rows])


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=_READ,
    summary="A schedule, its next run and its latest ticks",
)
async def get_schedule(schedule_id: UUID, caller: Reader, svc: Svc) -> ScheduleOut:
    row = await svc.schedules.get(schedule_id=schedule_id, tenant=caller.tenant)
    ticks = await svc.schedules.recent_ticks(schedule_id=schedule_id)
    return ScheduleOut.of(row, ticks)


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=ScheduleOut,
    responses=_WRITE,
    summary="Pause a schedule (ticks while paused never run)",
)
async def pause_schedule(schedule_id: UUID, caller: Writer, svc: Svc) -> ScheduleOut:
    return ScheduleOut.of(await svc.schedules.pause(schedule_id=schedule_id, tenant=caller.tenant))


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=ScheduleOut,
    responses=_WRITE,
    summary="Resume a schedule from its next tick after now",
)
async def resume_schedule(schedule_id: UUID, caller: Writer, svc: Svc) -> ScheduleOut:
    row = await svc.schedules.resume(schedule_id=schedule_id, tenant=caller.tenant)
    return ScheduleOut.of(row)


@router.delete(
    "/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=_WRITE,
    summary="Delete a schedule (the turns it queued stay)",
)
async def delete_schedule(schedule_id: UUID, caller: Writer, svc: Svc) -> ScheduleOut:
    row = await svc.schedules.delete(schedule_id=schedule_id, tenant=caller.tenant)
    return ScheduleOut.of(row)
