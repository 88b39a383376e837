"""/v1/turns/batch: many turns, of any of the caller's sessions, in one request.

All or nothing: the turns are queued in one transaction
(``ClientStore.turns_enqueue_many``), each with its own idempotency key and
checked by the same rules and admission limits as ``POST
/v1/sessions/{id}/turns``; the first refusal writes nothing at all and answers
as that single enqueue would (404, 409, 429 ...), its detail naming the turn
(``item=<index>``). A retry of the whole request with the same keys returns the
same turns (``created`` false). Per-item results were the other choice; one
answer for the whole batch keeps a producer's retry simple: send it again.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response

from stint.api.auth import Writer
from stint.api.problems import problem_responses
from stint.api.schemas import TurnBatchCreate, TurnBatchQueued, TurnQueued
from stint.api.services import Services, services
from stint.api.sessions import within_input_limit
from stint.store.client import EnqueueItem
from stint.telemetry.names import SPAN_ENQUEUE
from stint.telemetry.tracing import current_traceparent, span

__all__ = ["router"]

router = APIRouter(prefix="/v1")

Svc = Annotated[Services, Depends(services)]


@router.post(
    "/turns/batch",
    status_code=201,
    response_model=TurnBatchQueued,
    responses={
        200: {
            "description": "Every turn was queued before (a retry with the same keys)",
            "model": TurnBatchQueued,
        },
        **problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
    },
    summary="Queue many turns at once, all or none",
)
async def enqueue_batch(
    body: TurnBatchCreate,
    caller: Writer,
    svc: Svc,
    response: Response,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context: the worker's spans for these turns join that trace "
            "(an invalid value is ignored, as the W3C spec asks)",
        ),
    ] = None,
) -> TurnBatchQueued:
    for index, turn in enumerate(body.turns):
        within_input_limit(svc, turn.input, f"turns[{index}].input")
    with span(SPAN_ENQUEUE, parent=traceparent, turns=len(body.turns)):
        trace = current_traceparent()
        items = [
            EnqueueItem(
                idempotency_key=turn.idempotency_key or str(uuid.uuid4()),
                turn_input=turn.input,
                session_id=turn.session_id,
                timeout_seconds=turn.timeout_seconds,
                busy=turn.busy,
                within_tenant=caller.tenant,
                traceparent=trace,
            )
            for turn in body.turns
        ]
        results = await svc.client.turns_enqueue_many(items)
    if not any(result.created for result in results):
        response.status_code = 200
    return TurnBatchQueued(turns=[TurnQueued.of(result) for result in results])
