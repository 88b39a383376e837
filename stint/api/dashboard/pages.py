"""The dashboard's pages: server-rendered HTML (Jinja2, autoescaped), one route each.

Operators (keys made with ``--operator``) see the overview, the workers and
every tenant's sessions; a tenant's key sees its own sessions only, as on
/v1. Nothing here counts a large table: the overview reads the elected
sampler's ring, lists are keyset pages, a session's page is bounded by that
session (its tree of child sessions within ``TreeBounds``). Writes (answer,
cancel, signal) go through the same store calls as /v1, scoped the same way,
judged by the same input rules, from forms carrying the key's CSRF token.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote
from uuid import UUID

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from stint.api.dashboard.chart import turns_per_second
from stint.api.dashboard.login import (
    COOKIE,
    COOKIE_PATH,
    LOGIN_COOKIE,
    LoginRequired,
    NotAllowed,
    SignedIn,
    cookie_secure,
    login_allowed,
    login_location,
    new_login_token,
)
from stint.api.events import log_bounds_or_409, stream_response
from stint.api.schemas import MAX_SEQ
from stint.api.services import Services, services
from stint.store.errors import StoreError
from stint.store.input_rules import (
    answer_from_text,
    check_idempotency_key,
    check_signal_name,
    signal_payload_from_text,
)
from stint.store.stats import SAMPLER
from stint.store.vocabulary import ControlAction, EventKind, SessionStatus

__all__ = ["install_dashboard"]

_HERE = Path(__file__).parent
_PAGE = 50
_CHART_SAMPLES = 120
_EVENTS_SHOWN = 100

_env = Environment(
    loader=FileSystemLoader(_HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)

# Scripts and styles only from this origin, no inline script, no framing: an
# injected tag could neither run nor load anything.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer the browser sends "Origin: null"
    # with the dashboard's own forms, and sign-in refuses a foreign or null Origin.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix=COOKIE_PATH, include_in_schema=False)

Svc = Annotated[Services, Depends(services)]


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _when(moment: datetime | None) -> str:
    return moment.isoformat(sep=" ", timespec="seconds") if moment else "—"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_env.filters.update(ago=_ago, when=_when, json=_json)


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _env.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers=_HEADERS)


def _cursor(created_at: datetime, session_id: UUID) -> str:
    raw = f"{created_at.isoformat()}|{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uncursor(cursor: str | None) -> tuple[datetime, UUID] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, _, session_id = raw.partition("|")
        when = datetime.fromisoformat(created_at)
        return (when, UUID(session_id)) if when.tzinfo is not None else None
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _safe_next(path: str | None) -> str:
    """Only a dashboard path of this site: never an open redirect."""
    if path and path.startswith(COOKIE_PATH + "/") and "//" not in path and "\\" not in path:
        return path
    return COOKIE_PATH + "/"


# ---------------------------------------------------------------------- sign in


def _login_form(request: Request, next_path: str, status: int, error: str | None) -> Response:
    """The sign-in page, with a fresh login token in the form and in a cookie."""
    login_token = new_login_token()
    response = _page(
        "login.html", status=status, next=next_path, error=error, me=None, login=login_token
    )
    response.set_cookie(LOGIN_COOKIE, login_token, **_cookie_flags(request))
    return response


def _cookie_flags(request: Request) -> dict[str, Any]:
    return {
        "path": COOKIE_PATH,
        "httponly": True,
        "samesite": "strict",
        "secure": cookie_secure(services(request).settings, request.url.scheme),
    }


@router.get("", include_in_schema=False)
async def dashboard_root() -> Response:
    """/dashboard without its slash: a relative redirect (never one built from Host)."""
    return RedirectResponse(COOKIE_PATH + "/", status_code=303)


@router.get("/login")
async def login_page(request: Request, next: str | None = None) -> Response:
    return _login_form(request, _safe_next(next), 200, None)


@router.post("/login")
async def login(request: Request, svc: Svc) -> Response:
    form = await _form(request)
    target = _safe_next(form.get("next"))
    if not login_allowed(request, form.get("login")):
        return _login_form(
            request, target, 403, "This sign-in did not come from this page: sign in again."
        )
    token = form.get("key", "").strip()
    caller = await svc.keys.keys_verify(token=token) if token else None
    if caller is None:
        return _login_form(
            request, target, 401, "That key is not valid (unknown, revoked or mistyped)."
        )
    session = await svc.dashboard_sessions.sessions_open(
        key_id=caller.key_id, seconds=svc.settings.dashboard_session_seconds
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session, **_cookie_flags(request))
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)
    return response


@router.post("/logout")
async def logout(me: SignedIn, request: Request, svc: Svc) -> Response:
    me.check_csrf((await _form(request)).get("csrf"))
    await svc.dashboard_sessions.sessions_revoke(token=me.token)
    response = RedirectResponse(COOKIE_PATH + "/login", status_code=303)
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


# --------------------------------------------------------------------- operator


async def _overview(svc: Services) -> dict[str, Any]:
    samples = await svc.stats.samples_recent(limit=_CHART_SAMPLES)
    return {
        "sample": samples[0] if samples else None,
        "chart": turns_per_second(samples),
        "leader": await svc.stats.leader_get(name=SAMPLER),
    }


@router.get("/")
async def overview(me: SignedIn, svc: Svc) -> Response:
    if not me.caller.operator:
        return RedirectResponse(COOKIE_PATH + "/sessions", status_code=303)
    return _page("overview.html", me=me, nav="overview", **await _overview(svc))


@router.get("/overview")
async def overview_fragment(me: SignedIn, svc: Svc) -> HTMLResponse:
    me.require_operator()
    return _page("overview_figures.html", me=me, **await _overview(svc))


@router.get("/workers")
async def workers(me: SignedIn, svc: Svc) -> HTMLResponse:
    me.require_operator()
    return _page("workers.html", me=me, nav="workers", workers=await svc.dashboard.workers())


# --------------------------------------------------------------------- sessions


@router.get("/sessions")
async def sessions(
    me: SignedIn,
    svc: Svc,
    status: Annotated[list[str] | None, Query()] = None,
    tenant: str | None = None,
    cursor: str | None = None,
) -> HTMLResponse:
    chosen = [SessionStatus(s) for s in status or [] if s in set(SessionStatus)]
    scope = me.scope if me.scope is not None else (tenant or None)
    rows = await svc.dashboard.sessions_page(
        tenant=scope, statuses=chosen, before=_uncursor(cursor), limit=_PAGE + 1
    )
    page, more = rows[:_PAGE], len(rows) > _PAGE
    query = [("status", str(s)) for s in chosen]
    if me.caller.operator and tenant:
        query.append(("tenant", tenant))
    next_link = None
    if more:
        query.append(("cursor", _cursor(page[-1].created_at, page[-1].id)))
        next_link = "?" + "&".join(f"{k}={quote(v)}" for k, v in query)
    return _page(
        "sessions.html",
        me=me,
        nav="sessions",
        sessions=page,
        statuses=list(SessionStatus),
        chosen={str(s) for s in chosen},
        tenant=scope,
        tenants=await svc.dashboard.tenants() if me.caller.operator else [],
        next_link=next_link,
        first_page=cursor is None,
    )


async def _panels(svc: Services, me: SignedIn, session_id: UUID) -> dict[str, Any] | None:
    session = await svc.client.sessions_get(session_id=session_id, tenant=me.scope)
    if session is None:
        return None
    return {
        "session": session,
        "turns": await svc.dashboard.turns_recent(session_id=session_id, tenant=me.scope),
        "steps": await svc.dashboard.steps_recent(session_id=session_id, tenant=me.scope),
        "questions": await svc.dashboard.questions_open(session_id=session_id, tenant=me.scope),
        "waits": await svc.dashboard.waits_open(session_id=session_id, tenant=me.scope),
        "kept": await svc.dashboard.signals_kept(session_id=session_id, tenant=me.scope),
        "tree": await svc.dashboard.children_tree(session_id=session_id, tenant=me.scope),
    }


def _missing(me: SignedIn, session_id: UUID) -> HTMLResponse:
    return _page("missing.html", status=404, me=me, nav="sessions", session_id=session_id)


@router.get("/sessions/{session_id}")
async def session(
    session_id: UUID, me: SignedIn, svc: Svc, note: str | None = None
) -> HTMLResponse:
    found = await svc.client.sessions_get(session_id=session_id, tenant=me.scope)
    if found is None:
        return _missing(me, session_id)
    last = found.last_event_seq
    events = await svc.client.events_after(
        session_id=session_id,
        after=max(0, last - _EVENTS_SHOWN),
        limit=_EVENTS_SHOWN,
        tenant=me.scope,
    )
    # The panels are read after the events: whatever happened after those events
    # reaches the page by the stream, which refreshes the panels; read before, a
    # turn ending in between would stay shown as running.
    panels = await _panels(svc, me, session_id)
    if panels is None:
        return _missing(me, session_id)
    return _page(
        "session.html",
        me=me,
        nav="sessions",
        note=note,
        events=events,
        stream_after=events[-1].seq if events else max(0, last - _EVENTS_SHOWN),
        kinds=[str(k) for k in EventKind],
        # A fresh key per page: a form sent twice (a reload, a double click) is one signal.
        signal_key=str(uuid.uuid4()),
        **panels,
    )


@router.get("/sessions/{session_id}/panels")
async def session_panels(session_id: UUID, me: SignedIn, svc: Svc) -> HTMLResponse:
    panels = await _panels(svc, me, session_id)
    if panels is None:
        return _missing(me, session_id)
    return _page("session_panels.html", me=me, **panels)


@router.get("/sessions/{session_id}/events")
async def session_events(
    session_id: UUID,
    request: Request,
    me: SignedIn,
    svc: Svc,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
) -> Response:
    """The session's live events: the /v1 SSE stream's own code, behind the cookie.
    A reconnecting EventSource sends Last-Event-ID, and resumes exactly there."""
    if await svc.client.sessions_get(session_id=session_id, tenant=me.scope) is None:
        return _missing(me, session_id)
    resumed = request.headers.get("last-event-id", "")
    start = int(resumed) if resumed.isdigit() and int(resumed) <= MAX_SEQ else after
    bounds = await log_bounds_or_409(svc, me.scope, session_id, start)
    return stream_response(
        svc,
        tenant=me.scope,
        session_id=session_id,
        after=start,
        pruned_through=bounds.pruned_through,
        until_turn_end=False,
    )


def _back(session_id: UUID, note: str) -> RedirectResponse:
    return RedirectResponse(
        f"{COOKIE_PATH}/sessions/{session_id}?note={quote(note)}", status_code=303
    )


@router.post("/sessions/{session_id}/answer")
async def answer(session_id: UUID, request: Request, me: SignedIn, svc: Svc) -> Response:
    form = await _form(request)
    me.check_csrf(form.get("csrf"))
    me.require_writer()
    try:
        # The rules of /v1's answers: size, depth, JSON jsonb stores exactly.
        value = answer_from_text(
            form.get("answer", ""),
            max_bytes=svc.settings.max_input_bytes,
            max_depth=svc.settings.max_input_depth,
        )
        answered = await svc.controls.answer(
            session_id=session_id,
            step_key=form.get("step_key", ""),
            answer=value,
            within_tenant=me.scope,
            actor=me.caller.actor("dashboard"),
        )
    except StoreError as exc:
        return _back(session_id, f"not answered: {exc}")
    return _back(session_id, f"answered; turn {answered.turn_id} resumes")


@router.post("/sessions/{session_id}/cancel")
async def cancel(session_id: UUID, request: Request, me: SignedIn, svc: Svc) -> Response:
    """The session's queued and running turns, or the form's ``turn_id``, cancelled
    (with their cascade children's), as ``POST /v1/sessions/{id}/cancel``."""
    return await _control(session_id, request, me, svc, ControlAction.CANCEL, "cancelled")


@router.post("/sessions/{session_id}/interrupt")
async def interrupt(session_id: UUID, request: Request, me: SignedIn, svc: Svc) -> Response:
    """The running (or parked) turn, or the form's ``turn_id``, interrupted with its
    cascade children's; queued turns go on, as ``POST /v1/sessions/{id}/interrupt``."""
    return await _control(session_id, request, me, svc, ControlAction.INTERRUPT, "interrupted")


async def _control(
    session_id: UUID,
    request: Request,
    me: SignedIn,
    svc: Svc,
    action: ControlAction,
    done: str,
) -> Response:
    """One control from a form: the CSRF token and a writing key first, then the
    same store call as /v1 with the page's tenant scope; a refusal says why."""
    form = await _form(request)
    me.check_csrf(form.get("csrf"))
    me.require_writer()
    try:
        turn_id = UUID(form["turn_id"]) if form.get("turn_id") else None
        result = await svc.controls.control(
            session_id=session_id,
            action=action,
            reason="dashboard",
            turn_id=turn_id,
            within_tenant=me.scope,
            actor=me.caller.actor("dashboard"),
        )
    except (ValueError, StoreError) as exc:
        return _back(session_id, f"not {done}: {exc}")
    return _back(session_id, f"{action}: {result.outcome}")


@router.post("/sessions/{session_id}/signal")
async def signal(session_id: UUID, request: Request, me: SignedIn, svc: Svc) -> Response:
    """``POST /v1/sessions/{id}/signals/{name}`` from a form: the same name, key and
    payload rules, the same store call; a refusal writes nothing and says why."""
    form = await _form(request)
    me.check_csrf(form.get("csrf"))
    me.require_writer()
    name = form.get("name", "")
    try:
        check_signal_name(name, "the signal's name")
        key = form.get("idempotency_key")
        payload = signal_payload_from_text(
            form.get("payload", ""),
            max_bytes=svc.settings.max_input_bytes,
            max_depth=svc.settings.max_input_depth,
        )
        sent = await svc.controls.signal(
            session_id=session_id,
            name=name,
            idempotency_key=str(uuid.uuid4()) if key is None else check_idempotency_key(key),
            payload=payload,
            within_tenant=me.scope,
            actor=me.caller.actor("dashboard"),
        )
    except StoreError as exc:
        return _back(session_id, f"signal not sent: {exc}")
    if not sent.created:
        return _back(session_id, f"signal {name} was sent already (the same idempotency key)")
    return _back(session_id, f"signal {name} sent: kept until a wait on {name} takes it")


def install_dashboard(app: FastAPI) -> None:
    """Mount the pages, the static files, and the two refusals' pages."""

    async def on_login_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LoginRequired)
        return RedirectResponse(login_location(exc.next_path), status_code=303)

    async def on_not_allowed(request: Request, exc: Exception) -> Response:
        return _page("forbidden.html", status=403, me=None, reason=str(exc))

    app.include_router(router)
    app.mount(
        COOKIE_PATH + "/static", StaticFiles(directory=_HERE / "static"), name="dashboard-static"
    )
    app.add_exception_handler(LoginRequired, on_login_required)
    app.add_exception_handler(NotAllowed, on_not_allowed)
