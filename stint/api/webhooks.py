"""/v1/webhooks: the tenant's webhook endpoints and their delivery logs.

An endpoint subscribes a URL to event kinds of the tenant's sessions; every
worker delivers each such event at least once, signed as Standard Webhooks
says, with one delivery id the receiver deduplicates by (docs/guide). The
signing secret is in the creation's answer only. The rules are the store's
(``check_endpoint``), the same as ``stint webhook``'s; a refusal writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from stint.api.auth import Reader, Writer
from stint.api.problems import ApiProblem, problem_responses
from stint.api.services import Services, services
from stint.store.vocabulary import DeliveryStatus
from stint.store.webhooks import Delivery, Endpoint, check_endpoint

__all__ = ["router"]

router = APIRouter(prefix="/v1")

Svc = Annotated[Services, Depends(services)]

_READ = problem_responses(401, 404, 422, 503)
_WRITE = problem_responses(400, 401, 403, 404, 413, 415, 422, 503)


class WebhookCreate(BaseModel):
    """An endpoint of the caller's tenant."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: str = Field(min_length=8, max_length=2000, description="the http(s) URL to POST to")
    events: list[str] = Field(
        min_length=1, max_length=64, description="event kinds to deliver (docs/reference/events)"
    )
    description: str | None = Field(None, min_length=1, max_length=200)


class WebhookOut(BaseModel):
    id: UUID
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    failing_since: datetime | None = Field(description="first failure since the last success")
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime

    @classmethod
    def of(cls, row: Endpoint) -> WebhookOut:
        return cls(
            id=row.id,
            url=row.url,
            events=list(row.kinds),
            description=row.description,
            enabled=row.disabled_at is None,
            failing_since=row.failing_since,
            disabled_at=row.disabled_at,
            disabled_reason=row.disabled_reason,
            created_at=row.created_at,
        )


class WebhookCreated(WebhookOut):
    secret: str = Field(description="whsec_…: the signing secret, shown in this answer only")


class WebhookPage(BaseModel):
    webhooks: list[WebhookOut]


class DeliveryOut(BaseModel):
    id: UUID = Field(description="the delivery id: the webhook-id header of every attempt")
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

    @classmethod
    def of(cls, row: Delivery) -> DeliveryOut:
        return cls(
            id=row.id,
            session_id=row.session_id,
            seq=row.seq,
            kind=row.kind,
            status=row.status,
            attempts=row.attempts,
            next_attempt_at=row.next_attempt_at,
            last_attempt_at=row.last_attempt_at,
            last_status_code=row.last_status_code,
            last_error=row.last_error,
            created_at=row.created_at,
            delivered_at=row.delivered_at,
        )


class DeliveryPage(BaseModel):
    deliveries: list[DeliveryOut]


@router.post(
    "/webhooks",
    status_code=201,
    response_model=WebhookCreated,
    responses=problem_responses(400, 401, 403, 413, 415, 422, 503),
    summary="Create a webhook endpoint (its signing secret is in this answer only)",
)
async def create_webhook(body: WebhookCreate, caller: Writer, svc: Svc) -> WebhookCreated:
    new = check_endpoint(
        tenant=caller.tenant, url=body.url, kinds=body.events, description=body.description
    )
    if svc.webhook_key is None:
        raise ApiProblem(503, "webhooks are not set up on this server (no STINT_WEBHOOK_KEY)")
    row, secret = await svc.webhooks.create(new, key=svc.webhook_key)
    return WebhookCreated(**WebhookOut.of(row).model_dump(), secret=secret)


@router.get(
    "/webhooks",
    response_model=WebhookPage,
    responses=problem_responses(401, 422, 503),
    summary="The tenant's webhook endpoints",
)
async def list_webhooks(caller: Reader, svc: Svc) -> WebhookPage:
    rows = await svc.webhooks.list_all(tenant=caller.tenant)
    return WebhookPage(webhooks=[WebhookOut.of(row) for row in rows])


@router.get(
    "/webhooks/{webhook_id}",
    response_model=WebhookOut,
    responses=_READ,
    summary="A webhook endpoint",
)
async def get_webhook(webhook_id: UUID, caller: Reader, svc: Svc) -> WebhookOut:
    return WebhookOut.of(await svc.webhooks.get(endpoint_id=webhook_id, tenant=caller.tenant))


@router.delete(
    "/webhooks/{webhook_id}",
    response_model=WebhookOut,
    responses=_WRITE,
    summary="Delete a webhook endpoint and its delivery log",
)
async def delete_webhook(webhook_id: UUID, caller: Writer, svc: Svc) -> WebhookOut:
    return WebhookOut.of(await svc.webhooks.delete(endpoint_id=webhook_id, tenant=caller.tenant))


@router.post(
    "/webhooks/{webhook_id}/enable",
    response_model=WebhookOut,
    responses=_WRITE,
    summary="Enable an endpoint disabled for failing; its pending deliveries go out",
)
async def enable_webhook(webhook_id: UUID, caller: Writer, svc: Svc) -> WebhookOut:
    return WebhookOut.of(await svc.webhooks.enable(endpoint_id=webhook_id, tenant=caller.tenant))


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response_model=DeliveryPage,
    responses=_READ,
    summary="An endpoint's delivery log, newest first",
)
async def list_deliveries(
    webhook_id: UUID,
    caller: Reader,
    svc: Svc,
    status: Annotated[DeliveryStatus | None, Query(description="only this status")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> DeliveryPage:
    rows = await svc.webhooks.deliveries(
        endpoint_id=webhook_id, tenant=caller.tenant, status=status, limit=limit
    )
    return DeliveryPage(deliveries=[DeliveryOut.of(row) for row in rows])
