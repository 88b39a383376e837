"""/v1 routes of durable waits: send a signal, list a session's child sessions.

A signal is kept for the session where a turn's ``ctx.wait_for`` finds it: one
sent before any wait is kept, and the first wait on its name consumes it; each
is consumed by exactly one wait (docs/design.md, "Durable waits"). A session's
children are those its turns spawned (``ctx.spawn``); its parent is on the
session itself (``parent_id``).
The name and payload follow the input rules every door shares
(``stint.store.input_rules``); a retry with the same Idempotency-Key returns
the same signal, one with another name or payload is a 409.
"""

from __future__ import annotations

import uuid
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Response

from stint.api.auth import Reader, Writer
from stint.api.problems import problem_responses
from stint.api.schemas import ChildOut, ChildPage, SignalCreate, SignalOut
from stint.api.services import Services, services
from stint.api.sessions import session_or_404, within_input_limit
from stint.store.input_rules import IDEMPOTENCY_KEY_PATTERN, SIGNAL_NAME_PATTERN

__all__ = ["router"]

router = APIRouter(prefix="/v1")

Svc = Annotated[Services, Depends(services)]


@router.post(
    "/sessions/{session_id}/signals/{name}",
    status_code=201,
    response_model=SignalOut,
    responses={
        200: {"description": "An earlier request with this Idempotency-Key kept this signal"},
        **problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 503),
    },
    summary="Send a signal: kept until a wait on its name consumes it",
)
async def send_signal(
    session_id: UUID,
    name: Annotated[str, Path(pattern=SIGNAL_NAME_PATTERN, description="the signal's name")],
    caller: Writer,
    svc: Svc,
    response: Response,
    body: SignalCreate | None = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="a retry with the same key returns the same signal (default: a new key)",
        ),
    ] = None,
) -> SignalOut:
    payload = None if body is None else body.payload
    within_input_limit(svc, payload, "payload")
    sent = await svc.controls.signal(
        session_id=session_id,
        name=name,
        idempotency_key=idempotency_key or str(uuid.uuid4()),
        payload=payload,
        within_tenant=caller.tenant,
        actor=caller.actor("api"),
    )
    if not sent.created:
        response.status_code = 200
    return SignalOut(
        session_id=session_id, signal_id=sent.signal_id, name=sent.name, created=sent.created
    )


@router.get(
    "/sessions/{session_id}/children",
    response_model=ChildPage,
    responses=problem_responses(401, 404, 422, 503),
    summary="The child sessions this session's turns spawned, oldest first",
)
async def list_children(session_id: UUID, caller: Reader, svc: Svc) -> ChildPage:
    await session_or_404(svc, caller, session_id)
    rows = await svc.children.children_list(session_id=session_id, tenant=caller.tenant)
    return ChildPage(children=[ChildOut.of(row) for row in rows])
