"""The webhook deliverer against real PostgreSQL and a real HTTP receiver: signatures,
one id per delivery across retries, backoff, the SSRF guard, redirects as failures."""

from __future__ import annotations

import base64
import ipaddress
import os
import time
from uuid import UUID

import pytest

from stint.lab.webhook_receiver import Receiver, fail_twice_then_slow
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.store.sealed import WebhookKey
from stint.store.webhooks import WebhookStore, check_endpoint
from stint.store.worker_store import SqlWorkerStore
from stint.worker.deliverer import Deliverer, DeliveryPlan
from stint.worker.egress import AddressRefused, resolve_target
from stint.worker.signing import signature_headers, verify
from tests.integration.claims import claim_one
from tests.workers import fetch

KEY = WebhookKey(base64.b64encode(os.urandom(32)).decode())
LOOPBACK = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]


def _plan(**overrides: object) -> DeliveryPlan:
    fields: dict[str, object] = {
        "poll_seconds": 0.05,
        "concurrency": 4,
        "timeout_seconds": 0.5,
        "retry_seconds": 0.01,
        "retry_max_seconds": 0.01,
        "max_attempts": 10,
        "disable_after_seconds": 3600,
        "networks": LOOPBACK,
    }
    fields.update(overrides)
    return DeliveryPlan(**fields)  # type: ignore[arg-type]


async def _endpoint(db: ScratchTarget, pool: Pool, url: str) -> tuple[UUID, str]:
    endpoint, secret = await WebhookStore(db.config, pool).create(
        check_endpoint(tenant="acme", url=url, kinds=["turn.started"], description=None), key=KEY
    )
    return endpoint.id, secret


async def _event(db: ScratchTarget, pool: Pool, key: str = "k") -> None:
    await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key=key, turn_input={}, tenant="acme", session_key=key
    )
    await claim_one(SqlWorkerStore(db.config, pool, concurrency=1), f"w-{key}")


def _deliverer(db: ScratchTarget, pool: Pool, plan: DeliveryPlan) -> Deliverer:
    def failed(name: str, exc: BaseException) -> None:
        raise AssertionError(f"{name} failed: {exc!r}")

    return Deliverer(
        store=WebhookStore(db.config, pool), key=KEY, plan=plan, worker="w1", on_failure=failed
    )


async def _until_settled(
    deliverer: Deliverer, pool: Pool, rounds: int = 400
) -> list[tuple[str, int]]:
    """Run the deliverer until no delivery is pending (each round claims what is due)."""
    for _ in range(rounds):
        await deliverer.run_once()
        pending = await fetch(
            pool, "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'"
        )
        if pending == [(0,)]:
            break
        await fetch(pool, "SELECT pg_sleep(0.01)")
    return [
        (r[0], r[1]) for r in await fetch(pool, "SELECT status, attempts FROM webhook_deliveries")
    ]


async def test_each_delivery_is_processed_once_through_failures_and_a_slow_answer(
    db: ScratchTarget, pool: Pool, receiver: Receiver
) -> None:
    """The issue's receiver: two failures, then a third request it processes but answers
    after the sender gave up; the sender tries a fourth time with the same id, and the
    receiver, deduplicating by webhook-id, has processed each delivery exactly once."""
    _, receiver.secret = await _endpoint(db, pool, receiver.url)
    receiver.script = fail_twice_then_slow(slow_seconds=2.0)
    for key in ("a", "b", "c"):
        await _event(db, pool, key)
    deliverer = _deliverer(db, pool, _plan(timeout_seconds=1.0))
    try:
        settled = await _until_settled(deliverer, pool)
    finally:
        await deliverer.close()
    # At least four attempts each (a loaded machine may time out one more); the receiver
    # saw every id at least that often, and processed each once.
    assert [status for status, _ in settled] == ["delivered"] * 3
    assert all(attempts >= 4 for _, attempts in settled)
    ids = [str(r[0]) for r in await fetch(pool, "SELECT id FROM webhook_deliveries")]
    assert receiver.processed_ids() == {i: 1 for i in ids}
    assert all(receiver.seen[i] >= 4 for i in ids)
    assert all(r.signed for r in receiver.requests)
    first = receiver.processed[0].document
    assert first["type"] == "turn.started" and first["data"]["tenant"] == "acme"
    bodies: dict[str, set[bytes]] = {r.delivery_id: set() for r in receiver.requests}
    for r in receiver.requests:
        bodies[r.delivery_id].add(r.body)
    assert all(len(b) == 1 for b in bodies.values())  # the same bytes on every attempt
    [(errors,)] = await fetch(pool, "SELECT array_agg(DISTINCT last_error) FROM webhook_deliveries")
    assert errors == [None]


@pytest.mark.parametrize(
    ("status", "attempts", "error"),
    [(503, 3, "the endpoint answered 503"), (302, 1, "the endpoint answered 302")],
    ids=["the last failed attempt fails it", "a redirect fails, never followed"],
)
async def test_failures_are_retried_then_the_delivery_fails(
    db: ScratchTarget, pool: Pool, receiver: Receiver, status: int, attempts: int, error: str
) -> None:
    await _endpoint(db, pool, receiver.url)
    receiver.script = lambda delivery_id, seen: (status, 0.0)
    await _event(db, pool)
    deliverer = _deliverer(db, pool, _plan(max_attempts=attempts))
    try:
        assert await _until_settled(deliverer, pool) == [("failed", attempts)]
    finally:
        await deliverer.close()
    rows = await fetch(pool, "SELECT last_status_code, last_error FROM webhook_deliveries")
    assert rows == [(status, error)]
    assert len(receiver.requests) == attempts  # one request per attempt: no redirect followed


async def test_private_addresses_are_refused_unless_allowed(
    db: ScratchTarget, pool: Pool, receiver: Receiver
) -> None:
    await _endpoint(db, pool, receiver.url)
    await _event(db, pool)
    deliverer = _deliverer(db, pool, _plan(networks=[], max_attempts=1))
    try:
        assert await _until_settled(deliverer, pool) == [("failed", 1)]
    finally:
        await deliverer.close()
    [(error,)] = await fetch(pool, "SELECT last_error FROM webhook_deliveries")
    assert "may not reach (127.0.0.1)" in error
    assert receiver.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/x",
        "http://[::1]:8080/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://0.0.0.0/x",
        "http://localhost/x",
    ],
)
async def test_the_guard_refuses_internal_addresses(url: str) -> None:
    with pytest.raises(AddressRefused):
        await resolve_target(url, [])


async def test_the_guard_pins_the_checked_address() -> None:
    target = await resolve_target("https://127.0.0.1:8443/hook?x=1", LOOPBACK)
    assert (target.url, target.host_header) == ("https://127.0.0.1:8443/hook?x=1", "127.0.0.1:8443")
    named = await resolve_target("http://localhost:9/x", LOOPBACK)
    assert named.host_header == "localhost:9" and "localhost" not in named.url


def test_signatures_verify_as_standard_webhooks_says() -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    now = int(time.time())
    headers = signature_headers(secret, "msg_1", now, b'{"a":1}')
    assert verify(secret, headers, b'{"a":1}', now=now)
    assert not verify(secret, headers, b'{"a":2}', now=now)  # tampered body
    assert not verify(secret, headers, b'{"a":1}', now=now + 301)  # replayed late
    other = "whsec_" + base64.b64encode(b"j" * 32).decode()
    assert not verify(other, headers, b'{"a":1}', now=now)
    rotated = {**headers, "webhook-signature": "v1,bogus " + headers["webhook-signature"]}
    assert verify(secret, rotated, b'{"a":1}', now=now)  # one of several matches
