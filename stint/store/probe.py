"""Measurement-only reads: what the load test, the benchmarks, the demo and the
fault tests observe from outside. No worker or client path uses these, so they
may be as expensive as a measurement needs (a VACUUM, pg_stat_statements)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import sql
from psycopg.types.json import Jsonb

from stint.store.config import StoreConfig
from stint.store.fetch import execute, fetch_all, fetch_one
from stint.store.models import TurnProgress, TurnTiming
from stint.store.pool import Pool
from stint.store.queries import numbered, query, statements
from stint.store.translate import guarded

__all__ = [
    "DelegationLevel",
    "DelegationPhases",
    "DelegationSample",
    "LoadSample",
    "PlanNode",
    "ProbeStore",
    "QueueAge",
    "StatementStat",
    "TableFootprint",
    "TurnOutcome",
]


@dataclass(frozen=True)
class PlanNode:
    """One node of a query plan: its type, the relation or index it reads, if any."""

    node_type: str
    relation: str | None
    index: str | None


_COMMENT = re.compile(r"--[^\n]*")
# Quoted literals, parameters, numbers, and the field of extract(field FROM ...),
# which PostgreSQL's grammar turns into a string constant.
_CONSTANT = re.compile(
    r"'(?:[^']|'')*'|\$\d+|\b\d+(?:\.\d+)?\b|(?<=extract\()\w+(?= FROM)", re.IGNORECASE
)


def _normalized(text: str) -> str:
    """A statement's text with comments dropped and every literal constant and
    parameter made ``?``: the same for the text Stint sends and the text
    pg_stat_statements stores for it (which has its constants replaced by $n)."""
    return _CONSTANT.sub("?", _COMMENT.sub("", text))


def _plan_nodes(plan: Mapping[str, Any]) -> Iterator[PlanNode]:
    yield PlanNode(plan["Node Type"], plan.get("Relation Name"), plan.get("Index Name"))
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


@dataclass(frozen=True)
class LoadSample:
    """Sessions running now, and worker connections open now."""

    running_sessions: int
    worker_connections: int


@dataclass(frozen=True)
class TableFootprint:
    """One table's rows (planner estimate) and bytes (heap, indexes, toast)."""

    name: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class DelegationSample:
    """Under a delegation's root now: descendants running, and sessions holding a
    slot although their join began (with a child running)."""

    running: int
    holding: int


@dataclass(frozen=True)
class DelegationLevel:
    """One level below a delegation's root: children spawned, ended, succeeded."""

    level: int
    spawned: int
    ended: int
    succeeded: int


@dataclass(frozen=True)
class DelegationPhases:
    """Seconds from a delegation's root enqueue: its spawns done, its descendants'
    first and last start and last end; then the root's tail to its finish."""

    spawned_s: float | None
    first_start_s: float | None
    last_start_s: float | None
    last_end_s: float | None
    root_tail_s: float | None


@dataclass(frozen=True)
class TurnOutcome:
    """A turn's status, and its enqueue-to-finish seconds once finished."""

    status: str
    finished: bool
    seconds: float | None


@dataclass(frozen=True)
class _Count:
    count: int


@dataclass(frozen=True)
class _Pid:
    pid: int


@dataclass(frozen=True)
class _BackendKind:
    pid: int
    kind: str


@dataclass(frozen=True)
class _Seconds:
    seconds: float


@dataclass(frozen=True)
class StatementStat:
    """One statement's calls and mean execution time since the last reset."""

    query: str
    calls: int
    mean_ms: float


@dataclass(frozen=True)
class QueueAge:
    """Ready sessions now, and how long the oldest has waited (None: none ready)."""

    ready: int
    oldest_ready_age: float | None


@dataclass(frozen=True)
class _EventTime:
    session_id: UUID
    at: float


@dataclass(frozen=True)
class _Lease:
    session_id: UUID
    epoch: int


@dataclass(frozen=True)
class _Session:
    session_id: UUID


@dataclass(frozen=True)
class _LoggedEvent:
    session_id: UUID
    seq: int
    kind: str


@dataclass(frozen=True)
class _Connections:
    name: str
    count: int


