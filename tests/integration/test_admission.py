"""Admission control against real PostgreSQL: limits in the database, refusals that
write nothing, concurrent producers that never overshoot, tenants kept apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.admission import DEFAULT_ROW, AdmissionStore
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.controls import ControlStore
from stint.store.errors import AdmissionRefused, InvalidInput, QueueFull, SessionLimitReached
from stint.store.models import EnqueueResult
from stint.store.pool import Pool, open_pool
from stint.store.vocabulary import AdmissionLimit, ControlAction
from tests.workers import count_rows, set_limits

QUEUED = AdmissionLimit.MAX_QUEUED
RUNNING = AdmissionLimit.MAX_RUNNING
SESSION_QUEUE = AdmissionLimit.MAX_SESSION_QUEUE
BACKLOG = AdmissionLimit.GLOBAL_BACKLOG
SESSIONS = AdmissionLimit.MAX_SESSIONS


@pytest.fixture
def client(db: ScratchTarget, pool: Pool) -> ClientStore:
    return ClientStore(db.config, pool)


@pytest.fixture
async def wide(db: ScratchTarget) -> AsyncIterator[Pool]:
    """One connection per producer, so that 12 producers really run at once."""
    opened = await open_pool(db.config, ROLE_CLI, min_size=12, max_size=12)
    try:
        yield opened
    finally:
        await opened.close()


async def _counts(pool: Pool) -> tuple[int, int]:
    return await count_rows(pool, "sessions"), await count_rows(pool, "turns")


async def _new(client: ClientStore, tenant: str | None, key: str = "k") -> EnqueueResult:
    return await client.turns_enqueue(
        session_id=None, idempotency_key=key, turn_input={}, tenant=tenant
    )


def _names(
    refusal: AdmissionRefused, limit: AdmissionLimit, value: int, tenant: str, what: str
) -> None:
    """The refusal carries the limit, its value and the tenant, and says them in one line."""
    assert (refusal.limit, refusal.value, refusal.tenant) == (str(limit), value, tenant)
    assert str(refusal) == (
        f"admission refused: {limit} limit of {value} {what} reached for tenant {tenant}; "
        "nothing was written"
    )


async def test_the_seed_keeps_the_old_per_session_default(db: ScratchTarget, pool: Pool) -> None:
    [default] = await AdmissionStore(db.config, pool).admission_list()
    assert (default.tenant, default.max_session_queue) == (DEFAULT_ROW, 16)
    assert (default.max_queued, default.max_running, default.global_backlog) == (None,) * 3


async def test_a_tenant_at_max_queued_is_refused_and_nothing_is_written(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {QUEUED: 3}, tenant="acme")
    first = await _new(client, "acme")
    for key in ("b", "c"):
        await client.turns_enqueue(session_id=first.session_id, idempotency_key=key, turn_input={})
    before = await _counts(pool)
    for attempt in (
        _new(client, "acme"),  # a new session
        client.turns_enqueue(session_id=first.session_id, idempotency_key="d", turn_input={}),
    ):
        with pytest.raises(AdmissionRefused) as refused:
            await attempt
        _names(refused.value, QUEUED, 3, "acme", "unfinished turns")
    assert await _counts(pool) == before
    # An idempotent retry of an admitted turn still answers, at the limit.
    again = await client.turns_enqueue(
        session_id=first.session_id, idempotency_key="k", turn_input={}
    )
    assert (again.turn_id, again.created) == (first.turn_id, False)
    # A finished (here: cancelled) turn frees its place.
    await ControlStore(db.config, pool).control(
        session_id=first.session_id, action=ControlAction.CANCEL, reason="test"
    )
    assert (await _new(client, "acme")).created


async def test_tenants_are_limited_apart_and_the_default_covers_the_rest(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {QUEUED: 1})
    await set_limits(pool, db.config, {QUEUED: 2}, tenant="big")
    await _new(client, "a")
    with pytest.raises(
        AdmissionRefused, match="max_queued limit of 1 unfinished turns reached for tenant a;"
    ):
        await _new(client, "a")
    await _new(client, "b")  # a at its limit does not block b
    await _new(client, None)
    with pytest.raises(AdmissionRefused, match="reached for sessions without a tenant"):
        await _new(client, None)
    await _new(client, "big")
    await _new(client, "big")
    with pytest.raises(AdmissionRefused, match="limit of 2"):
        await _new(client, "big")
    # Clearing the tenant's own limit makes it follow the default again.
    await set_limits(pool, db.config, {QUEUED: None}, tenant="big")
    with pytest.raises(
        AdmissionRefused, match="max_queued limit of 1 unfinished turns reached for tenant big"
    ):
        await _new(client, "big")


async def test_max_running_refuses_a_new_active_session_not_more_turns_of_one(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {RUNNING: 2}, tenant="acme")
    one = await _new(client, "acme")
    await _new(client, "acme")
    before = await _counts(pool)
    with pytest.raises(AdmissionRefused, match="max_running limit of 2 active sessions reached"):
        await _new(client, "acme")
    assert await _counts(pool) == before
    more = await client.turns_enqueue(session_id=one.session_id, idempotency_key="2", turn_input={})
    assert more.created


async def test_the_global_backlog_counts_every_tenant(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {BACKLOG: 3})
    for tenant in ("a", "b", None):
        await _new(client, tenant)
    with pytest.raises(
        AdmissionRefused, match="global_backlog limit of 3 unfinished turns reached for all tenants"
    ):
        await _new(client, "c")
    assert await AdmissionStore(db.config, pool).admission_backlog() == 3


async def test_the_per_session_queue_limit_is_read_from_the_database(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {SESSION_QUEUE: 1}, tenant="acme")
    first = await _new(client, "acme")
    with pytest.raises(QueueFull) as full:
        await client.turns_enqueue(session_id=first.session_id, idempotency_key="2", turn_input={})
    assert str(full.value) == (
        f"queue full: max_session_queue limit of 1 unfinished turns reached for session "
        f"{first.session_id} (tenant acme); nothing was written"
    )
    other = await _new(client, "other")  # the default's 16 still holds for others
    assert (
        await client.turns_enqueue(session_id=other.session_id, idempotency_key="2", turn_input={})
    ).created


@pytest.mark.parametrize(
    ("limits", "tenants"),
    [
        ({QUEUED: 10}, ["acme"]),
        ({RUNNING: 10}, ["acme"]),
        ({BACKLOG: 10}, ["acme", "globex", None]),
    ],
    ids=["max_queued", "max_running", "global_backlog"],
)
async def test_twelve_concurrent_producers_never_overshoot(
    db: ScratchTarget,
    pool: Pool,
    wide: Pool,
    limits: dict[AdmissionLimit, int | None],
    tenants: list[str | None],
) -> None:
    """12 producers each try 3 new sessions at once (36 > 10): exactly 10 are
    admitted, the rest refused, and the database holds exactly 10 turns."""
    tenant_scoped = BACKLOG not in limits
    await set_limits(pool, db.config, limits, tenant="acme" if tenant_scoped else DEFAULT_ROW)
    client = ClientStore(db.config, wide)

    async def producer(p: int) -> tuple[int, int]:
        admitted = refused = 0
        for t in range(3):
            try:
                await _new(client, tenants[(p + t) % len(tenants)], key=f"p{p}-{t}")
                admitted += 1
            except AdmissionRefused:
                refused += 1
        return admitted, refused

    results = await asyncio.gather(*(producer(p) for p in range(12)))
    assert sum(a for a, _ in results) == 10
    assert sum(r for _, r in results) == 26
    assert await count_rows(pool, "turns") == 10


async def test_bad_limits_are_refused_before_anything_is_written(
    db: ScratchTarget, pool: Pool
) -> None:
    store = AdmissionStore(db.config, pool)
    before = await store.admission_list()
    with pytest.raises(InvalidInput, match="tenant must be"):
        await store.admission_set(tenant="no spaces", limits={QUEUED: 1})
    with pytest.raises(InvalidInput, match="not a tenant's limit"):
        await store.admission_set(tenant="acme", limits={BACKLOG: 1})
    with pytest.raises(InvalidInput, match="no limit given"):
        await store.admission_set(tenant="acme", limits={})
    assert await store.admission_list() == before


async def test_a_tenant_at_max_sessions_creates_none_by_any_path_and_writes_nothing(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    """POST /v1/sessions's path, an enqueue without a session, and a keyed enqueue are
    all refused once the tenant holds its sessions; a retry of a keyed creation that
    already made its session still answers; other tenants are not held to it."""
    await set_limits(pool, db.config, {SESSIONS: 2}, tenant="acme")
    await client.sessions_create(tenant="acme")
    keyed = await client.turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={}, tenant="acme", session_key="s1"
    )
    before = await _counts(pool)
    attempts = (
        lambda: client.sessions_create(tenant="acme"),
        lambda: _new(client, "acme", key="other"),
        lambda: client.turns_enqueue(
            session_id=None, idempotency_key="k", turn_input={}, tenant="acme", session_key="s2"
        ),
    )
    for attempt in attempts:
        with pytest.raises(SessionLimitReached) as refused:
            await attempt()
        _names(refused.value, SESSIONS, 2, "acme", "sessions")
    assert await _counts(pool) == before
    again = await client.turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={}, tenant="acme", session_key="s1"
    )
    assert (again.session_id, again.turn_id, again.created) == (
        keyed.session_id,
        keyed.turn_id,
        False,
    )
    # More turns on a session it holds are not new sessions.
    assert (
        await client.turns_enqueue(session_id=keyed.session_id, idempotency_key="k2", turn_input={})
    ).created
    await client.sessions_create(tenant="globex")
    await _new(client, None)


async def test_max_sessions_follows_the_default_row_and_shows_in_the_list(
    db: ScratchTarget, pool: Pool, client: ClientStore
) -> None:
    await set_limits(pool, db.config, {SESSIONS: 1})
    await client.sessions_create(tenant="a")
    with pytest.raises(SessionLimitReached, match="limit of 1 sessions reached for tenant a;"):
        await client.sessions_create(tenant="a")
    await client.sessions_create(tenant=None)
    with pytest.raises(SessionLimitReached, match="reached for sessions without a tenant"):
        await client.sessions_create(tenant=None)
    await set_limits(pool, db.config, {SESSIONS: 3}, tenant="a")
    await client.sessions_create(tenant="a")
    rows = {row.tenant: row for row in await AdmissionStore(db.config, pool).admission_list()}
    assert (rows["*"].max_sessions, rows["*"].sessions) == (1, 1)
    assert (rows["a"].max_sessions, rows["a"].sessions) == (3, 2)


async def test_twelve_concurrent_session_creators_never_overshoot(
    db: ScratchTarget, pool: Pool, wide: Pool
) -> None:
    """12 creators each try 3 sessions at once, by both paths (36 > 10): exactly 10
    sessions exist afterwards."""
    await set_limits(pool, db.config, {SESSIONS: 10}, tenant="acme")
    client = ClientStore(db.config, wide)

    async def creator(p: int) -> tuple[int, int]:
        made = refused = 0
        for t in range(3):
            try:
                if (p + t) % 2:
                    await client.sessions_create(tenant="acme")
                else:
                    await _new(client, "acme", key=f"p{p}-{t}")
                made += 1
            except SessionLimitReached:
                refused += 1
        return made, refused

    results = await asyncio.gather(*(creator(p) for p in range(12)))
    assert sum(m for m, _ in results) == 10
    assert sum(r for _, r in results) == 26
    assert await count_rows(pool, "sessions") == 10
