"""/v1 routes for sessions, their turns, controls, answers, and the tenant's status.

Every handler passes the caller's tenant to the store, so another tenant's
session is not found (404) by reads and writes alike, and nothing is written.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Response

from stint.api.auth import Reader, Writer
from stint.api.problems import ApiProblem, problem_responses
from stint.api.schemas import (
    MAX_SEQ,
    AnswerCreate,
    AnswerOut,
    ControlCreate,
    ControlOut,
    SessionCreate,
    SessionOut,
    SessionPage,
    StatusOut,
    TurnCreate,
    TurnOut,
    TurnPage,
    TurnQueued,
)
from stint.api.services import Services, services
from stint.store.input_rules import IDEMPOTENCY_KEY_PATTERN, InputTooLarge, check_value_size
from stint.store.keys import Caller
from stint.store.vocabulary import ControlAction, SessionStatus
from stint.telemetry.names import SPAN_ENQUEUE
from stint.telemetry.tracing import current_traceparent, span

__all__ = ["router", "session_or_404", "within_input_limit"]

router = APIRouter(prefix="/v1")

Svc = Annotated[Services, Depends(services)]

_READ = problem_responses(401, 422, 503)
_SESSION_READ = problem_responses(401, 404, 422, 503)
_SESSION_WRITE = problem_responses(400, 401, 403, 404, 413, 415, 422, 503)


async def session_or_404(svc: Services, caller: Caller, session_id: UUID) -> SessionOut:
    row = await svc.client.sessions_get(session_id=session_id, tenant=caller.tenant)
    if row is None:
        raise ApiProblem(404, f"no session {session_id}")
    return SessionOut.of(row)


def _encode_cursor(session: SessionOut) -> str:
    raw = f"{session.created_at.isoformat()}|{session.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, _, session_id = raw.partition("|")
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None:
            raise ValueError("naive timestamp")
        return when, UUID(session_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiProblem(400, "cursor is not one this API gave out") from None


def within_input_limit(svc: Services, value: Any, what: str) -> None:
    try:
        check_value_size(value, max_bytes=svc.settings.max_input_bytes, what=what)
    except InputTooLarge as exc:
        raise ApiProblem(413, str(exc)) from None


@router.post(
    "/sessions",
    status_code=201,
    response_model=SessionOut,
    responses=problem_responses(400, 401, 403, 413, 415, 422, 429, 503),
    summary="Create a session",
)
async def create_session(caller: Writer, svc: Svc, body: SessionCreate | None = None) -> SessionOut:
    session_id = await svc.client.sessions_create(
        tenant=caller.tenant, pin=body.pin if body else None
    )
    return await session_or_404(svc, caller, session_id)


@router.get(
    "/sessions",
    response_model=SessionPage,
    responses=problem_responses(400, 401, 422, 503),
    summary="List the tenant's sessions, newest first",
)
async def list_sessions(
    caller: Reader,
    svc: Svc,
    status: Annotated[
        list[SessionStatus] | None, Query(description="only these statuses (repeatable)")
    ] = None,
    pin: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None, Query(min_length=1, max_length=200, description="next_cursor of a page")
    ] = None,
) -> SessionPage:
    rows = await svc.client.sessions_list(
        tenant=caller.tenant,
        statuses=status,
        pin=pin,
        before=_decode_cursor(cursor) if cursor else None,
        limit=limit + 1,
    )
    page = [SessionOut.of(row) for row in rows[:limit]]
    more = len(rows) > limit
    return SessionPage(sessions=page, next_cursor=_encode_cursor(page[-1]) if more else None)


@router.get(
    "/sessions/{session_id}",
    response_model=SessionOut,
    responses=_SESSION_READ,
    summary="A session's state",
)
async def get_session(session_id: UUID, caller: Reader, svc: Svc) -> SessionOut:
    return await session_or_404(svc, caller, session_id)


@router.post(
    "/sessions/{session_id}/turns",
    status_code=201,
    response_model=TurnQueued,
    responses={
        200: {
            "description": "An earlier request with this Idempotency-Key queued this turn",
            "model": TurnQueued,
        },
        **problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
    },
    summary="Queue a turn",
)
async def enqueue_turn(
    session_id: UUID,
    body: TurnCreate,
    caller: Writer,
    svc: Svc,
    response: Response,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            pattern=IDEMPOTENCY_KEY_PATTERN,
            description="a retry with the same key returns the same turn (default: a new key)",
        ),
    ] = None,
    traceparent: Annotated[
        str | None,
        Header(
            description="W3C trace context: the worker's spans for this turn join that trace "
            "(an invalid value is ignored, as the W3C spec asks)",
        ),
    ] = None,
) -> TurnQueued:
    within_input_limit(svc, body.input, "input")
    with span(SPAN_ENQUEUE, parent=traceparent, session_id=str(session_id)):
        result = await svc.client.turns_enqueue(
            session_id=session_id,
            idempotency_key=idempotency_key or str(uuid.uuid4()),
            turn_input=body.input,
            timeout_seconds=body.timeout_seconds,
            busy=body.busy,
            within_tenant=caller.tenant,
            traceparent=current_traceparent(),
        )
    if not result.created:
        response.status_code = 200
    return TurnQueued.of(result)


@router.get(
    "/sessions/{session_id}/turns",
    response_model=TurnPage,
    responses=_SESSION_READ,
    summary="A session's turns in order, with outputs and errors",
)
async def list_turns(
    session_id: UUID,
    caller: Reader,
    svc: Svc,
    after_seq: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> TurnPage:
    await session_or_404(svc, caller, session_id)
    rows = await svc.client.turns_list(
        session_id=session_id, after_seq=after_seq, limit=limit + 1, tenant=caller.tenant
    )
    turns = [TurnOut.of(row) for row in rows[:limit]]
    more = len(rows) > limit
    return TurnPage(turns=turns, next_after_seq=turns[-1].seq if more else None)


@router.get(
    "/sessions/{session_id}/turns/{turn_id}",
    response_model=TurnOut,
    responses=_SESSION_READ,
    summary="One turn's state, output and error",
)
async def get_turn(session_id: UUID, turn_id: UUID, caller: Reader, svc: Svc) -> TurnOut:
    row = await svc.client.turns_get(session_id=session_id, turn_id=turn_id, tenant=caller.tenant)
    if row is None:
        raise ApiProblem(404, f"no turn {turn_id} in session {session_id}")
    return TurnOut.of(row)


async def _settled(
    svc: Services, caller: Caller, session_id: UUID, turn_id: UUID, seconds: float
) -> tuple[bool, TurnOut | None]:
    """Wait until the turn is finished or ``seconds`` pass; woken by the session's
    events through the hub, re-reading the turn each time (the row is the truth)."""
    deadline = asyncio.get_running_loop().time() + seconds
    with svc.hub.subscribe(session_id) as sub:
        while True:
            sub.clear()
            row = await svc.client.turns_get(
                session_id=session_id, turn_id=turn_id, tenant=caller.tenant
            )
            if row is None:
                return False, None
            if row.status.terminal:
                return True, TurnOut.of(row)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0 or sub.closed:
                return False, TurnOut.of(row)
            await sub.wait(min(remaining, svc.settings.api_keepalive_seconds))


async def _control(
    svc: Services,
    caller: Caller,
    session_id: UUID,
    action: ControlAction,
    body: ControlCreate | None,
    wait: bool,
    wait_seconds: float,
) -> ControlOut:
    body = body or ControlCreate.model_validate({})
    result = await svc.controls.control(
        session_id=session_id,
        action=action,
        reason=body.reason,
        turn_id=body.turn_id,
        within_tenant=caller.tenant,
        actor=caller.actor("api"),
    )
    if not wait or result.active_turn is None:
        return ControlOut.of(result)
    settled, turn = await _settled(svc, caller, session_id, result.active_turn, wait_seconds)
    return ControlOut.of(result, settled=settled, turn=turn)


_WAIT = Query(description="answer only once the active turn has ended (or wait_seconds passed)")
_WAIT_SECONDS = Query(gt=0, le=300, description="how long wait=true waits at most")
_CONTROL_RESPONSES = problem_responses(400, 401, 403, 404, 413, 415, 422, 503)


@router.post(
    "/sessions/{session_id}/cancel",
    response_model=ControlOut,
    responses=_CONTROL_RESPONSES,
    summary="Cancel the queued turns (or one) and the running turn, and its cascade children's",
)
async def cancel(
    session_id: UUID,
    caller: Writer,
    svc: Svc,
    body: ControlCreate | None = None,
    wait: Annotated[bool, _WAIT] = False,
    wait_seconds: Annotated[float, _WAIT_SECONDS] = 30.0,
) -> ControlOut:
    return await _control(svc, caller, session_id, ControlAction.CANCEL, body, wait, wait_seconds)


@router.post(
    "/sessions/{session_id}/interrupt",
    response_model=ControlOut,
    responses=_CONTROL_RESPONSES,
    summary="Interrupt the running turn and its cascade children's turns; queued turns go on",
)
async def interrupt(
    session_id: UUID,
    caller: Writer,
    svc: Svc,
    body: ControlCreate | None = None,
    wait: Annotated[bool, _WAIT] = False,
    wait_seconds: Annotated[float, _WAIT_SECONDS] = 30.0,
) -> ControlOut:
    return await _control(
        svc, caller, session_id, ControlAction.INTERRUPT, body, wait, wait_seconds
    )


@router.post(
    "/sessions/{session_id}/answers",
    response_model=AnswerOut,
    responses=problem_responses(400, 401, 403, 404, 409, 413, 415, 422, 503),
    summary="Answer a parked turn's question; the turn resumes",
)
async def answer(session_id: UUID, body: AnswerCreate, caller: Writer, svc: Svc) -> AnswerOut:
    within_input_limit(svc, body.answer, "answer")
    answered = await svc.controls.answer(
        session_id=session_id,
        step_key=body.step_key,
        answer=body.answer,
        within_tenant=caller.tenant,
        actor=caller.actor("api"),
    )
    return AnswerOut(session_id=session_id, turn_id=answered.turn_id, resumed=True)


@router.get(
    "/status",
    response_model=StatusOut,
    responses=_READ,
    summary="The tenant's sessions by status and queue; the fleet's live capacity",
)
async def status(caller: Reader, svc: Svc) -> StatusOut:
    return StatusOut.of(caller.tenant, await svc.client.tenant_status(tenant=caller.tenant))