class ProbeStore:
    """Reads for measurements; one method per query."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def turns_progress(self) -> TurnProgress:
        """Finished and total turns, and sessions running now."""
        async with guarded("turns_progress", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, TurnProgress, "turns_progress")

    async def turns_timings(self) -> list[TurnTiming]:
        """Audit timings of every finished turn, oldest finish first."""
        async with guarded("turns_timings", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, TurnTiming, "turns_timings")

    async def statements_reset(self) -> None:
        """Start counting statements (pg_stat_statements must be preloaded)."""
        async with guarded("statements_reset", self._config), self._pool.connection() as conn:
            await execute(conn, "statements_enable")
            await execute(conn, "statements_reset")

    async def statements_calls(self, *, excluding: Sequence[str] = ()) -> int:
        """Statements run in this database since the reset, not counting the
        named store statements (a caller's own polling)."""
        excluded = {_normalized(numbered(name).text) for name in excluding}
        rows = await self._statements()
        return sum(r.calls for r in rows if _normalized(r.query) not in excluded)

    async def _statements(self) -> list[StatementStat]:
        async with guarded("statements_all", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, StatementStat, "statements_all")

    async def load_sample(self) -> LoadSample:
        async with guarded("load_sample", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, LoadSample, "load_sample")

    async def workers_running(self) -> int:
        async with guarded("workers_running", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "workers_running")).count

    async def table_footprint(self) -> list[TableFootprint]:
        """Each table's size, after VACUUM (ANALYZE) brought the estimates up to date."""
        async with guarded("table_footprint", self._config), self._pool.connection() as conn:
            await execute(conn, "vacuum_analyze")
            return await fetch_all(conn, TableFootprint, "table_footprint")

    async def event_times(self, *, kind: str) -> dict[UUID, float]:
        """When (database clock, epoch seconds) each session got an event of ``kind``."""
        async with guarded("event_times", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _EventTime, "event_times", kind=kind)
        return {r.session_id: r.at for r in rows}

    async def sessions_held_by(self, *, owner: str) -> dict[UUID, int]:
        """The leases ``owner`` holds now: session id to epoch."""
        async with guarded("sessions_held_by", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Lease, "sessions_held_by", owner=owner)
        return {r.session_id: r.epoch for r in rows}

    async def sessions_in_flight(self) -> list[UUID]:
        """Sessions with unfinished turns."""
        async with guarded("sessions_in_flight", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Session, "sessions_in_flight")
        return [r.session_id for r in rows]

    async def sessions_owned_since(self, held: dict[UUID, int]) -> set[UUID]:
        """Which of these leases are still held under the same epoch."""
        async with guarded("sessions_owned_since", self._config), self._pool.connection() as conn:
            rows = await fetch_all(
                conn,
                _Session,
                "sessions_owned_since",
                session_ids=list(held),
                epochs=list(held.values()),
            )
        return {r.session_id for r in rows}

    async def event_logs(self) -> dict[UUID, list[tuple[int, str]]]:
        """Every session's event log as (seq, kind) pairs, in seq order."""
        async with guarded("event_logs", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _LoggedEvent, "event_logs")
        logs: dict[UUID, list[tuple[int, str]]] = {}
        for row in rows:
            logs.setdefault(row.session_id, []).append((row.seq, row.kind))
        return logs

    async def connections_by_application(self, *, prefix: str) -> dict[str, int]:
        """Connections open now per application_name starting with ``prefix``."""
        async with guarded("connections", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Connections, "connections_by_application", prefix=prefix)
        return {r.name: r.count for r in rows}

    async def backend_pids(self, *, application: str) -> list[int]:
        """Server process ids of this database's connections named ``application``."""
        async with guarded("backend_pids", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Pid, "backend_pids", application=application)
        return [r.pid for r in rows]

    async def backend_kinds(self) -> dict[int, str]:
        """Each server process of this database (and each background process) by pid:
        its application_name, or its backend_type when it has none."""
        async with guarded("backend_kinds", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _BackendKind, "backend_kinds")
        return {r.pid: r.kind for r in rows}

    async def turns_finished_after(self, moment: float) -> int:
        """Turns finished after ``moment`` (epoch seconds, database clock)."""
        async with guarded("turns_finished_after", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "turns_finished_after", after=moment)).count

    async def plan(self, name: str, params: Mapping[str, Any]) -> list[PlanNode]:
        """Every node of the plan PostgreSQL chooses for statement ``name`` with
        these parameters (EXPLAIN without ANALYZE: nothing runs, nothing is written)."""
        statement = sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(query(name))
        async with guarded(f"plan {name}", self._config), self._pool.connection() as conn:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
        assert row is not None
        return list(_plan_nodes(row[0][0]["Plan"]))

    async def statements_mean(self, names: Sequence[str]) -> dict[str, StatementStat]:
        """pg_stat_statements' figures for these named store statements, by name
        (absent: not called since the reset)."""
        wanted = {_normalized(numbered(name).text): name for name in names}
        rows = await self._statements()
        return {wanted[key]: r for r in rows if (key := _normalized(r.query)) in wanted}

    async def statements_by_name(self) -> dict[str, StatementStat]:
        """pg_stat_statements' figures for every statement since the reset, keyed by
        the store statement's name where one matches, else by the text's first words
        (BEGIN, COMMIT, LISTEN ...)."""
        known = {_normalized(numbered(name).text): name for name in statements()}
        named: dict[str, StatementStat] = {}
        for row in await self._statements():
            key = known.get(_normalized(row.query)) or " ".join(row.query.split())[:40]
            if key in named:  # two texts of one statement (a literal varied): merge
                earlier = named[key]
                calls = earlier.calls + row.calls
                mean = (earlier.mean_ms * earlier.calls + row.mean_ms * row.calls) / max(calls, 1)
                row = StatementStat(row.query, calls, mean)
            named[key] = row
        return named

    async def queue_age(self) -> QueueAge:
        async with guarded("queue_age", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, QueueAge, "queue_age")

    async def table_sizes(self) -> list[TableFootprint]:
        """Each table's size now (no VACUUM: a sample taken while work runs)."""
        async with guarded("table_sizes", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, TableFootprint, "table_sizes")

    async def sessions_seed_parked(self, count: int) -> int:
        """``count`` sessions parked on a question, written directly (a fixture)."""
        async with guarded("sessions_seed_parked", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "sessions_seed_parked", count=count)).count

    async def sessions_seed_ready(self, count: int, turn_input: Mapping[str, Any]) -> int:
        """``count`` sessions with one queued turn each, written directly (a backlog)."""
        params = {"count": count, "input": Jsonb(dict(turn_input))}
        async with guarded("sessions_seed_ready", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "sessions_seed_ready", **params)).count

    async def quota_waits(self) -> tuple[list[float], list[float]]:
        """Seconds model calls waited for quota in their slots (those that waited),
        and the not-before distance of each turn handed back for quota."""
        async with guarded("quota_waits", self._config), self._pool.connection() as conn:
            in_place = await fetch_all(conn, _Seconds, "quota_waits_in_place")
            deferred = await fetch_all(conn, _Seconds, "quota_deferral_waits")
        return [r.seconds for r in in_place], [r.seconds for r in deferred]

    async def turns_pruned(self) -> int:
        async with guarded("turns_pruned", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Count, "turns_pruned")).count

    async def delegation_sample(self, *, root: UUID) -> DelegationSample:
        async with guarded("delegation_sample", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, DelegationSample, "delegation_sample", root=root)

    async def delegation_levels(self, *, root: UUID) -> list[DelegationLevel]:
        """The tree below ``root``, level by level (the first level first)."""
        async with guarded("delegation_levels", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, DelegationLevel, "delegation_levels", root=root)

    async def delegation_phases(self, *, root: UUID, turn_id: UUID) -> DelegationPhases:
        async with guarded("delegation_phases", self._config), self._pool.connection() as conn:
            return await fetch_one(
                conn, DelegationPhases, "delegation_phases", root=root, turn_id=turn_id
            )

    async def turn_outcome(self, *, turn_id: UUID) -> TurnOutcome:
        async with guarded("turn_outcome", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, TurnOutcome, "turn_outcome", turn_id=turn_id)
