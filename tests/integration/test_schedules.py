"""Schedules against real PostgreSQL: the doors' refusals write nothing, a tick is run
once however many schedulers race for it, catch-up after downtime, pause and resume."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.errors import InvalidInput, NameTaken, UnknownSchedule, UnknownSession
from stint.store.pool import Pool, open_pool
from stint.store.schedules import NewSchedule, ScheduleStore, tick_key
from stint.store.timetable import Timetable
from stint.store.vocabulary import AdmissionLimit, BusyStrategy
from tests.workers import count_rows, fetch, set_limits


def _every(seconds: float, **kw: object) -> NewSchedule:
    fields: dict[str, object] = {"tenant": "acme", "name": "nightly", "input": {"n": 1}}
    fields.update(kw)
    return NewSchedule(every=seconds, **fields)  # type: ignore[arg-type]


async def _backdate(pool: Pool, schedule_id: UUID, seconds: float) -> None:
    """Move a schedule's anchor and next run into the past, as if the fleet had been
    down that long (the timetable is unchanged: anchor + k x interval)."""
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE schedules SET anchor_at = anchor_at - make_interval(secs => %s), "
            "next_run_at = next_run_at - make_interval(secs => %s) WHERE id = %s",
            (seconds, seconds, schedule_id),
        )


@pytest.mark.parametrize(
    ("new", "message"),
    [
        (NewSchedule(tenant="a", name="x", input={}, cron="61 * * * *"), "bad cron expression"),
        (NewSchedule(tenant="a", name="x", input={}, cron="* * *"), "bad cron expression"),
        (
            NewSchedule(tenant="a", name="x", input={}, cron="0 0 30 2 *"),
            "bad cron expression",
        ),
        (
            NewSchedule(tenant="a", name="x", input={}, cron="* * * * *", timezone="Mars/Base"),
            "unknown timezone",
        ),
        (NewSchedule(tenant="a", name="x", input={}), "either a cron expression or an interval"),
        (
            NewSchedule(tenant="a", name="x", input={}, cron="* * * * *", every=5),
            "either a cron expression or an interval",
        ),
        (NewSchedule(tenant="a", name="x", input={}, every=0.5), "interval must be"),
        (NewSchedule(tenant="a", name="x", input={}, every=float("nan")), "interval must be"),
    ],
)
async def test_bad_timing_is_refused_and_nothing_is_written(
    db: ScratchTarget, pool: Pool, new: NewSchedule, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        await ScheduleStore(db.config, pool).create(new)
    assert await count_rows(pool, "schedules") == 0


async def test_a_target_session_must_exist_and_be_the_tenants(
    db: ScratchTarget, pool: Pool
) -> None:
    schedules = ScheduleStore(db.config, pool)
    theirs = await ClientStore(db.config, pool).sessions_create(tenant="other")
    with pytest.raises(UnknownSession):
        await schedules.create(_every(60, session_id=theirs))
    with pytest.raises(UnknownSession):
        await schedules.create(_every(60, session_id=UUID(int=7)))
    await schedules.create(_every(60))
    with pytest.raises(NameTaken, match="already exists"):
        await schedules.create(_every(30))
    assert await count_rows(pool, "schedules") == 1


async def test_next_run_follows_the_cron_in_its_time_zone(db: ScratchTarget, pool: Pool) -> None:
    made = await ScheduleStore(db.config, pool).create(
        NewSchedule(
            tenant="acme", name="paris", input={}, cron="0 9 * * *", timezone="Europe/Paris"
        )
    )
    assert made.anchor_at < made.next_run_at <= made.anchor_at + timedelta(days=1)
    paris = made.next_run_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (paris.hour, paris.minute, paris.second) == (9, 0, 0)


async def test_a_tick_enqueues_one_turn_on_a_new_session(db: ScratchTarget, pool: Pool) -> None:
    schedules = ScheduleStore(db.config, pool)
    made = await schedules.create(_every(60, pin="gpu"))
    await _backdate(pool, made.id, 60)
    done = await schedules.run_due(worker="w1", grace_seconds=30)
    assert done.enqueued == 1 and done.skipped == 0
    [(tick_at, turn_id, outcome)] = await fetch(
        pool, "SELECT tick_at, turn_id, outcome FROM schedule_ticks"
    )
    assert outcome == "enqueued"
    [(tenant, pin, key, turn_input)] = await fetch(
        pool,
        "SELECT s.tenant, s.pin, t.idempotency_key, t.input FROM turns t "
        "JOIN sessions s ON s.id = t.session_id WHERE t.id = %s",
        turn_id,
    )
    assert (tenant, pin, key, turn_input) == ("acme", "gpu", tick_key(made.id, tick_at), {"n": 1})
    after = await schedules.get(schedule_id=made.id, tenant="acme")
    assert after.next_run_at == tick_at + timedelta(seconds=60)
    assert (after.ticks_enqueued, after.last_tick_at) == (1, tick_at)
    assert (await schedules.run_due(worker="w1", grace_seconds=30)).schedules == 0


async def test_racing_schedulers_run_each_tick_once(db: ScratchTarget) -> None:
    """Eight schedulers, each on its own connection, race for the same due ticks of
    five schedules: every tick is recorded once and enqueued once."""
    pools = [await open_pool(db.config, ROLE_CLI, min_size=1, max_size=1) for _ in range(8)]
    try:
        schedules = ScheduleStore(db.config, pools[0])
        made = [await schedules.create(_every(1, name=f"s{i}", catch_up=1000)) for i in range(5)]
        for row in made:
            await _backdate(pools[0], row.id, 30)
        passes = await asyncio.gather(
            *(
                ScheduleStore(db.config, p).run_due(worker=f"w{i}", grace_seconds=3600)
                for i, p in enumerate(pools)
            )
        )
        ticks = [t for done in passes for t in done.ticks]
        assert len(ticks) == len(set(ticks))
        rows = await fetch(pools[0], "SELECT schedule_id, tick_at FROM schedule_ticks")
        assert sorted(rows) == sorted(ticks)
        turns = await fetch(pools[0], "SELECT count(*), count(DISTINCT idempotency_key) FROM turns")
        assert turns == [(len(rows), len(rows))]
        for row in made:
            per = sorted(t for s, t in rows if s == row.id)
            assert per == [per[0] + timedelta(seconds=k) for k in range(len(per))]
            assert len(per) >= 30
    finally:
        for p in pools:
            await p.close()


@pytest.mark.parametrize(("catch_up", "ran"), [(0, 1), (3, 4)])
async def test_missed_ticks_are_skipped_or_caught_up(
    db: ScratchTarget, pool: Pool, catch_up: int, ran: int
) -> None:
    """After 100 s of downtime, a 10 s schedule has 10 ticks due; with a grace of 5 s
    the latest is on time and the 9 before are missed: catch-up runs the newest N."""
    schedules = ScheduleStore(db.config, pool)
    made = await schedules.create(_every(10, catch_up=catch_up))
    await _backdate(pool, made.id, 102)  # 10 ticks due, the latest 2 s old
    done = await schedules.run_due(worker="w1", grace_seconds=5)
    assert (done.enqueued, done.skipped) == (ran, 10 - ran)
    ticks = [r[0] for r in await fetch(pool, "SELECT tick_at FROM schedule_ticks ORDER BY 1")]
    assert ticks == [ticks[-1] - timedelta(seconds=10 * k) for k in reversed(range(ran))]
    after = await schedules.get(schedule_id=made.id, tenant=None)
    assert (after.ticks_enqueued, after.ticks_skipped) == (ran, 10 - ran)


async def test_a_refused_tick_is_recorded_not_retried(db: ScratchTarget, pool: Pool) -> None:
    """One target's queue is full (refused by admission), the other has a turn in
    progress and its schedule says reject (busy): both ticks are recorded with that
    outcome, neither turn is written, and neither tick comes back."""
    client = ClientStore(db.config, pool)
    full = await client.sessions_create(tenant="acme")
    working = await client.sessions_create(tenant="acme")
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 2})
    for session, keys in ((full, ("a", "b")), (working, ("c",))):
        for key in keys:
            await client.turns_enqueue(
                session_id=session, idempotency_key=key, turn_input={}, tenant="acme"
            )
    schedules = ScheduleStore(db.config, pool)
    refused = await schedules.create(_every(60, session_id=full))
    busy = await schedules.create(_every(60, name="busy", session_id=working, busy="reject"))
    for row in (refused, busy):
        await _backdate(pool, row.id, 60)
    done = await schedules.run_due(worker="w1", grace_seconds=30)
    assert (done.enqueued, done.refused) == (0, 2)
    outcomes = dict(
        await fetch(
            pool,
            "SELECT s.name, t.outcome FROM schedule_ticks t "
            "JOIN schedules s ON s.id = t.schedule_id",
        )
    )
    assert outcomes == {"nightly": "refused", "busy": "busy"}
    assert await count_rows(pool, "turns") == 3  # the savepoint undid only the ticks' turns
    assert (await schedules.run_due(worker="w1", grace_seconds=30)).schedules == 0


async def test_pause_resume_and_delete(db: ScratchTarget, pool: Pool) -> None:
    schedules = ScheduleStore(db.config, pool)
    made = await schedules.create(_every(5, busy=BusyStrategy.ENQUEUE))
    paused = await schedules.pause(schedule_id=made.id, tenant="acme")
    assert paused.paused_at is not None
    await _backdate(pool, made.id, 60)
    assert (await schedules.run_due(worker="w1", grace_seconds=3600)).schedules == 0
    resumed = await schedules.resume(schedule_id=made.id, tenant="acme")
    assert resumed.paused_at is None
    [(now,)] = await fetch(pool, "SELECT now()")
    assert now < resumed.next_run_at <= now + timedelta(seconds=5)  # paused ticks never run
    with pytest.raises(UnknownSchedule):
        await schedules.pause(schedule_id=made.id, tenant="other")
    deleted = await schedules.delete(schedule_id=made.id, tenant="acme")
    assert deleted.id == made.id
    with pytest.raises(UnknownSchedule):
        await schedules.delete(schedule_id=made.id, tenant="acme")
    assert await count_rows(pool, "schedules") == 0


def test_interval_ticks_keep_their_phase() -> None:
    anchor = datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    table = Timetable.parse(cron=None, every=1, timezone="UTC", anchor_at=anchor)
    due = table.due(
        start=anchor + timedelta(seconds=1),
        now=anchor + timedelta(seconds=3, microseconds=1),
        grace=60,
        catch_up=0,
    )
    assert due.run == [anchor + timedelta(seconds=k) for k in (1, 2, 3)]
    assert due.next_run_at == anchor + timedelta(seconds=4)


async def test_a_tick_on_a_new_session_past_the_tenants_session_limit_is_refused(
    db: ScratchTarget, pool: Pool
) -> None:
    """A schedule that makes a session per tick is a door that creates sessions: past
    ``max_sessions`` its tick is recorded refused and no session is written."""
    await ClientStore(db.config, pool).sessions_create(tenant="acme")
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSIONS: 1}, tenant="acme")
    schedules = ScheduleStore(db.config, pool)
    made = await schedules.create(_every(60))
    await _backdate(pool, made.id, 60)
    done = await schedules.run_due(worker="w1", grace_seconds=30)
    assert (done.enqueued, done.refused) == (0, 1)
    [(outcome, detail)] = await fetch(pool, "SELECT outcome, detail FROM schedule_ticks")
    assert outcome == "refused"
    assert "max_sessions limit of 1 sessions reached for tenant acme" in detail
    assert (await count_rows(pool, "sessions"), await count_rows(pool, "turns")) == (1, 0)
