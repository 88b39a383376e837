"""Webhooks: per-tenant endpoints, the outbox the event log writes, the delivery log.

The outbox rows are written by ``log_append`` (the event log's one writer), in
the statement that appends each event; this module holds what the doors do to
endpoints (create, list, delete, enable, read the delivery log) and what the
workers' deliverer does to deliveries (claim with a lease, record an attempt).
Every door checks an endpoint with ``check_endpoint``, so the CLI and the API
refuse the same input the same way (docs/design.md, "Webhooks").
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from stint.store.config import StoreConfig
from stint.store.errors import InvalidInput, UnknownWebhook
from stint.store.fetch import fetch_all, fetch_one, fetch_optional
from stint.store.models import Row
from stint.store.pool import Pool
from stint.store.sealed import SealedSecret, WebhookKey, new_secret
from stint.store.translate import guarded
from stint.store.vocabulary import DeliveryStatus, EventKind

__all__ = [
    "ClaimedDelivery",
    "Delivery",
    "Endpoint",
    "NewEndpoint",
    "Recorded",
    "WebhookStore",
    "check_endpoint",
]

MAX_URL_CHARS = 2000
MAX_KINDS = 64
MAX_DESCRIPTION_CHARS = 200


@dataclass(frozen=True)
class NewEndpoint:
    """An endpoint as checked by ``check_endpoint``: URL, kinds in the vocabulary."""

    tenant: str
    url: str
    kinds: tuple[str, ...]
    description: str | None


def check_endpoint(
    *, tenant: str, url: str, kinds: list[str], description: str | None
) -> NewEndpoint:
    """The rules every door applies; ``InvalidInput`` with one clear line otherwise."""
    if not 8 <= len(url) <= MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidInput(f"url must be an http(s) URL of 8..{MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInput("url is not a valid URL (its host or port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("url must start with http:// or https:// and name a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput("url must not carry credentials (user:password@)")
    if parts.fragment:
        raise InvalidInput("url must not have a #fragment")
    if port == 0:
        raise InvalidInput("url's port must be 1..65535")
    if not kinds:
        raise InvalidInput("name at least one event kind to subscribe to")
    known = {kind.value for kind in EventKind}
    unknown = sorted({k for k in kinds if k not in known})
    if unknown:
        raise InvalidInput(
            f"unknown event kind(s) {', '.join(repr(k[:40]) for k in unknown[:5])}; "
            f"known: {', '.join(sorted(known))}"
        )
    chosen = tuple(dict.fromkeys(kinds))
    if len(chosen) > MAX_KINDS:
        raise InvalidInput(f"at most {MAX_KINDS} event kinds per endpoint")
    if description is not None and not 1 <= len(description) <= MAX_DESCRIPTION_CHARS:
        raise InvalidInput(f"description must be 1..{MAX_DESCRIPTION_CHARS} characters")
    return NewEndpoint(tenant, url, chosen, description)


@dataclass(frozen=True)
class Endpoint(Row):
    """An endpoint as every door shows it: never its secret."""

    id: UUID
    tenant: str
    url: str
    kinds: list[str]
    description: str | None
    failing_since: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class Delivery(Row):
    """One row of an endpoint's delivery log."""

    id: UUID
    endpoint_id: UUID
    session_id: UUID
    seq: int
    kind: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True)
class ClaimedDelivery(Row):
    """A delivery a deliverer holds for one attempt, with what the request needs.
    ``payload`` and ``event_at`` are None when retention pruned the event."""

    id: UUID
    endpoint_id: UUID
    attempts: int
    kind: str
    session_id: UUID
    seq: int
    tenant: str
    url: str
    secret_cipher: bytes
    key_id: str
    turn_id: UUID | None
    payload: Any
    event_at: datetime | None

    @property
    def sealed(self) -> SealedSecret:
        return SealedSecret(bytes(self.secret_cipher), self.key_id)

    def __repr__(self) -> str:  # the sealed secret stays out of logs and tracebacks
        shown = f"id={self.id}, endpoint={self.endpoint_id}, attempt={self.attempts}"
        return f"ClaimedDelivery({shown})"


@dataclass(frozen=True)
class Recorded:
    """Whether an attempt's outcome was written (False: the delivery moved on without
    this worker), and whether the endpoint is disabled now."""

    recorded: bool
    disabled: bool


