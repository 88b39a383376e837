"""Schedules and webhook endpoints through the client, sync and async, against a real
``stint api`` (and a real worker where ticks run); what the client says is checked
against what PostgreSQL holds, refusals are typed errors that write nothing, and a
lost answer is retried only where a replay changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from stint.client import (
    ApiError,
    BusyStrategy,
    Conflict,
    DeliveryStatus,
    EventKind,
    Forbidden,
    InvalidRequest,
    NotFound,
    TickOutcome,
    Unavailable,
    Unreachable,
)
from stint.store.pool import Pool
from tests.api.conftest import ApiServer, Keys
from tests.client.conftest import Either, make_client
from tests.client.taps import Record, tap
from tests.polling import wait_until
from tests.workers import Cluster, count_rows, fetch

pytestmark = pytest.mark.acceptance

TABLES = ("schedules", "schedule_ticks", "webhook_endpoints", "webhook_deliveries", "sessions")
HOOK_URL = "https://hooks.example.com/stint"


@pytest_asyncio.fixture(loop_scope="session")
async def keyed(kind: str, keyed_api: ApiServer, keys: Keys) -> AsyncIterator[Either]:
    """Tenant a's writer key on an API that can make webhook endpoints."""
    either = Either(make_client(kind, keyed_api.base_url, keys.a))
    try:
        yield either
    finally:
        await either.close()


async def _counts(pool: Pool) -> dict[str, int]:
    return {table: await count_rows(pool, table) for table in TABLES}


def _other_tenant(stint: Either, api: ApiServer, keys: Keys) -> Either:
    """Tenant b's key, through the same kind of client as ``stint``."""
    return Either(make_client(stint.kind, api.base_url, keys.b))


async def test_a_schedule_through_its_life(
    stint: Either, api: ApiServer, keys: Keys, pool: Pool
) -> None:
    made = await stint.call(
        "create_schedule", "nightly", {"n": 1}, every_seconds=3600, pin="reports"
    )
    assert (made.name, made.every_seconds, made.cron, made.timezone) == (
        "nightly",
        3600,
        None,
        "UTC",
    )
    assert (made.input, made.pin, made.session_id, made.busy) == (
        {"n": 1},
        "reports",
        None,
        BusyStrategy.ENQUEUE,
    )
    assert not made.paused and made.next_run_at is not None and made.recent_ticks is None
    rows = await fetch(pool, "SELECT id, name, tenant, pin, paused_at FROM schedules")
    assert rows == [(made.id, "nightly", "a", "reports", None)]

    assert [s.id for s in (await stint.call("list_schedules")).schedules] == [made.id]
    shown = await stint.call("get_schedule", made.id)
    assert shown.recent_ticks == [] and shown.model_dump(exclude={"recent_ticks"}) == (
        made.model_dump(exclude={"recent_ticks"})
    )

    paused = await stint.call("pause_schedule", made.id)
    assert paused.paused and paused.next_run_at is None
    again = await stint.call("pause_schedule", str(made.id))  # a no-op: replay-safe
    assert again.paused and again == paused
    assert (await fetch(pool, "SELECT paused_at IS NOT NULL FROM schedules")) == [(True,)]
    resumed = await stint.call("resume_schedule", made.id)
    assert not resumed.paused and resumed.next_run_at is not None
    assert (await fetch(pool, "SELECT paused_at FROM schedules")) == [(None,)]

    other = _other_tenant(stint, api, keys)
    reader = Either(make_client(stint.kind, api.base_url, keys.a_read_only))
    try:
        assert (await other.call("list_schedules")).schedules == []
        assert [s.id for s in (await reader.call("list_schedules")).schedules] == [made.id]
        for name in ("get_schedule", "pause_schedule", "delete_schedule"):
            with pytest.raises(NotFound):
                await other.call(name, made.id)
        for name in ("pause_schedule", "delete_schedule"):
            with pytest.raises(Forbidden):
                await reader.call(name, made.id)
    finally:
        await other.close()
        await reader.close()
    assert await fetch(pool, "SELECT paused_at FROM schedules") == [(None,)]

    gone = await stint.call("delete_schedule", made.id)
    assert gone.id == made.id and await count_rows(pool, "schedules") == 0
    with pytest.raises(NotFound):
        await stint.call("get_schedule", made.id)


