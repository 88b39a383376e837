"""The Python vocabulary (stint.store.vocabulary) matches the migrations' CHECK constraints
(for sessions, turns, steps and events: their row check functions, migration 0016)."""

from __future__ import annotations

import re
from enum import StrEnum

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.vocabulary import (
    AdmissionLimit,
    BusyStrategy,
    ControlAction,
    DeliveryStatus,
    EventKind,
    QuotaState,
    SessionStatus,
    StepKind,
    StepStatus,
    TickOutcome,
    TurnStatus,
    WorkerState,
)
from tests.integration.catalog import describe

_ALLOWED = re.compile(r"\(\(?(?P<column>\w+) = ANY \(ARRAY\[(?P<values>[^\]]*)\]\)")


def allowed_values(constraints: list[str], column: str) -> set[str]:
    """The values a CHECK (column IN (...)) constraint admits, as PostgreSQL prints it
    (or as a row check function's source spells it, without the casts)."""
    found: set[str] = set()
    for definition in constraints:
        for match in _ALLOWED.finditer(definition):
            if match.group("column") == column:
                found |= set(re.findall(r"'([^']*)'(?:::text)?", match.group("values")))
    return found


@pytest.mark.parametrize(
    ("table", "column", "vocabulary"),
    [
        ("sessions", "status", SessionStatus),
        ("sessions", "control", ControlAction),
        ("turns", "status", TurnStatus),
        ("steps", "kind", StepKind),
        ("steps", "status", StepStatus),
        ("workers", "state", WorkerState),
        ("events", "kind", EventKind),
        ("quota_reservations", "state", QuotaState),
        ("schedules", "busy", BusyStrategy),
        ("schedule_ticks", "outcome", TickOutcome),
        ("webhook_deliveries", "status", DeliveryStatus),
    ],
)
async def test_enum_matches_the_check_constraint(
    db: ScratchTarget, pool: Pool, table: str, column: str, vocabulary: type[StrEnum]
) -> None:
    catalog = await describe(pool, db.config.schema)
    checks = catalog["tables"][table]["constraints"] + [
        source
        for name, source in catalog["functions"].items()
        if name.startswith(f"stint_{table}_valid(")
    ]
    assert allowed_values(checks, column) == {member.value for member in vocabulary}


def test_the_parser_reads_what_postgres_prints() -> None:
    printed = "c: CHECK ((status = ANY (ARRAY['idle'::text, 'ready'::text])))"
    assert allowed_values([printed], "status") == {"idle", "ready"}
    assert allowed_values([printed], "kind") == set()
    written = "WHEN NOT (status = ANY (ARRAY['idle', 'ready'])) THEN"
    assert allowed_values([written], "status") == {"idle", "ready"}


def test_terminal_turn_statuses() -> None:
    assert {s for s in TurnStatus if s.terminal} == {
        "succeeded",
        "failed",
        "cancelled",
        "interrupted",
    }


async def test_admission_limits_are_the_tables_limit_columns(db: ScratchTarget, pool: Pool) -> None:
    catalog = await describe(pool, db.config.schema)
    columns = {c.split()[0] for c in catalog["tables"]["admission_limits"]["columns"]}
    assert columns - {"tenant", "updated_at"} == {member.value for member in AdmissionLimit}
