"""Webhooks against real PostgreSQL: the outbox row is written by the statement that
appends the event (and only for a subscribed tenant), claims hold a lease, a late
record changes nothing, endpoints that fail for long are disabled, secrets are sealed."""

from __future__ import annotations

import base64
import os
from uuid import UUID

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.errors import ConfigError, InvalidInput, UnknownWebhook
from stint.store.pool import Pool
from stint.store.sealed import SealedSecret, SecretUnreadable, WebhookKey
from stint.store.vocabulary import DeliveryStatus
from stint.store.webhooks import WebhookStore, check_endpoint
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.workers import count_rows, fetch

KEY = WebhookKey(base64.b64encode(os.urandom(32)).decode())
URL = "https://hooks.example.com/stint"


async def _subscribe(store: WebhookStore, tenant: str, *kinds: str) -> UUID:
    endpoint, _ = await store.create(
        check_endpoint(tenant=tenant, url=URL, kinds=list(kinds), description=None), key=KEY
    )
    return endpoint.id


async def _start_a_turn(db: ScratchTarget, pool: Pool, tenant: str | None) -> UUID:
    """Queue a turn and claim it, which appends turn.started through log_append."""
    queued = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={}, tenant=tenant
    )
    await claim_one(SqlWorkerStore(db.config, pool, concurrency=1), "w1")
    return queued.session_id


@pytest.mark.parametrize(
    ("url", "kinds", "message"),
    [
        ("ftp://hooks.example.com/x", ["turn.completed"], "http:// or https://"),
        ("https://user:pw@example.com/x", ["turn.completed"], "credentials"),
        ("https:///nohost", ["turn.completed"], "name a host"),
        ("https://example.com:99999/x", ["turn.completed"], "host or port"),
        ("https://example.com/x#frag", ["turn.completed"], "fragment"),
        ("https://exa mple.com/x", ["turn.completed"], "http\\(s\\) URL"),
        (URL, [], "at least one event kind"),
        (URL, ["turn.finished"], "unknown event kind"),
    ],
)
def test_bad_endpoints_are_refused(url: str, kinds: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_endpoint(tenant="acme", url=url, kinds=kinds, description=None)


async def test_the_event_and_its_outbox_row_are_one_write(db: ScratchTarget, pool: Pool) -> None:
    webhooks = WebhookStore(db.config, pool)
    mine = await _subscribe(webhooks, "acme", "turn.started", "turn.completed")
    await _subscribe(webhooks, "other", "turn.started")
    disabled = await _subscribe(webhooks, "acme", "turn.started")
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE webhook_endpoints SET disabled_at = now() WHERE id = %s", (disabled,)
        )
    session = await _start_a_turn(db, pool, "acme")
    rows = await fetch(
        pool,
        "SELECT d.endpoint_id, d.kind, e.kind FROM webhook_deliveries d "
        "JOIN events e ON e.session_id = d.session_id AND e.seq = d.seq",
    )
    assert rows == [(mine, "turn.started", "turn.started")]
    [(status, attempts, on)] = await fetch(
        pool, "SELECT status, attempts, session_id FROM webhook_deliveries"
    )
    assert (status, attempts, on) == ("pending", 0, session)


async def test_no_endpoint_no_outbox_row(db: ScratchTarget, pool: Pool) -> None:
    await _subscribe(WebhookStore(db.config, pool), "other", "turn.started")
    await _start_a_turn(db, pool, "acme")
    await _start_a_turn(db, pool, None)  # a session without a tenant matches no endpoint
    assert await count_rows(pool, "events") == 2
    assert await count_rows(pool, "webhook_deliveries") == 0


