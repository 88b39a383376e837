"""The checker's schedule and webhook checks fail on the defects they exist for."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.retention import RetentionStore
from stint.store.schedules import NewSchedule, ScheduleStore
from stint.store.sealed import WebhookKey
from stint.store.webhooks import WebhookStore, check_endpoint
from stint.store.worker_store import SqlWorkerStore
from stint.worker.pruner import RetentionPlan, prune
from tests.integration.claims import claim_one
from tests.workers import count_rows


async def _verdicts(pool: Pool, tmp_path: Path) -> dict[str, bool]:
    report = await run_checks(pool, journals=tmp_path / "none", quiesced=False)
    return {c.name: c.passed for c in report.checks}


async def test_a_tick_enqueued_twice_fails_no_tick_twice(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    client = ClientStore(db.config, pool)
    assert (await _verdicts(pool, tmp_path))["no_tick_twice"]
    for session_key in ("one", "two"):  # the same tick's key on two new sessions
        await client.turns_enqueue(
            session_id=None,
            idempotency_key="schedule:00000000-0000-0000-0000-000000000001:2026-01-01T00:00:00",
            turn_input={},
            session_key=session_key,
        )
    assert not (await _verdicts(pool, tmp_path))["no_tick_twice"]


async def test_a_lost_or_doubled_outbox_row_fails_outbox_complete(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    key = WebhookKey(base64.b64encode(os.urandom(32)).decode())
    await WebhookStore(db.config, pool).create(
        check_endpoint(
            tenant="acme", url="https://example.com/h", kinds=["turn.started"], description=None
        ),
        key=key,
    )
    async with pool.connection() as conn:  # the endpoint was made a while ago
        await conn.execute("UPDATE webhook_endpoints SET updated_at = now() - interval '1 hour'")
    await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={}, tenant="acme"
    )
    await claim_one(SqlWorkerStore(db.config, pool, concurrency=1), "w1")
    assert (await _verdicts(pool, tmp_path))["outbox_complete"]
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO webhook_deliveries (endpoint_id, session_id, seq, kind) "
            "SELECT endpoint_id, session_id, seq, kind FROM webhook_deliveries"
        )
    assert not (await _verdicts(pool, tmp_path))["outbox_complete"]
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM webhook_deliveries")
    assert not (await _verdicts(pool, tmp_path))["outbox_complete"]


async def test_retention_prunes_old_ticks_and_deliveries(db: ScratchTarget, pool: Pool) -> None:
    """Ticks go with the turns horizon and deliveries with the events horizon; newer
    ones stay."""
    key = WebhookKey(base64.b64encode(os.urandom(32)).decode())
    new = check_endpoint(
        tenant="acme", url="https://e.example/h", kinds=["turn.started"], description=None
    )
    await WebhookStore(db.config, pool).create(new, key=key)
    for name in ("old", "new"):
        await ClientStore(db.config, pool).turns_enqueue(
            session_id=None, idempotency_key=name, turn_input={}, tenant="acme", session_key=name
        )
        await claim_one(SqlWorkerStore(db.config, pool, concurrency=1), f"w-{name}")
    schedule = await ScheduleStore(db.config, pool).create(
        NewSchedule(tenant="acme", name="s", input={}, every=1)
    )
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO schedule_ticks (schedule_id, tick_at, worker, created_at) VALUES "
            "(%s, now() - interval '40 days', 'w', now() - interval '40 days'), "
            "(%s, now(), 'w', now())",
            (schedule.id, schedule.id),
        )
        await conn.execute(
            "UPDATE webhook_deliveries SET created_at = now() - interval '40 days' "
            "WHERE id = (SELECT id FROM webhook_deliveries ORDER BY created_at LIMIT 1)"
        )
    plan = RetentionPlan(events_days=30, turns_days=30, workers_days=0, batch=10, every_seconds=0)
    store = RetentionStore(db.config, pool)
    report = await prune(store, plan, journals=None, worker="w", every_seconds=0)
    assert (report.schedule_ticks, report.webhook_deliveries) == (1, 1)
    assert await count_rows(pool, "schedule_ticks") == 1
    assert await count_rows(pool, "webhook_deliveries") == 1
