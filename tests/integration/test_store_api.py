"""The store methods the HTTP API stands on: keys, tenant scope, keyset pages, readiness."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.controls import ControlStore
from stint.store.errors import InvalidInput, UnknownSession
from stint.store.keys import KeyStore, parse_token
from stint.store.migrate import migration_files, migrations_pending
from stint.store.pool import Pool, open_pool
from stint.store.vocabulary import ControlAction, SessionStatus
from tests.workers import fetch


async def test_a_key_verifies_once_created_and_never_after_revocation(
    db: ScratchTarget, pool: Pool
) -> None:
    keys = KeyStore(db.config, pool)
    new = await keys.keys_create(tenant="acme", read_only=True, label="ci")
    caller = await keys.keys_verify(token=new.token)
    assert caller is not None
    assert (caller.tenant, caller.read_only, caller.key_id) == ("acme", True, new.key.id)
    # Only the digest is stored: the secret appears nowhere in the table.
    # The secret is the token's third part (it may hold "_" itself: split as the store does).
    parsed = parse_token(new.token)
    assert parsed is not None and parsed[0] == new.key.id
    secret = parsed[1]
    stored = await fetch(pool, "SELECT id, tenant, encode(secret_hash, 'hex') FROM api_keys")
    assert secret not in repr(stored) and new.token not in repr(stored)
    wrong = new.token[:-1] + ("A" if new.token[-1] != "A" else "B")
    assert await keys.keys_verify(token=wrong) is None
    assert await keys.keys_verify(token="stk_0000000000000000_" + "a" * 43) is None
    assert await keys.keys_verify(token="Bearer nonsense") is None
    revoked = await keys.keys_revoke(key_id=new.key.id)
    assert revoked is not None and revoked.revoked_at is not None
    assert await keys.keys_verify(token=new.token) is None
    assert await keys.keys_revoke(key_id=new.key.id) is None
    listed = await keys.keys_list(tenant="acme")
    assert [k.id for k in listed] == [new.key.id]


async def test_a_bad_tenant_name_is_refused(db: ScratchTarget, pool: Pool) -> None:
    with pytest.raises(InvalidInput, match="tenant"):
        await KeyStore(db.config, pool).keys_create(tenant="a b")
    assert await fetch(pool, "SELECT count(*) FROM api_keys") == [(0,)]


async def test_another_tenants_session_is_not_found_and_nothing_is_written(
    db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    controls = ControlStore(db.config, pool)
    queued = await client.turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={}, tenant="a"
    )
    sid = queued.session_id
    assert await client.sessions_get(session_id=sid, tenant="b") is None
    assert (await client.sessions_get(session_id=sid, tenant="a")) is not None
    assert await client.turns_get(session_id=sid, turn_id=queued.turn_id, tenant="b") is None
    assert await client.turns_list(session_id=sid, tenant="b") == []
    assert await client.events_after(session_id=sid, after=0, tenant="b") == []
    before = await fetch(pool, "SELECT (SELECT count(*) FROM turns), (SELECT count(*) FROM events)")
    with pytest.raises(UnknownSession):
        await client.turns_enqueue(
            session_id=sid,
            idempotency_key="k2",
            turn_input={},
            within_tenant="b",
        )
    with pytest.raises(UnknownSession):
        await controls.control(
            session_id=sid, action=ControlAction.CANCEL, reason="x", within_tenant="b"
        )
    with pytest.raises(UnknownSession):
        await controls.answer(session_id=sid, step_key="s", answer=1, within_tenant="b")
    after = await fetch(pool, "SELECT (SELECT count(*) FROM turns), (SELECT count(*) FROM events)")
    assert after == before
    assert (await client.tenant_status(tenant="b")).sessions == {}
    assert (await client.tenant_status(tenant="a")).sessions == {"ready": 1}


async def test_keyset_pages_cover_every_session_once_newest_first(
    db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    made = [await client.sessions_create(tenant="t") for _ in range(7)]
    await client.sessions_create(tenant="other")
    seen = []
    before = None
    while True:
        page = await client.sessions_list(tenant="t", before=before, limit=3)
        seen += [s.id for s in page]
        if len(page) < 3:
            break
        before = (page[-1].created_at, page[-1].id)
    assert seen == list(reversed(made))
    idle = await client.sessions_list(tenant="t", statuses=[SessionStatus.IDLE], limit=100)
    assert len(idle) == 7
    assert await client.sessions_list(tenant="t", statuses=[SessionStatus.READY]) == []


async def test_readiness_names_the_pending_migrations(db: ScratchTarget, pool: Pool) -> None:
    assert await migrations_pending(db.config, pool) == []
    fresh = replace(db.config, schema="not_migrated")
    other = await open_pool(fresh, ROLE_CLI, min_size=1, max_size=1)
    try:
        pending = await migrations_pending(fresh, other)
    finally:
        await other.close()
    assert pending == [m.label for m in migration_files()]