async def test_a_claim_holds_a_lease_and_a_late_record_changes_nothing(
    db: ScratchTarget, pool: Pool
) -> None:
    webhooks = WebhookStore(db.config, pool)
    endpoint = await _subscribe(webhooks, "acme", "turn.started")
    await _start_a_turn(db, pool, "acme")
    [first] = await webhooks.claim(worker="w1", limit=10, lease_seconds=0.05)
    assert (first.attempts, first.endpoint_id, first.payload["attempt"]) == (1, endpoint, 1)
    assert KEY.open(first.sealed, endpoint_id=endpoint).startswith("whsec_")
    assert await webhooks.claim(worker="w2", limit=10, lease_seconds=30) == []  # leased
    async with pool.connection() as conn:  # the first claim's lease runs out
        await conn.execute("UPDATE webhook_deliveries SET next_attempt_at = now()")
    [second] = await webhooks.claim(worker="w2", limit=10, lease_seconds=30)
    assert (second.id, second.attempts) == (first.id, 2)  # the same delivery id
    late = await webhooks.record(
        delivery_id=first.id,
        attempt=1,
        outcome="delivered",
        status_code=200,
        error=None,
        retry_seconds=1,
        disable_after_seconds=3600,
    )
    assert not late.recorded
    done = await webhooks.record(
        delivery_id=second.id,
        attempt=2,
        outcome="delivered",
        status_code=204,
        error=None,
        retry_seconds=1,
        disable_after_seconds=3600,
    )
    assert done.recorded and not done.disabled
    [row] = await webhooks.deliveries(endpoint_id=endpoint, tenant="acme")
    assert (row.status, row.attempts, row.last_status_code) == (DeliveryStatus.DELIVERED, 2, 204)
    with pytest.raises(UnknownWebhook):
        await webhooks.deliveries(endpoint_id=endpoint, tenant="other")


async def test_an_endpoint_failing_for_long_is_disabled_and_can_be_enabled(
    db: ScratchTarget, pool: Pool
) -> None:
    webhooks = WebhookStore(db.config, pool)
    endpoint = await _subscribe(webhooks, "acme", "turn.started")
    await _start_a_turn(db, pool, "acme")

    async def fail_once() -> bool:
        [claimed] = await webhooks.claim(worker="w1", limit=1, lease_seconds=30)
        recorded = await webhooks.record(
            delivery_id=claimed.id,
            attempt=claimed.attempts,
            outcome="retry",
            status_code=500,
            error="the endpoint answered 500",
            retry_seconds=0,
            disable_after_seconds=60,
        )
        return recorded.disabled

    assert not await fail_once()  # the failure clock starts
    async with pool.connection() as conn:  # ... and has run for two minutes
        await conn.execute(
            "UPDATE webhook_endpoints SET failing_since = now() - interval '2 minutes'"
        )
    assert await fail_once()
    shown = await webhooks.get(endpoint_id=endpoint, tenant="acme")
    assert shown.disabled_at is not None and "every delivery failed since" in str(
        shown.disabled_reason
    )
    assert await webhooks.claim(worker="w1", limit=1, lease_seconds=30) == []
    assert await webhooks.next_due_seconds() is None  # a disabled endpoint's are not due
    enabled = await webhooks.enable(endpoint_id=endpoint, tenant="acme")
    assert enabled.disabled_at is None and enabled.failing_since is None
    assert len(await webhooks.claim(worker="w1", limit=1, lease_seconds=30)) == 1


async def test_delete_takes_the_delivery_log_with_it(db: ScratchTarget, pool: Pool) -> None:
    webhooks = WebhookStore(db.config, pool)
    endpoint = await _subscribe(webhooks, "acme", "turn.started")
    await _start_a_turn(db, pool, "acme")
    with pytest.raises(UnknownWebhook):
        await webhooks.delete(endpoint_id=endpoint, tenant="other")
    await webhooks.delete(endpoint_id=endpoint, tenant="acme")
    assert await count_rows(pool, "webhook_endpoints") == 0
    assert await count_rows(pool, "webhook_deliveries") == 0


async def test_secrets_are_sealed_to_their_endpoint_and_key(db: ScratchTarget, pool: Pool) -> None:
    webhooks = WebhookStore(db.config, pool)
    endpoint, secret = await webhooks.create(
        check_endpoint(tenant="acme", url=URL, kinds=["turn.completed"], description="ci"),
        key=KEY,
    )
    [(cipher, key_id)] = await fetch(
        pool, "SELECT secret_cipher, key_id FROM webhook_endpoints WHERE id = %s", endpoint.id
    )
    assert secret.encode() not in bytes(cipher) and secret not in str(endpoint)
    sealed = SealedSecret(bytes(cipher), key_id)
    assert KEY.open(sealed, endpoint_id=endpoint.id) == secret
    with pytest.raises(SecretUnreadable, match="does not open"):
        KEY.open(sealed, endpoint_id=UUID(int=1))
    other = WebhookKey(base64.b64encode(os.urandom(32)).decode())
    with pytest.raises(SecretUnreadable, match="another STINT_WEBHOOK_KEY"):
        other.open(sealed, endpoint_id=endpoint.id)
    with pytest.raises(ConfigError, match="32 random bytes"):
        WebhookKey("too-short")
