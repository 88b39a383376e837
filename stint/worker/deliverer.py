"""The worker's webhook deliverer: the outbox's consumer.

Every worker runs one (``STINT_WEBHOOK_POLL_SECONDS`` > 0) on the background
pool, never the slots' pool. It claims due deliveries with a lease (another
worker takes one again, with the same id, if this one dies mid-attempt), sends
at most ``STINT_WEBHOOK_CONCURRENCY`` requests at once, each signed and within
``STINT_WEBHOOK_TIMEOUT_SECONDS``, to an address the SSRF guard checked, and
records each outcome: delivered (a 2xx), a retry with exponential backoff and
jitter, or failed after the last attempt. A turn never waits for any of this.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version as package_version
from typing import TYPE_CHECKING, Any

from stint.store.errors import StoreError
from stint.store.sealed import SecretUnreadable, WebhookKey
from stint.store.webhooks import ClaimedDelivery, WebhookStore
from stint.worker.cancelling import cancel_and_wait
from stint.worker.egress import AddressRefused, Network, resolve_target
from stint.worker.failpoints import failpoint
from stint.worker.service import Service, Wakeup
from stint.worker.signing import signature_headers

if TYPE_CHECKING:
    import httpx

__all__ = ["Attempt", "Deliverer", "DeliveryPlan", "webhook_body"]

log = logging.getLogger("stint.worker.deliverer")

_LEASE_MARGIN_SECONDS = 5.0  # the claim outlives the request by this much
_ERROR_CHARS = 300


@dataclass(frozen=True)
class DeliveryPlan:
    poll_seconds: float
    concurrency: int
    timeout_seconds: float
    retry_seconds: float
    retry_max_seconds: float
    max_attempts: int
    disable_after_seconds: float
    networks: Sequence[Network]


@dataclass(frozen=True)
class Attempt:
    """What one attempt came to (status_code None: no answer)."""

    delivery_id: str
    outcome: str
    status_code: int | None
    error: str | None


def webhook_body(delivery: ClaimedDelivery) -> bytes:
    """The JSON body, the same bytes on every attempt (keys sorted, no spaces)."""
    assert delivery.event_at is not None
    document: dict[str, Any] = {
        "type": delivery.kind,
        "timestamp": delivery.event_at.isoformat(),
        "data": {
            "tenant": delivery.tenant,
            "session_id": str(delivery.session_id),
            "seq": delivery.seq,
            "turn_id": str(delivery.turn_id) if delivery.turn_id else None,
            "kind": delivery.kind,
            "payload": delivery.payload,
            "created_at": delivery.event_at.isoformat(),
        },
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


class Deliverer(Service):
    """Claims and sends deliveries; ``run_once`` sends one claim's worth and waits."""

    name = "deliverer"

    def __init__(
        self,
        *,
        store: WebhookStore,
        key: WebhookKey | None,
        plan: DeliveryPlan,
        worker: str,
        on_failure: Callable[[str, BaseException], None],
    ) -> None:
        super().__init__(on_failure)
        self._store = store
        self._key = key
        self._plan = plan
        self._worker = worker
        self._wakeup = Wakeup()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._user_agent = f"stint-webhooks/{package_version('stint')}"
        self.attempts: list[Attempt] = []  # the latest ones, for tests and logs
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Imported on the first delivery: a worker that delivers none never loads httpx.
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,  # never through a proxy the environment names
                timeout=httpx.Timeout(self._plan.timeout_seconds),
                limits=httpx.Limits(max_connections=self._plan.concurrency),
            )
        return self._client

    async def close(self) -> None:
        await cancel_and_wait(self._in_flight)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _claim(self, free: int) -> list[ClaimedDelivery]:
        return await self._store.claim(
            worker=self._worker,
            limit=free,
            lease_seconds=self._plan.timeout_seconds + _LEASE_MARGIN_SECONDS,
        )

    async def run_once(self) -> int:
        """Claim what is due (up to the concurrency) and deliver it; how many were claimed."""
        claimed = await self._claim(self._plan.concurrency)
        await asyncio.gather(*(self._deliver(d) for d in claimed))
        return len(claimed)

    async def run(self) -> None:
        if self._key is None:
            log.warning(
                "webhooks: STINT_WEBHOOK_KEY is not set, so this worker delivers no webhooks "
                "(their deliveries wait in the outbox)"
            )
            return
        self._http()  # import httpx now, not in the middle of the first delivery's turns
        try:
            await self._loop()
        finally:
            await self.close()

    async def _loop(self) -> None:
        plan = self._plan
        while True:
            free = plan.concurrency - len(self._in_flight)
            claimed: list[ClaimedDelivery] = []
            if free > 0:
                try:
                    claimed = await self._claim(free)
                except StoreError as exc:
                    log.warning("webhook claim failed, trying again: %s", exc)
            for delivery in claimed:
                task = asyncio.create_task(self._deliver(delivery), name="webhook-delivery")
                self._in_flight.add(task)
                task.add_done_callback(self._finished)
            # Until the poll, or a delivery ends (a slot is free, and more may be due).
            await self._wakeup.sleep(plan.poll_seconds)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._wakeup.set()

    async def _deliver(self, delivery: ClaimedDelivery) -> None:
        failpoint("webhook_after_claim")
        try:
            attempt = await self._attempt(delivery)
        except asyncio.CancelledError:
            raise  # the claim lease brings it back to another worker, same id
        failpoint("webhook_after_send")
        self.attempts = [*self.attempts[-99:], attempt]
        plan = self._plan
        backoff = min(plan.retry_max_seconds, plan.retry_seconds * 2 ** (delivery.attempts - 1))
        try:
            recorded = await self._store.record(
                delivery_id=delivery.id,
                attempt=delivery.attempts,
                outcome=attempt.outcome,
                status_code=attempt.status_code,
                error=attempt.error,
                retry_seconds=backoff * random.uniform(0.8, 1.2),
                disable_after_seconds=plan.disable_after_seconds,
            )
        except StoreError as exc:  # the lease will bring the delivery back
            log.warning("webhook delivery %s: outcome not recorded: %s", delivery.id, exc)
            return
        if recorded.disabled:
            log.warning(
                "webhook endpoint %s disabled: every delivery failed for longer than %.0fs",
                delivery.endpoint_id,
                plan.disable_after_seconds,
            )

    async def _attempt(self, delivery: ClaimedDelivery) -> Attempt:
        """Send one attempt; never raises for what the endpoint or the network did."""
        last = delivery.attempts >= self._plan.max_attempts
        failed = "failed" if last else "retry"
        if delivery.event_at is None:
            return Attempt(str(delivery.id), "failed", None, "the event was pruned before delivery")
        assert self._key is not None
        try:
            secret = self._key.open(delivery.sealed, endpoint_id=delivery.endpoint_id)
        except SecretUnreadable as exc:
            return Attempt(str(delivery.id), failed, None, exc.message)
        body = webhook_body(delivery)
        headers = {
            **signature_headers(secret, str(delivery.id), int(time.time()), body),
            "content-type": "application/json",
            "user-agent": self._user_agent,
        }
        import httpx

        try:
            async with asyncio.timeout(self._plan.timeout_seconds):
                target = await resolve_target(delivery.url, self._plan.networks)
                headers["host"] = target.host_header
                extensions = {"sni_hostname": target.sni_hostname} if target.sni_hostname else {}
                request = self._http().build_request(
                    "POST", target.url, content=body, headers=headers, extensions=extensions
                )
                response = await self._http().send(request, stream=True)
                await response.aclose()  # the body is never read: a 2xx is all we need
        except AddressRefused as exc:
            return Attempt(str(delivery.id), failed, None, str(exc)[:_ERROR_CHARS])
        except TimeoutError:
            error = f"no answer within {self._plan.timeout_seconds:g}s"
            return Attempt(str(delivery.id), failed, None, error)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            return Attempt(str(delivery.id), failed, None, error)
        if 200 <= response.status_code < 300:
            return Attempt(str(delivery.id), "delivered", response.status_code, None)
        error = f"the endpoint answered {response.status_code}"
        return Attempt(str(delivery.id), failed, response.status_code, error)
