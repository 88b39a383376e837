"""EXPLAIN guards: the claim and the finish stay on their indexes.

The worker's hot statements must cost the same with 10 sessions or 30,000:
with many idle and parked sessions (a long-lived deployment) and many finished
turns, PostgreSQL must reach claimable sessions only through the two partial
indexes (ready by ready_at, running by lease expiry) and a session's open
turns only through theirs. A sequential scan of sessions or turns in these
plans is the regression this test exists to catch.
"""

from __future__ import annotations

import uuid

import pytest
from psycopg.types.json import Jsonb

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.probe import PlanNode, ProbeStore

# A long-lived deployment's shape: most sessions idle or parked, a few ready.
_POPULATE = [
    """INSERT INTO sessions (status) SELECT 'idle' FROM generate_series(1, 20000)""",
    """INSERT INTO sessions (status) SELECT 'parked' FROM generate_series(1, 10000)""",
    """INSERT INTO sessions (status, ready_at)
       SELECT 'ready', now() - make_interval(secs => g) FROM generate_series(1, 50) AS g""",
    """INSERT INTO sessions (status, lease_owner, lease_epoch, lease_expires_at)
       SELECT 'running', 'w', 1, now() + interval '1 minute' FROM generate_series(1, 50)""",
    """INSERT INTO turns (session_id, seq, idempotency_key, input, status, finished_at)
       SELECT id, 1, 'k', '{}', 'succeeded', now() FROM sessions WHERE status = 'idle'""",
    """INSERT INTO turns (session_id, seq, idempotency_key, input, status)
       SELECT id, 1, 'k', '{}', 'queued' FROM sessions WHERE status = 'ready'""",
    """INSERT INTO turns (session_id, seq, idempotency_key, input, status)
       SELECT id, 1, 'k', '{}', 'running' FROM sessions WHERE status = 'running'""",
    """ANALYZE""",
]


@pytest.fixture
async def crowded(pool: Pool) -> Pool:
    for statement in _POPULATE:
        await _run(pool, statement)
    return pool


async def _run(pool: Pool, statement: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(statement)


def _scans(nodes: list[PlanNode], relation: str) -> set[str]:
    """How ``relation`` is read: node types, with the index where there is one."""
    return {f"{n.node_type}:{n.index or ''}" for n in nodes if n.relation == relation}


async def test_the_claim_reads_only_its_two_partial_indexes(
    db: ScratchTarget, crowded: Pool
) -> None:
    probe = ProbeStore(db.config, crowded)
    nodes = await probe.plan(
        "turns_claim",
        {
            "owner": "w2",
            "pins": [],
            "limit": 4,
            "lease_seconds": 30,
            "events_channel": db.config.events_channel,
            "finishing_session": None,
        },
    )
    sessions = _scans(nodes, "sessions")
    assert not any(s.startswith("Seq Scan") for s in sessions), sessions
    indexes = {s.split(":", 1)[1] for s in sessions}
    assert {"sessions_ready_idx", "sessions_running_lease_idx"} <= indexes, sessions
    assert not any(s.startswith("Seq Scan") for s in _scans(nodes, "turns")), nodes


async def test_the_finish_reads_the_turn_and_the_session_by_key(
    db: ScratchTarget, crowded: Pool
) -> None:
    probe = ProbeStore(db.config, crowded)
    nodes = await probe.plan(
        "turns_finish",
        {
            "session_id": uuid.uuid4(),
            "owner": "w",
            "epoch": 1,
            "turn_id": uuid.uuid4(),
            "events": Jsonb([["turn.completed", {}]]),
            "events_channel": db.config.events_channel,
            "work_channel": db.config.work_channel,
            "finishing_session": uuid.uuid4(),
            "status": "succeeded",
            "output": None,
            "error": None,
            "reason": None,
            "release": False,
            "claim_next": True,
            "pins": [],
            "limit": 1,
            "lease_seconds": 30,
        },
    )
    for relation in ("sessions", "turns"):
        scans = _scans(nodes, relation)
        assert scans and not any(s.startswith("Seq Scan") for s in scans), (relation, scans)
