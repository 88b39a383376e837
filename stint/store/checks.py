"""The database half of Stint's invariant checks, as plain evidence.

The checker (``worker.checks``, ``stint check``) combines this evidence with
the effect journals and decides pass or fail; the load test and the fault
tests run that same checker, so every run is judged the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from stint.store.pool import Pool
from stint.store.queries import query
from stint.store.translate import translated

__all__ = ["DatabaseEvidence", "StepRow", "collect_evidence"]


@dataclass(frozen=True)
class StepRow:
    session_id: UUID
    turn_id: UUID
    step_key: str
    kind: str
    status: str


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
    zombie_writes: list[dict[str, object]]
    attempts: dict[UUID, int]


async def collect_evidence(pool: Pool) -> DatabaseEvidence:
    """Read everything the invariant checks need, in one repeatable-read snapshot."""
    with translated("collect_evidence"):
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(query("checks_snapshot"))
            cur = await conn.execute(query("checks_event_gaps"))
            gaps = [
                {
                    "session_id": str(r[0]),
                    "last_event_seq": r[1],
                    "count": r[2],
                    "min": r[3],
                    "max": r[4],
                }
                for r in await cur.fetchall()
            ]
            cur = await conn.execute(query("checks_event_totals"))
            totals = await cur.fetchone()
            cur = await conn.execute(query("checks_turn_statuses"))
            statuses = await cur.fetchall()
            cur = await conn.execute(query("checks_steps"))
            steps = [StepRow(*r) for r in await cur.fetchall()]
            cur = await conn.execute(query("checks_identity_mismatches"))
            mismatches = [
                {"what": r[0], "session_id": r[1], "detail": r[2]} for r in await cur.fetchall()
            ]
            cur = await conn.execute(query("checks_zombie_writes"))
            zombies = [
                {"session_id": str(r[0]), "seq": r[1], "epoch": r[2], "newer_epoch_before": r[3]}
                for r in await cur.fetchall()
            ]
            cur = await conn.execute(query("checks_attempts"))
            attempts = {sid: n for sid, n in await cur.fetchall()}
            cur = await conn.execute(query("checks_stale_leases"))
            stale = [
                {"session_id": str(r[0]), "owner": r[1], "expired": r[2], "owner_stopped": r[3]}
                for r in await cur.fetchall()
            ]
    assert totals is not None
    return DatabaseEvidence(
        sessions_with_events=totals[0],
        events=totals[1],
        event_gaps=gaps,
        turns_by_status={s: c for s, c, _ in statuses},
        max_attempts=max((a for _, _, a in statuses), default=0),
        steps=steps,
        identity_mismatches=mismatches,
        stale_leases=stale,
        zombie_writes=zombies,
        attempts=attempts,
    )
