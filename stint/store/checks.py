"""The database half of Stint's invariant checks, as plain evidence.

The checker (``stint.ops.checks``, ``stint check``) combines this evidence with
the effect journals and decides pass or fail; the load test and the fault
tests run that same checker, so every run is judged the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from stint.store.fetch import execute, fetch_all, fetch_one
from stint.store.models import Row
from stint.store.pool import Pool
from stint.store.translate import translated
from stint.store.vocabulary import StepKind, StepStatus

__all__ = ["DatabaseEvidence", "StepRow", "collect_evidence"]


@dataclass(frozen=True)
class StepRow(Row):
    session_id: UUID
    turn_id: UUID
    step_key: str
    kind: StepKind
    status: StepStatus


@dataclass(frozen=True)
class _Gap:
    session_id: UUID
    last_event_seq: int
    events_pruned_through: int
    count: int
    min: int | None
    max: int | None


@dataclass(frozen=True)
class _Totals:
    sessions_with_events: int
    events: int


@dataclass(frozen=True)
class _TurnStatusCount:
    status: str
    count: int
    max_attempts: int


@dataclass(frozen=True)
class _Mismatch:
    what: str
    session_id: str
    detail: str


@dataclass(frozen=True)
class _Zombie:
    session_id: UUID
    seq: int
    epoch: int
    newer_epoch_before: int


@dataclass(frozen=True)
class _Attempts:
    session_id: UUID
    attempts: int


@dataclass(frozen=True)
class _KeptTurn:
    session_id: UUID
    turn_id: UUID | None


@dataclass(frozen=True)
class _StaleLease:
    session_id: UUID
    owner: str | None
    expired: bool
    owner_stopped: bool


@dataclass(frozen=True)
class _StrandedLease:
    session_id: UUID
    owner: str
    epoch: int
    queued_turns: int
    no_running_turn: bool
    since_s: float | None
    unrenewed_s: float | None
    expires_in_s: float


@dataclass(frozen=True)
class DatabaseEvidence:
    sessions_with_events: int
    events: int
    event_gaps: list[dict[str, object]]
    turns_by_status: dict[str, int]
    max_attempts: int
    steps: list[StepRow]
    identity_mismatches: list[dict[str, str]]
    stale_leases: list[dict[str, object]]
    # Live leases no slot uses (see checks_stranded_leases): a liveness defect.
    stranded_leases: list[dict[str, object]]
    zombie_writes: list[dict[str, object]]
    attempts: dict[UUID, int]
    # Sessions retention pruned turns from, with the turns they still have.
    kept_turns: dict[UUID, set[UUID]]
    # Schedules and webhooks (checks_automation.sql): ticks run twice or lost, events of
    # a subscribed kind without their outbox row, an event delivered under two ids.
    tick_duplicates: list[dict[str, object]] = field(default_factory=list)
    tick_turns_missing: list[dict[str, object]] = field(default_factory=list)
    outbox_missing: list[dict[str, object]] = field(default_factory=list)
    delivery_duplicates: list[dict[str, object]] = field(default_factory=list)
    automation_totals: dict[str, int] = field(default_factory=dict)


def _plain(row: Any) -> dict[str, Any]:
    """A row as JSON-ready evidence (ids as text)."""
    return {k: str(v) if isinstance(v, UUID) else v for k, v in asdict(row).items()}


async def collect_evidence(pool: Pool, *, stranded_grace: float = 5.0) -> DatabaseEvidence:
    """Read everything the invariant checks need, in one repeatable-read snapshot.
    A leased session without a running turn is stranded after ``stranded_grace``
    seconds."""
    with translated("collect_evidence"):
        async with pool.connection() as conn, conn.transaction():
            await execute(conn, "checks_snapshot")
            gaps = await fetch_all(conn, _Gap, "checks_event_gaps")
            totals = await fetch_one(conn, _Totals, "checks_event_totals")
            statuses = await fetch_all(conn, _TurnStatusCount, "checks_turn_statuses")
            steps = await fetch_all(conn, StepRow, "checks_steps")
            mismatches = await fetch_all(conn, _Mismatch, "checks_identity_mismatches")
            zombies = await fetch_all(conn, _Zombie, "checks_zombie_writes")
            attempts = await fetch_all(conn, _Attempts, "checks_attempts")
            stale = await fetch_all(conn, _StaleLease, "checks_stale_leases")
            stranded = await fetch_all(
                conn, _StrandedLease, "checks_stranded_leases", grace_seconds=stranded_grace
            )
            kept = await fetch_all(conn, _KeptTurn, "checks_turns_of_pruned_sessions")
            automation = await _automation_evidence(conn)
    return DatabaseEvidence(
        sessions_with_events=totals.sessions_with_events,
        events=totals.events,
        event_gaps=[_plain(g) for g in gaps],
        turns_by_status={s.status: s.count for s in statuses},
        max_attempts=max((s.max_attempts for s in statuses), default=0),
        steps=steps,
        identity_mismatches=[_plain(m) for m in mismatches],
        stale_leases=[_plain(s) for s in stale],
        stranded_leases=[_plain(s) for s in stranded],
        zombie_writes=[_plain(z) for z in zombies],
        attempts={a.session_id: a.attempts for a in attempts},
        kept_turns=_group(kept),
        **automation,
    )


@dataclass(frozen=True)
class _TickDuplicate:
    key: str
    turns: int


@dataclass(frozen=True)
class _TickTurnMissing:
    schedule_id: UUID
    tick_at: datetime
    turn_id: UUID | None


@dataclass(frozen=True)
class _OutboxMissing:
    endpoint_id: UUID
    session_id: UUID
    seq: int
    kind: str


@dataclass(frozen=True)
class _DeliveryDuplicate:
    endpoint_id: UUID
    session_id: UUID
    seq: int
    deliveries: int


@dataclass(frozen=True)
class _AutomationTotals:
    ticks: int
    deliveries: int
    pending_deliveries: int


async def _automation_evidence(conn: AsyncConnection[TupleRow]) -> dict[str, Any]:
    """Schedules' and webhooks' evidence, in the caller's snapshot."""
    duplicates = await fetch_all(conn, _TickDuplicate, "checks_tick_duplicates")
    lost = await fetch_all(conn, _TickTurnMissing, "checks_tick_turns_missing")
    missing = await fetch_all(conn, _OutboxMissing, "checks_outbox_missing")
    twice = await fetch_all(conn, _DeliveryDuplicate, "checks_delivery_duplicates")
    totals = await fetch_one(conn, _AutomationTotals, "checks_automation_totals")
    return {
        "tick_duplicates": [_plain(d) for d in duplicates],
        "tick_turns_missing": [_plain(m) for m in lost],
        "outbox_missing": [_plain(m) for m in missing],
        "delivery_duplicates": [_plain(d) for d in twice],
        "automation_totals": asdict(totals),
    }


def _group(rows: list[_KeptTurn]) -> dict[UUID, set[UUID]]:
    grouped: dict[UUID, set[UUID]] = {}
    for row in rows:
        turns = grouped.setdefault(row.session_id, set())
        if row.turn_id is not None:
            turns.add(row.turn_id)
    return grouped
