"""Every refusal the API gives is an ``application/problem+json`` body (RFC 9457)
with one clear line in ``detail``; this module is the one place that decides
which status a failure gets, including the store's typed errors.

Messages come from the store's error tree, whose messages never carry a
database URL or a password; anything unexpected becomes a generic 500 whose
detail says nothing, and the full error goes to the log only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from stint.store.errors import (
    AdmissionRefused,
    ConnectionFailed,
    Deadlocked,
    IdempotencyConflict,
    InvalidInput,
    LockTimeout,
    NameTaken,
    NoOpenQuestion,
    QueryTimeout,
    SessionBusy,
    StoreError,
    UnknownSchedule,
    UnknownSession,
    UnknownWebhook,
)

__all__ = [
    "PROBLEM_JSON",
    "ApiProblem",
    "Problem",
    "install_problem_handlers",
    "problem_response",
    "problem_responses",
]

log = logging.getLogger("stint.api")

PROBLEM_JSON = "application/problem+json"

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

# The store's refusals, most specific first: (error, status, ask the client to retry).
# Capacity refusals (an admission limit, a full session queue, busy) are 429
# with Retry-After: a fixed hint (STINT_API_RETRY_AFTER_SECONDS), because what
# frees capacity is other turns finishing, which the API cannot foresee.
_STORE_ERRORS: list[tuple[type[StoreError], int, bool]] = [
    (UnknownSession, 404, False),
    (UnknownSchedule, 404, False),
    (UnknownWebhook, 404, False),
    (NameTaken, 409, False),
    (IdempotencyConflict, 409, False),
    (NoOpenQuestion, 409, False),
    (InvalidInput, 422, False),
    (AdmissionRefused, 429, True),
    (SessionBusy, 429, True),
    (ConnectionFailed, 503, True),
    (QueryTimeout, 503, True),
    (LockTimeout, 503, True),
    (Deadlocked, 503, True),
]


class Problem(BaseModel):
    """An RFC 9457 problem: ``detail`` is the one line that says what was wrong."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


class ApiProblem(Exception):
    """Raised by handlers to refuse a request with a problem body."""

    def __init__(self, status: int, detail: str, *, retry: bool = False) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry = retry


def problem_response(
    status: int,
    detail: str,
    *,
    retry_after: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = Problem(title=_TITLES.get(status, "Error"), status=status, detail=detail)
    extra = dict(headers or {})
    if retry_after is not None:
        extra["Retry-After"] = str(retry_after)
    if status == 401:
        extra["WWW-Authenticate"] = "Bearer"
    return JSONResponse(
        body.model_dump(), status_code=status, media_type=PROBLEM_JSON, headers=extra
    )


def store_error_status(exc: StoreError) -> tuple[int, bool]:
    """The status (and whether to send Retry-After) for a store error."""
    for error, status, retry in _STORE_ERRORS:
        if isinstance(exc, error):
            return status, retry
    return 500, False


def _validation_line(exc: RequestValidationError) -> str:
    errors = list(exc.errors())
    if not errors:
        return "the request is invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    line = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more)"
    return line


def install_problem_handlers(app: FastAPI, *, retry_after: int) -> None:
    """Turn every refusal, ours or the framework's, into a problem body."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiProblem)
        return problem_response(
            exc.status, exc.detail, retry_after=retry_after if exc.retry else None
        )

    async def on_store_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StoreError)
        status, retry = store_error_status(exc)
        if status == 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
            return problem_response(500, "internal error; it was logged")
        return problem_response(status, str(exc), retry_after=retry_after if retry else None)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(422, _validation_line(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "")
        return problem_response(exc.status_code, detail, headers=exc.headers)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return problem_response(500, "internal error; it was logged")

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again (a fixed hint)",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for these refusals, each a Problem as problem+json; the
    ones that ask the client to retry (429, 503) document ``Retry-After``."""
    return {
        status: {
            "description": _TITLES.get(status, "Error"),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            **({"headers": _RETRY_AFTER} if status in (429, 503) else {}),
        }
        for status in statuses
    }
