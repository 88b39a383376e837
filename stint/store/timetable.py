"""When a schedule's ticks fall, and which of them a scheduler runs now.

Pure arithmetic on times the database clock gave (no I/O, no clock of its
own), shared by every door that creates or resumes a schedule (to show and
store ``next_run_at``) and by the workers' scheduler (to find the ticks due).

A timetable is a cron expression (5 fields, or 6 with seconds first, read by
``cronsim`` in the schedule's time zone, daylight-saving changes included) or
an interval (ticks at ``anchor + k x interval``). Catch-up after downtime: a
tick at most ``grace`` seconds late is on time and runs; older ticks are missed,
and only the most recent ``catch_up`` of them run (docs/design.md, "Schedules").
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from stint.store.errors import InvalidInput

__all__ = ["MAX_INTERVAL_SECONDS", "Due", "Timetable", "check_timezone"]

MIN_INTERVAL_SECONDS = 1.0
MAX_INTERVAL_SECONDS = 31_622_400.0  # a leap year: the table's CHECK
_MAX_CRON_CHARS = 200
_SCAN_LIMIT = 100_000  # cron ticks walked per catch-up at most (then the rest are skipped)


def check_timezone(name: str) -> ZoneInfo:
    """The IANA zone called ``name``; ``InvalidInput`` naming it otherwise."""
    if not name or len(name) > 100:
        raise InvalidInput("timezone must be an IANA name such as UTC or Europe/Paris")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(
            f"unknown timezone {name[:60]!r}: give an IANA name such as UTC or Europe/Paris"
        ) from None


@dataclass(frozen=True)
class Due:
    """The ticks to run now (oldest first), how many missed ticks are skipped, and the
    schedule's next tick after ``now``."""

    run: list[datetime]
    skipped: int
    next_run_at: datetime


@dataclass(frozen=True)
class Timetable:
    """A cron expression or an interval, in a time zone, anchored for intervals."""

    cron: str | None
    interval_seconds: float | None
    timezone: str
    anchor_at: datetime

    @classmethod
    def parse(
        cls, *, cron: str | None, every: float | None, timezone: str, anchor_at: datetime
    ) -> Timetable:
        """Check a schedule's timing as given at a door; nothing is written on refusal."""
        check_timezone(timezone)
        if (cron is None) == (every is None):
            raise InvalidInput("give either a cron expression or an interval, not both or none")
        if cron is not None:
            if not cron.strip() or len(cron) > _MAX_CRON_CHARS:
                raise InvalidInput(f"cron expression must be 1..{_MAX_CRON_CHARS} characters")
            cron = " ".join(cron.split())
            try:
                CronSim(cron, anchor_at.astimezone(UTC))
            except CronSimError as exc:
                raise InvalidInput(
                    f"bad cron expression {cron[:60]!r}: {exc} (5 fields: minute hour "
                    "day-of-month month day-of-week; or 6 with seconds first)"
                ) from None
        if every is not None and (
            not math.isfinite(every) or not MIN_INTERVAL_SECONDS <= every <= MAX_INTERVAL_SECONDS
        ):
            raise InvalidInput(
                f"interval must be {MIN_INTERVAL_SECONDS:g}..{MAX_INTERVAL_SECONDS:g} seconds"
            )
        table = cls(cron, every, timezone, anchor_at)
        table.next_after(anchor_at)  # one that never fires is refused here
        return table

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (UTC)."""
        if self.interval_seconds is not None:
            step = _micros(timedelta(seconds=self.interval_seconds))
            k = _micros(moment - self.anchor_at) // step + 1
            return self.anchor_at + timedelta(microseconds=k * step)
        assert self.cron is not None
        ticks = CronSim(self.cron, moment.astimezone(ZoneInfo(self.timezone)))
        try:
            return next(ticks).astimezone(UTC)
        except (StopIteration, CronSimError):
            raise InvalidInput(f"cron expression {self.cron!r} never fires again") from None

    def due(self, *, start: datetime, now: datetime, grace: float, catch_up: int) -> Due:
        """The ticks from ``start`` (the schedule's pending tick) up to ``now``."""
        if start > now:
            return Due([], 0, start)
        on_time_from = now - timedelta(seconds=grace)
        if self.interval_seconds is not None:
            return self._due_interval(start, now, on_time_from, catch_up)
        return self._due_cron(start, now, on_time_from, catch_up)

    def _due_interval(
        self, start: datetime, now: datetime, on_time_from: datetime, catch_up: int
    ) -> Due:
        assert self.interval_seconds is not None
        step = _micros(timedelta(seconds=self.interval_seconds))
        first = -(-_micros(start - self.anchor_at) // step)  # ceil: start is a tick
        last = _micros(now - self.anchor_at) // step
        on_time = max(first, -(-_micros(on_time_from - self.anchor_at) // step))
        caught = max(first, on_time - catch_up)
        run = [self.anchor_at + timedelta(microseconds=k * step) for k in range(caught, last + 1)]
        next_run = self.anchor_at + timedelta(microseconds=(last + 1) * step)
        return Due(run, caught - first, next_run)

    def _due_cron(
        self, start: datetime, now: datetime, on_time_from: datetime, catch_up: int
    ) -> Due:
        missed: deque[datetime] = deque(maxlen=catch_up)
        on_time: list[datetime] = []
        skipped = 0
        tick = start
        for _ in range(_SCAN_LIMIT):
            if tick > now:
                break
            if tick >= on_time_from:
                on_time.append(tick)
            else:
                if len(missed) == catch_up:
                    skipped += 1
                if catch_up:
                    missed.append(tick)
            tick = self.next_after(tick)
        else:
            # An outage longer than _SCAN_LIMIT ticks of a fast cron: every missed tick
            # is skipped (counted as those walked), the on-time ones still run.
            skipped += len(missed)
            tick = self.next_after(on_time_from - timedelta(microseconds=1))
            on_time = []
            while tick <= now:
                on_time.append(tick)
                tick = self.next_after(tick)
            return Due(on_time, skipped, tick)
        return Due([*missed, *on_time], skipped, tick)


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