@dataclass(frozen=True)
class _Seconds:
    seconds: float | None


class WebhookStore:
    """Endpoints for the doors; claims and records for the deliverer."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def create(self, new: NewEndpoint, *, key: WebhookKey) -> tuple[Endpoint, str]:
        """Insert an endpoint with a fresh secret, sealed under ``key``; the secret is
        returned for the caller to show once, and is stored nowhere in the clear."""
        endpoint_id = uuid.uuid4()
        secret = new_secret()
        sealed = key.seal(secret, endpoint_id=endpoint_id)
        async with guarded("webhooks_insert", self._config), self._pool.connection() as conn:
            row = await fetch_one(
                conn,
                Endpoint,
                "webhooks_insert",
                id=endpoint_id,
                tenant=new.tenant,
                url=new.url,
                kinds=list(new.kinds),
                description=new.description,
                secret_cipher=sealed.cipher,
                key_id=sealed.key_id,
            )
        return row, secret

    async def list_all(self, *, tenant: str | None, limit: int = 1000) -> list[Endpoint]:
        async with guarded("webhooks_list", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, Endpoint, "webhooks_list", tenant=tenant, limit=limit)

    async def get(self, *, endpoint_id: UUID, tenant: str | None) -> Endpoint:
        return await self._one("webhooks_get", endpoint_id, tenant)

    async def delete(self, *, endpoint_id: UUID, tenant: str | None) -> Endpoint:
        """Delete the endpoint and its delivery log; nothing more is delivered to it."""
        return await self._one("webhooks_delete", endpoint_id, tenant)

    async def enable(self, *, endpoint_id: UUID, tenant: str | None) -> Endpoint:
        """Enable again an endpoint disabled for failing; its pending deliveries go out."""
        return await self._one("webhooks_enable", endpoint_id, tenant)

    async def _one(self, name: str, endpoint_id: UUID, tenant: str | None) -> Endpoint:
        async with guarded(name, self._config), self._pool.connection() as conn:
            row = await fetch_optional(conn, Endpoint, name, endpoint_id=endpoint_id, tenant=tenant)
        if row is None:
            raise UnknownWebhook(endpoint=endpoint_id)
        return row

    async def deliveries(
        self,
        *,
        endpoint_id: UUID,
        tenant: str | None,
        status: DeliveryStatus | None = None,
        limit: int = 50,
    ) -> list[Delivery]:
        """The endpoint's delivery log, newest first (``UnknownWebhook`` if not the tenant's)."""
        await self.get(endpoint_id=endpoint_id, tenant=tenant)
        async with guarded("webhook_deliveries_list", self._config), self._pool.connection() as c:
            return await fetch_all(
                c,
                Delivery,
                "webhook_deliveries_list",
                endpoint_id=endpoint_id,
                status=status.value if status else None,
                limit=limit,
            )

    async def claim(
        self, *, worker: str, limit: int, lease_seconds: float
    ) -> list[ClaimedDelivery]:
        """Up to ``limit`` due deliveries, each held for ``lease_seconds``."""
        params = {"worker": worker, "limit": limit, "lease_seconds": lease_seconds}
        async with guarded("webhook_claim", self._config), self._pool.connection() as conn:
            return await fetch_all(conn, ClaimedDelivery, "webhook_claim", **params)

    async def record(
        self,
        *,
        delivery_id: UUID,
        attempt: int,
        outcome: str,
        status_code: int | None,
        error: str | None,
        retry_seconds: float,
        disable_after_seconds: float,
    ) -> Recorded:
        """One attempt's outcome: ``delivered``, ``retry`` or ``failed`` (the last)."""
        params = {
            "delivery_id": delivery_id,
            "attempt": attempt,
            "outcome": outcome,
            "status_code": status_code,
            "error": error,
            "retry_seconds": retry_seconds,
            "disable_after_seconds": disable_after_seconds,
        }
        async with guarded("webhook_record", self._config), self._pool.connection() as conn:
            return await fetch_one(conn, Recorded, "webhook_record", **params)

    async def next_due_seconds(self) -> float | None:
        async with guarded("webhook_next_due", self._config), self._pool.connection() as conn:
            return (await fetch_one(conn, _Seconds, "webhook_next_due")).seconds
