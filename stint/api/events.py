"""GET /v1/sessions/{id}/events: the session's event log, as a resumable
Server-Sent Events stream or as JSON pages.

The stream replays from PostgreSQL after ``Last-Event-ID`` (or ``?after=``),
then tails; each event's SSE ``id`` is its seq, so a reconnecting client
resumes exactly where it stopped. ``?until=turn_end`` ends the stream after
the next terminal event. ``?format=json`` (or ``Accept: application/json``)
gives one page of ``limit`` events after ``after`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from stint.api.auth import Reader
from stint.api.problems import ApiProblem, problem_responses
from stint.api.schemas import MAX_SEQ, EventOut, EventPage
from stint.api.services import Services, services
from stint.api.sessions import session_or_404
from stint.api.stream import KEEPALIVE, follow, sse_event
from stint.store.errors import StoreError

__all__ = ["router", "stream_response"]

log = logging.getLogger("stint.api")

router = APIRouter(prefix="/v1")

_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_RETRY = b"retry: 1000\n\n"


def _wants_json(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "json"
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/event-stream" not in accept


def stream_response(
    svc: Services, *, tenant: str | None, session_id: UUID, after: int, until_turn_end: bool
) -> StreamingResponse:
    """The session's events after ``after`` as Server-Sent Events, then live: the
    /v1 route's stream, and the dashboard's (which passes None as an operator's
    tenant). 503 when this process already follows as many streams as it may."""
    if svc.hub.followers >= svc.settings.api_max_followers:
        raise ApiProblem(503, "this API process follows as many streams as it may", retry=True)
    return StreamingResponse(
        _sse(svc, tenant, session_id, after, until_turn_end),
        media_type="text/event-stream",
        headers=_STREAM_HEADERS,
    )


async def _sse(
    svc: Services, tenant: str | None, session_id: UUID, after: int, until_turn_end: bool
) -> AsyncIterator[bytes]:
    yield _RETRY
    try:
        async for item in follow(
            svc.follow_client,
            svc.hub,
            tenant=tenant,
            session_id=session_id,
            after=after,
            until_turn_end=until_turn_end,
            keepalive_seconds=svc.settings.api_keepalive_seconds,
        ):
            yield KEEPALIVE if item is None else sse_event(item)
    except StoreError as exc:
        # The response has started: end the stream; the client resumes by Last-Event-ID.
        log.warning("event stream of session %s ended early: %s", session_id, exc)


@router.get(
    "/sessions/{session_id}/events",
    response_model=EventPage,
    responses={
        200: {
            "description": "text/event-stream (id: seq, event: kind, data: the event as JSON; "
            "keepalive comments while idle), or one JSON page",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 404, 422, 503),
    },
    summary="Follow the session's events (SSE), or read a page of them (JSON)",
)
async def events(
    request: Request,
    session_id: UUID,
    caller: Reader,
    svc: Annotated[Services, Depends(services)],
    after: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="start after this seq (Last-Event-ID wins)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="JSON form: events per page")] = 100,
    until: Annotated[
        Literal["turn_end"] | None, Query(description="end the stream after a terminal event")
    ] = None,
    format: Annotated[
        Literal["sse", "json"] | None,
        Query(description="default: SSE, or JSON when Accept asks for application/json"),
    ] = None,
    last_event_id: Annotated[
        int | None,
        Header(alias="Last-Event-ID", ge=0, le=MAX_SEQ, description="resume after this seq"),
    ] = None,
) -> Response:
    await session_or_404(svc, caller, session_id)
    start = last_event_id if last_event_id is not None else after
    if _wants_json(request, format):
        found = await svc.client.events_after(
            session_id=session_id, after=start, limit=limit, tenant=caller.tenant
        )
        page = EventPage(
            events=[EventOut.of(e) for e in found],
            next_after=found[-1].seq if found else start,
        )
        return JSONResponse(page.model_dump(mode="json"))
    return stream_response(
        svc,
        tenant=caller.tenant,
        session_id=session_id,
        after=start,
        until_turn_end=until == "turn_end",
    )