async def test_a_schedules_ticks_are_read_with_the_turns_they_queued(
    stint: Either, cluster: Cluster, pool: Pool
) -> None:
    session = await stint.call("create_session")
    made = await stint.call(
        "create_schedule",
        "often",
        {"min_wait_ms": 0},
        every_seconds=1,
        session_id=session.id,
        busy="reject",
    )
    assert (made.session_id, made.busy) == (session.id, BusyStrategy.REJECT)
    cluster.start_worker(slots=1)

    async def ticked() -> bool:
        return await count_rows(pool, "schedule_ticks") >= 1

    await wait_until(ticked, what="the schedule ticks")
    await stint.call("pause_schedule", made.id)  # no tick runs after this answer
    shown = await stint.call("get_schedule", made.id)
    rows = await fetch(
        pool,
        "SELECT tick_at, outcome, session_id, turn_id FROM schedule_ticks ORDER BY tick_at DESC",
    )
    assert shown.recent_ticks is not None
    read = [(t.tick_at, t.outcome, t.session_id, t.turn_id) for t in shown.recent_ticks]
    assert read == [tuple(row) for row in rows]
    enqueued = [t for t in shown.recent_ticks if t.outcome is TickOutcome.ENQUEUED]
    assert shown.ticks_enqueued == len(enqueued) >= 1 and shown.last_tick_at == rows[0][0]
    turns = await fetch(pool, "SELECT id FROM turns WHERE session_id = %s", session.id)
    assert {t.turn_id for t in enqueued} <= {row[0] for row in turns}


async def test_a_webhook_shows_its_secret_once_then_its_deliveries(
    keyed: Either, keyed_api: ApiServer, keys: Keys, pool: Pool
) -> None:
    made = await keyed.call(
        "create_webhook", HOOK_URL, [EventKind.TURN_CANCELLED], description="ci"
    )
    assert made.secret.startswith("whsec_") and made.secret not in repr(made)
    assert (made.url, made.events, made.description, made.enabled) == (
        HOOK_URL,
        ["turn.cancelled"],
        "ci",
        True,
    )
    rows = await fetch(pool, "SELECT id, tenant, url, kinds FROM webhook_endpoints")
    assert rows == [(made.id, "a", HOOK_URL, ["turn.cancelled"])]
    shown = await keyed.call("get_webhook", made.id)
    assert shown.model_dump() == made.model_dump(exclude={"secret"})
    assert not hasattr(shown, "secret")
    listed = await keyed.call("list_webhooks")
    assert listed.webhooks == [shown]

    # A queued turn cancelled (no worker runs it) appends turn.cancelled: one delivery,
    # pending (no worker delivers either).
    session = await keyed.call("create_session")
    queued = await keyed.call("enqueue", session.id, {"n": 1})
    await keyed.call("cancel", session.id, turn_id=queued.turn_id)
    log = await keyed.call("list_deliveries", made.id)
    stored = await fetch(
        pool, "SELECT id, session_id, seq, kind, status, attempts FROM webhook_deliveries"
    )
    assert [(d.id, d.session_id, d.seq, d.kind, d.status, d.attempts) for d in log.deliveries] == [
        tuple(row) for row in stored
    ]
    assert [(d.kind, d.status) for d in log.deliveries] == [
        ("turn.cancelled", DeliveryStatus.PENDING)
    ]
    pending = await keyed.call("list_deliveries", made.id, status="pending", limit=1)
    assert pending.deliveries == log.deliveries
    none = await keyed.call("list_deliveries", made.id, status=DeliveryStatus.DELIVERED)
    assert none.deliveries == []

    # Disabled for failing (as the deliverer does after days of failures), then enabled.
    await fetch(
        pool,
        "UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = 'failing' "
        "RETURNING id",
    )
    disabled = await keyed.call("get_webhook", made.id)
    assert (disabled.enabled, disabled.disabled_reason) == (False, "failing")
    enabled = await keyed.call("enable_webhook", made.id)
    assert (enabled.enabled, enabled.disabled_at, enabled.disabled_reason) == (True, None, None)
    assert await fetch(pool, "SELECT disabled_at FROM webhook_endpoints") == [(None,)]

    other = _other_tenant(keyed, keyed_api, keys)
    try:
        assert (await other.call("list_webhooks")).webhooks == []
        for name in ("get_webhook", "list_deliveries", "enable_webhook", "delete_webhook"):
            with pytest.raises(NotFound):
                await other.call(name, made.id)
    finally:
        await other.close()

    gone = await keyed.call("delete_webhook", made.id)
    assert gone.id == made.id
    after = await _counts(pool)
    assert (after["webhook_endpoints"], after["webhook_deliveries"]) == (0, 0)
    with pytest.raises(NotFound):
        await keyed.call("list_deliveries", made.id)


