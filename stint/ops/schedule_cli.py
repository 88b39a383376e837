"""``stint schedule``: turns enqueued on a cron expression or an interval.

Every worker runs the schedules (one tick, one turn, across the whole fleet);
these commands create, list, show, pause, resume and delete them. The rules
are the store's (``stint.store.schedules``, ``stint.store.timetable``), the
same as ``POST /v1/schedules``'s; a refusal writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from stint.config.settings import Settings, field_range
from stint.config.target import resolve_store_config
from stint.ops.inputs import UsageError, parse_object, parse_seconds, read_text
from stint.store.config import ROLE_CLI
from stint.store.pool import open_pool
from stint.store.schedules import (
    MAX_CATCH_UP,
    NewSchedule,
    Schedule,
    ScheduleStore,
    Tick,
    check_schedule,
)
from stint.store.timetable import MAX_INTERVAL_SECONDS, Timetable
from stint.store.vocabulary import BusyStrategy

__all__ = ["add_schedule_parser", "cmd_schedule", "schedule_json"]


def schedule_json(row: Schedule) -> dict[str, Any]:
    """One schedule as ``stint schedule`` prints it (next_run_at: its next tick)."""
    return {
        "schedule_id": str(row.id),
        "tenant": row.tenant,
        "name": row.name,
        "cron": row.cron,
        "every_seconds": row.interval_seconds,
        "timezone": row.timezone,
        "session_id": str(row.session_id) if row.session_id else None,
        "pin": row.pin,
        "input": row.input,
        "timeout_seconds": row.timeout_seconds,
        "busy": row.busy.value,
        "catch_up": row.catch_up,
        "paused": row.paused_at is not None,
        "paused_at": row.paused_at.isoformat() if row.paused_at else None,
        "next_run_at": None if row.paused_at else row.next_run_at.isoformat(),
        "last_tick_at": row.last_tick_at.isoformat() if row.last_tick_at else None,
        "ticks": {
            "enqueued": row.ticks_enqueued,
            "skipped": row.ticks_skipped,
            "refused": row.ticks_refused,
        },
        "created_at": row.created_at.isoformat(),
    }


def _tick_json(tick: Tick) -> dict[str, Any]:
    return {
        "tick_at": tick.tick_at.isoformat(),
        "outcome": tick.outcome.value,
        "session_id": str(tick.session_id) if tick.session_id else None,
        "turn_id": str(tick.turn_id) if tick.turn_id else None,
        "detail": tick.detail,
        "worker": tick.worker,
    }


def _id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UsageError(f"not a schedule id: {text[:60]!r}") from None


def _new(settings: Settings, args: argparse.Namespace) -> NewSchedule:
    turn_input = parse_object(
        read_text(args.input_json, sys.stdin.buffer),
        max_bytes=settings.max_input_bytes,
        max_depth=settings.max_input_depth,
    )
    every = None
    if args.every is not None:
        every = parse_seconds(args.every, low=1, high=MAX_INTERVAL_SECONDS, what="--every")
    timeout = None
    if args.timeout is not None:
        low, high = field_range("turn_timeout")
        timeout = parse_seconds(args.timeout, low=low, high=high, what="--timeout")
    session = None
    if args.session is not None:
        try:
            session = uuid.UUID(args.session)
        except ValueError:
            raise UsageError(f"not a session id: {args.session[:60]!r}") from None
    new = NewSchedule(
        tenant=args.tenant,
        name=args.name,
        input=turn_input,
        cron=args.cron,
        every=every,
        timezone=args.timezone,
        session_id=session,
        pin=args.pin,
        timeout_seconds=timeout,
        busy=BusyStrategy(args.busy),
        catch_up=args.catch_up,
    )
    # The store checks again against the database clock; this refuses bad input before
    # any connection is made (or an embedded database started).
    check_schedule(new)
    Timetable.parse(cron=new.cron, every=new.every, timezone=new.timezone, anchor_at=_now())
    return new


def _now() -> datetime:
    return datetime.now(UTC)


async def cmd_schedule(settings: Settings, args: argparse.Namespace) -> int:
    new = _new(settings, args) if args.action == "create" else None  # checked before I/O
    schedule_id = _id(args.schedule_id) if hasattr(args, "schedule_id") else None
    config = resolve_store_config(settings)
    pool = await open_pool(config, ROLE_CLI, min_size=1, max_size=1)
    try:
        store = ScheduleStore(config, pool)
        if new is not None:
            print(json.dumps(schedule_json(await store.create(new))))
        elif args.action == "list":
            for row in await store.list_all(tenant=args.tenant):
                print(json.dumps(schedule_json(row)))
        else:
            assert schedule_id is not None
            if args.action == "show":
                row = await store.get(schedule_id=schedule_id, tenant=None)
                ticks = await store.recent_ticks(schedule_id=schedule_id, limit=args.ticks)
                shown = {**schedule_json(row), "recent_ticks": [_tick_json(t) for t in ticks]}
                print(json.dumps(shown, indent=2))
            else:
                act = {"pause": store.pause, "resume": store.resume, "delete": store.delete}
                row = await act[args.action](schedule_id=schedule_id, tenant=None)
                shown = schedule_json(row)
                print(json.dumps({**shown, "deleted": True} if args.action == "delete" else shown))
    finally:
        await pool.close()
    return 0


def _catch_up(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if not 0 <= value <= MAX_CATCH_UP:
        raise argparse.ArgumentTypeError(f"must be 0..{MAX_CATCH_UP}")
    return value


def _tick_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be 0..1000")
    return value


def add_schedule_parser(sub: Any) -> None:
    """``stint schedule create|list|show|pause|resume|delete``."""
    p = sub.add_parser(
        "schedule",
        help="turns enqueued on a cron expression or an interval, once per tick",
        description="Schedules: every worker runs them, and each tick enqueues exactly one "
        "turn across the fleet, on a given session or on a new session per tick. A tick "
        "late by up to STINT_SCHEDULE_GRACE_SECONDS still runs; older ones (the fleet was "
        "down) are missed, and --catch-up N runs the newest N of them.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = actions.add_parser("create", help="a new schedule; prints it with its next run")
    c.add_argument("name", metavar="NAME", help="unique per tenant: letters, digits, . _ : / -")
    c.add_argument(
        "input_json",
        metavar="INPUT_JSON",
        help="each tick's turn input, a JSON object; - reads stdin",
    )
    when = c.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--cron",
        metavar="EXPR",
        help="minute hour day-of-month month day-of-week (or 6 fields, seconds first), "
        "read in --timezone",
    )
    when.add_argument("--every", metavar="SECONDS", help="an interval, 1..31622400 seconds")
    c.add_argument("--timezone", default="UTC", metavar="ZONE", help="IANA name (UTC)")
    target = c.add_mutually_exclusive_group()
    target.add_argument("--session", metavar="ID", help="queue on this session (default: new)")
    target.add_argument("--pin", metavar="P", help="each tick's new session gets this pin")
    c.add_argument(
        "--tenant", metavar="T", help="the schedule's tenant (with --session: the session's)"
    )
    c.add_argument(
        "--catch-up",
        type=_catch_up,
        default=0,
        metavar="N",
        help=f"missed ticks to run after downtime, newest first, 0..{MAX_CATCH_UP} "
        "(default 0: skip them)",
    )
    c.add_argument(
        "--busy",
        choices=[strategy.value for strategy in BusyStrategy],
        default="enqueue",
        help="with --session, if a turn is in progress at a tick: queue behind it (default), "
        "skip the tick, or interrupt the running turn",
    )
    c.add_argument("--timeout", metavar="S", help="interrupt each tick's turn after S seconds")
    q = actions.add_parser("list", help="schedules as JSON lines, with their next run")
    q.add_argument("--tenant", metavar="T", help="only this tenant's")
    q = actions.add_parser("show", help="one schedule and its latest ticks, as JSON")
    q.add_argument("schedule_id", metavar="ID")
    q.add_argument(
        "--ticks", type=_tick_count, default=20, metavar="N", help="latest ticks shown, 0..1000"
    )
    for name, what in (
        ("pause", "stop ticking (ticks while paused never run)"),
        ("resume", "tick again from the next tick after now"),
        ("delete", "delete the schedule and its ticks' record (its turns stay)"),
    ):
        q = actions.add_parser(name, help=what)
        q.add_argument("schedule_id", metavar="ID")
    p.set_defaults(run=cmd_schedule)
