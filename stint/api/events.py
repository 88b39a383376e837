"""GET /v1/sessions/{id}/events: the session's event log, as a resumable
Server-Sent Events stream or as JSON pages.

The stream replays from PostgreSQL after ``Last-Event-ID`` (or ``?after=``),
then tails; each event's SSE ``id`` is its seq, so a reconnecting client
resumes exactly where it stopped. ``?until=turn_end`` ends the stream after
the next terminal event. ``?format=json`` (or ``Accept: application/json``)
gives one page of ``limit`` events after ``after`` instead.

Resume at the edges (issue 22): a resume from a seq retention already removed
is told so, never silently moved on: the stream's first event is ``pruned``
(``{"after", "pruned_through", "next_seq"}``), the JSON page's
``pruned_through`` is set. A resume from beyond the session's last event is
refused with 409 naming the last seq: no client can have seen it, so waiting
for it would wait for another session's events, or for nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response

from stint.api.auth import Reader
from stint.api.budget import Holder
from stint.api.problems import ApiProblem, problem_responses
from stint.api.schemas import MAX_SEQ, EventOut, EventPage
from stint.api.services import Services, services
from stint.api.sessions import session_or_404
from stint.api.sse_response import EventStreamResponse
from stint.api.stream import RETRY, Drain, follow
from stint.store.models import LogBounds

__all__ = ["log_bounds_or_409", "router", "stream_response"]

log = logging.getLogger("stint.api")

router = APIRouter(prefix="/v1")

_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _wants_json(request: Request, fmt: str | None) -> bool:
    if fmt is not None:
        return fmt == "json"
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/event-stream" not in accept


def stream_response(
    svc: Services,
    *,
    tenant: str | None,
    session_id: UUID,
    after: int,
    pruned_through: int,
    until_turn_end: bool,
) -> EventStreamResponse:
    """The session's events after ``after`` as Server-Sent Events, then live: the
    /v1 route's stream, and the dashboard's (which passes None as an operator's
    tenant). 503 when this process already follows as many streams as it may."""
    if svc.hub.followers >= svc.settings.api_max_followers:
        raise ApiProblem(503, "this API process follows as many streams as it may", retry=True)
    holder = Holder()
    items = follow(
        svc.follow_client,
        svc.hub,
        svc.stream_limits,
        holder,
        tenant=tenant,
        session_id=session_id,
        after=after,
        pruned_through=pruned_through,
        until_turn_end=until_turn_end,
    )
    return EventStreamResponse(
        _with_retry(items),
        holder=holder,
        drain_seconds=svc.settings.api_stream_drain_seconds,
        headers=_STREAM_HEADERS,
        what=f"event stream of session {session_id}",
    )


async def _with_retry(
    items: AsyncGenerator[bytes | Drain, None],
) -> AsyncGenerator[bytes | Drain, None]:
    yield RETRY
    async with contextlib.aclosing(items):
        async for item in items:
            yield item


async def log_bounds_or_409(
    svc: Services, tenant: str | None, session_id: UUID, start: int
) -> LogBounds:
    """Where the session's log starts and ends; 409 when ``start`` lies beyond its
    end (no client can have seen that seq: it is another session's, or made up),
    404 when the session is gone."""
    bounds = await svc.client.events_bounds(session_id=session_id, tenant=tenant)
    if bounds is None:
        raise ApiProblem(404, f"no session {session_id}")
    if start > bounds.last_event_seq:
        raise ApiProblem(
            409,
            f"cannot resume after seq {start}: the session's last event is "
            f"{bounds.last_event_seq} (Last-Event-ID or after must be at most that)",
        )
    return bounds


@router.get(
    "/sessions/{session_id}/events",
    response_model=EventPage,
    responses={
        200: {
            "description": "text/event-stream (id: seq, event: kind, data: the event as JSON; "
            "keepalive comments while idle), or one JSON page",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **problem_responses(401, 404, 409, 422, 503),
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
    bounds = await log_bounds_or_409(svc, caller.tenant, session_id, start)
    if _wants_json(request, format):
        found = await svc.client.events_after(
            session_id=session_id, after=start, limit=limit, tenant=caller.tenant
        )
        page = EventPage(
            events=[EventOut.of(e) for e in found],
            next_after=found[-1].seq if found else max(start, bounds.pruned_through),
            pruned_through=_gap(start, found[0].seq if found else None, bounds.pruned_through),
        )
        return JSONResponse(page.model_dump(mode="json"))
    return stream_response(
        svc,
        tenant=caller.tenant,
        session_id=session_id,
        after=start,
        pruned_through=bounds.pruned_through,
        until_turn_end=until == "turn_end",
    )


def _gap(start: int, first_seq: int | None, pruned_through: int) -> int | None:
    """The last pruned seq when events after ``start`` are missing, else None."""
    if first_seq is not None and first_seq > start + 1:
        return first_seq - 1
    return pruned_through if start < pruned_through else None