BAD_CALLS: list[tuple[str, type[ApiError], str, tuple[Any, ...], dict[str, Any]]] = [
    ("bad cron", InvalidRequest, "create_schedule", ("s", {}), {"cron": "61 * * * *"}),
    ("cron and interval", InvalidRequest, "create_schedule", ("s", {}),
     {"cron": "* * * * *", "every_seconds": 60}),
    ("neither", InvalidRequest, "create_schedule", ("s", {}), {}),
    ("bad zone", InvalidRequest, "create_schedule", ("s", {}),
     {"every_seconds": 60, "timezone": "Mars/Olympus"}),
    ("bad name", InvalidRequest, "create_schedule", ("no spaces", {}), {"every_seconds": 60}),
    ("catch-up", InvalidRequest, "create_schedule", ("s", {}),
     {"every_seconds": 60, "catch_up": 1001}),
    ("unknown session", NotFound, "create_schedule", ("s", {}),
     {"every_seconds": 60, "session_id": uuid.UUID(int=1)}),
    ("name in use", Conflict, "create_schedule", ("taken", {}), {"every_seconds": 60}),
    ("file url", InvalidRequest, "create_webhook", ("file:///etc/passwd", ["turn.completed"]), {}),
    ("unknown kind", InvalidRequest, "create_webhook", (HOOK_URL, ["turn.finished"]), {}),
    ("no kinds", InvalidRequest, "create_webhook", (HOOK_URL, []), {}),
    ("no webhook key", Unavailable, "create_webhook", (HOOK_URL, ["turn.completed"]), {}),
    ("bad status", InvalidRequest, "list_deliveries", (uuid.UUID(int=1),), {"status": "lost"}),
    ("zero limit", InvalidRequest, "list_deliveries", (uuid.UUID(int=1),), {"limit": 0}),
    ("unknown schedule", NotFound, "pause_schedule", (uuid.UUID(int=1),), {}),
    ("unknown webhook", NotFound, "enable_webhook", (uuid.UUID(int=1),), {}),
]  # fmt: skip


async def test_each_bad_call_is_a_typed_error_and_writes_nothing(stint: Either, pool: Pool) -> None:
    """Every case on one API (without a webhook key: the rules are checked before the
    key is needed), so the table costs one server, not one per case."""
    await stint.call("create_schedule", "taken", {}, every_seconds=60)
    before = await _counts(pool)
    for what, error, name, args, kwargs in BAD_CALLS:
        with pytest.raises(ApiError) as refused:
            await stint.call(name, *args, **kwargs)
        assert type(refused.value) is error and refused.value.detail, (what, refused.value)
        assert await _counts(pool) == before, what


async def test_a_lost_answer_is_retried_only_where_a_replay_changes_nothing(
    kind: str, keyed_api: ApiServer, keys: Keys, pool: Pool
) -> None:
    """A pause is sent again; a delete (a replay would be a 404 hiding it) and a webhook's
    create (a replay would make a second endpoint, with another secret) are not."""
    record = Record(lose=lambda r: r.method in ("POST", "DELETE"))
    client = Either(make_client(kind, keyed_api.base_url, keys.a, transport=tap(kind, record)))
    try:
        made = await client.call("create_schedule", "lossy", {}, every_seconds=60)
        record.losses = 1
        paused = await client.call("pause_schedule", made.id)
        assert paused.paused and len(record.to("POST", "/pause")) == 2
        record.losses = 1
        with pytest.raises(Unreachable) as lost:
            await client.call("delete_schedule", made.id)
        assert lost.value.method == "DELETE" and len(record.to("DELETE", str(made.id))) == 1
        assert await count_rows(pool, "schedules") == 0  # the lost answer's delete happened
        record.losses = 1
        with pytest.raises(Unreachable):
            await client.call("create_webhook", HOOK_URL, ["turn.completed"])
        assert len(record.to("POST", "/v1/webhooks")) == 1
        assert await count_rows(pool, "webhook_endpoints") == 1
    finally:
        await client.close()
