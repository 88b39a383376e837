"""Stint's invariant checks, written once: ``stint check``, the tests and the
load test all judge a run with these.

Each check carries its evidence, so a report shows *why* it passed or failed:
contiguous event cursors, no duplicate or orphan effect (journals against
steps), no lost or stuck turn, no lease left behind or stranded (held with no
running turn, or no longer renewed by its live owner), consistent identities.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from stint.store.checks import DatabaseEvidence, collect_evidence
from stint.store.pool import Pool
from stint.store.vocabulary import StepKind, StepStatus, TurnStatus
from stint.worker.journal import EffectJournal

__all__ = ["Check", "CheckReport", "run_checks"]

_LISTED = 20  # evidence lists are cut to this many examples


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    evidence: dict[str, Any]


@dataclass(frozen=True)
class CheckReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [asdict(c) for c in self.checks]}


def _journal_keys(journals: Path, db: DatabaseEvidence) -> tuple[Counter[tuple[str, str]], int]:
    """Each (session, step key) journalled, how often; and how many lines
    belonged to turns retention pruned (not counted: their steps are gone too)."""
    counts: Counter[tuple[str, str]] = Counter()
    pruned = 0
    journal = EffectJournal(journals)
    for session_id in sorted(journal.sessions()):
        kept = db.kept_turns.get(session_id)
        for entry in journal.entries(session_id):
            if kept is not None and UUID(str(entry.get("turn_id"))) not in kept:
                pruned += 1
                continue
            counts[(str(session_id), str(entry["key"]))] += 1
    return counts, pruned


def _effect_checks(db: DatabaseEvidence, journals: Path) -> list[Check]:
    found = journals.is_dir()
    lines, pruned = _journal_keys(journals, db) if found else (Counter(), 0)
    duplicates = [f"{s}/{k} x{n}" for (s, k), n in lines.items() if n > 1]
    tool_steps = {
        (str(r.session_id), r.step_key): r.status for r in db.steps if r.kind is StepKind.TOOL
    }
    step_counts = Counter((str(r.session_id), r.step_key) for r in db.steps)
    committed_without_line = [
        f"{s}/{k}"
        for (s, k), status in tool_steps.items()
        if status is StepStatus.COMMITTED and (s, k) not in lines
    ]
    line_without_step = [
        f"{s}/{k}"
        for (s, k) in lines
        if tool_steps.get((s, k)) not in (StepStatus.COMMITTED, StepStatus.UNKNOWN)
    ]
    tool_step_count = len(tool_steps)
    return [
        # A missing journals folder (wrong STINT_WORKSPACE, another machine) would
        # make every effect check below pass on no evidence at all: say so.
        Check(
            "journals_found",
            found or not tool_step_count,
            {"journals": str(journals), "exists": found, "tool_steps": tool_step_count},
        ),
        Check(
            "no_duplicate_effects",
            not duplicates and all(n == 1 for n in step_counts.values()),
            {
                "journal_lines": sum(lines.values()),
                "distinct_keys": len(lines),
                "duplicates": duplicates[:_LISTED],
            },
        ),
        Check(
            "effects_match_steps",
            not committed_without_line and not line_without_step,
            {
                "committed_tool_steps": sum(
                    1 for s in tool_steps.values() if s is StepStatus.COMMITTED
                ),
                "unknown_steps": sum(1 for s in tool_steps.values() if s is StepStatus.UNKNOWN),
                "committed_without_journal_line": committed_without_line[:_LISTED],
                "journal_line_without_step": line_without_step[:_LISTED],
                "journal_lines_of_pruned_turns": pruned,
            },
        ),
    ]


def _attempts_check(db: DatabaseEvidence, faults: Mapping[UUID, int]) -> Check:
    """Each retry needs a fault that touched the session (a crash, a lost lease...)."""
    over = {
        str(sid): {"attempts": n, "faults": faults.get(sid, 0)}
        for sid, n in db.attempts.items()
        if n - 1 > faults.get(sid, 0)
    }
    return Check(
        "attempts_accounted",
        not over,
        {
            "sessions": len(db.attempts),
            "faults": sum(faults.values()),
            "over": dict(list(over.items())[:_LISTED]),
        },
    )


def _turn_checks(db: DatabaseEvidence, *, quiesced: bool) -> list[Check]:
    # A parked turn waits for a human's answer: it is neither lost nor stuck.
    unfinished = {
        s: n
        for s, n in db.turns_by_status.items()
        if not TurnStatus(s).terminal and s != TurnStatus.PARKED
    }
    checks = [
        Check(
            "contiguous_event_cursors",
            not db.event_gaps,
            {
                "sessions": db.sessions_with_events,
                "events": db.events,
                "gaps": db.event_gaps[:_LISTED],
            },
        ),
        Check(
            "no_zombie_write",
            not db.zombie_writes,
            {"older_epoch_after_newer": db.zombie_writes[:_LISTED]},
        ),
        # Liveness: no lease held without a running turn, none its owner stopped
        # renewing. Judged live too: a stranded lease is a defect at any moment.
        Check(
            "no_stranded_lease",
            not db.stranded_leases,
            {"stranded": db.stranded_leases[:_LISTED]},
        ),
        Check(
            "consistent_identities",
            not db.identity_mismatches,
            {"mismatches": db.identity_mismatches[:_LISTED]},
        ),
    ]
    if quiesced:
        checks.append(
            Check(
                "no_lost_or_stuck_turn",
                not unfinished,
                {"turns_by_status": db.turns_by_status, "max_attempts": db.max_attempts},
            )
        )
        checks.append(
            Check("no_stale_lease", not db.stale_leases, {"stale": db.stale_leases[:_LISTED]})
        )
    return checks


def _automation_checks(db: DatabaseEvidence) -> list[Check]:
    """Schedules: no tick run twice, none lost once recorded. Webhooks: every event of a
    subscribed kind has its outbox row, and one only."""
    totals = db.automation_totals
    return [
        Check(
            "no_tick_twice",
            not db.tick_duplicates,
            {"ticks": totals.get("ticks", 0), "duplicates": db.tick_duplicates[:_LISTED]},
        ),
        Check(
            "no_tick_lost",
            not db.tick_turns_missing,
            {"recorded_without_turn": db.tick_turns_missing[:_LISTED]},
        ),
        Check(
            "outbox_complete",
            not db.outbox_missing and not db.delivery_duplicates,
            {
                "deliveries": totals.get("deliveries", 0),
                "pending": totals.get("pending_deliveries", 0),
                "events_without_delivery": db.outbox_missing[:_LISTED],
                "events_delivered_twice": db.delivery_duplicates[:_LISTED],
            },
        ),
    ]


async def run_checks(
    pool: Pool,
    *,
    journals: Path,
    quiesced: bool = True,
    faults: Mapping[UUID, int] | None = None,
    stranded_grace: float = 5.0,
) -> CheckReport:
    """Judge the database and journals. ``quiesced``: nothing should be running
    or queued any more (turns terminal, no lease left). ``faults``: how many
    injected faults touched each session (absent: none), when the caller knows;
    then no session may have retried more often than that. ``stranded_grace``:
    how long a leased session may go without a running turn."""
    db = await collect_evidence(pool, stranded_grace=stranded_grace)
    checks = [
        *_turn_checks(db, quiesced=quiesced),
        *_effect_checks(db, journals),
        *_automation_checks(db),
    ]
    if faults is not None:
        checks.append(_attempts_check(db, faults))
    return CheckReport(checks)
