"""The client's errors: every refusal the API answers is an ``ApiError`` carrying
its problem+json (RFC 9457: ``type``, ``title``, ``status``, ``detail``), one
class per kind of answer a caller acts on; a transport that never got an answer
is ``Unreachable``. No message or repr holds the API key: errors are built from
the problem body, the method and the path only (never headers or the URL's
query, which is where a careless key would sit).
"""

from __future__ import annotations

from typing import Any

from stint.errors import StintError

__all__ = [
    "ApiError",
    "ClientError",
    "ClientUnavailable",
    "Conflict",
    "EventsPruned",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "ProtocolError",
    "RateLimited",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "error_for",
]


class ClientError(StintError):
    """The Stint client could not do what was asked."""


class ClientUnavailable(ClientError, ImportError):
    """stint.client needs the ``client`` extra: pip install 'stint[client]'."""


class Unreachable(ClientError):
    """The API gave no answer (connection refused, reset, timed out), after every
    retry the call allowed; the cause is the last transport error."""

    def __init__(self, method: str, path: str, reason: str) -> None:
        super().__init__(f"{method} {path}: no answer from the API ({reason})")
        self.method = method
        self.path = path
        self.reason = reason


class ProtocolError(ClientError):
    """The API answered with something this client cannot read (not the documented shape)."""


class ApiError(ClientError):
    """The API refused the request; ``problem`` is its problem+json body as sent."""

    def __init__(
        self,
        *,
        status: int,
        title: str,
        detail: str,
        type: str = "about:blank",
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        where = f" ({method} {path})" if method else ""
        super().__init__(f"{status} {title}: {detail}{where}")
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.method = method
        self.path = path
        self.retry_after = retry_after
        self.problem = (
            problem
            if problem is not None
            else {
                "type": type,
                "title": title,
                "status": status,
                "detail": detail,
            }
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, detail={self.detail!r})"


class InvalidRequest(ApiError):
    """400, 413, 415 or 422: the request was refused as it is; nothing was written."""


class Unauthorized(ApiError):
    """401: no key, or an unknown or revoked one."""


class Forbidden(ApiError):
    """403: a read-only key writing, or a route this key may not use."""


class NotFound(ApiError):
    """404: no such session (or turn) for this key's tenant."""


class Conflict(ApiError):
    """409: an idempotency key reused with another input, or no such open question."""


class EventsPruned(ClientError):
    """The events right after the cursor were removed by retention: following on
    would skip them, so ``follow()`` stops instead. The log now starts at
    ``first_available``; follow again with ``after=first_available - 1`` to go on
    past the gap knowingly."""

    def __init__(self, *, session_id: str, after: int, first_available: int) -> None:
        super().__init__(
            f"session {session_id}: events {after + 1}..{first_available - 1} were pruned "
            f"by retention; its log now starts at {first_available}"
        )
        self.session_id = session_id
        self.after = after
        self.first_available = first_available


class RateLimited(ApiError):
    """429: refused for capacity (an admission limit, or ``busy: reject``); nothing
    was written. ``retry_after`` is the API's hint, in seconds."""


class Unavailable(ApiError):
    """502, 503 or 504: the API or its database could not serve the request now."""


class ServerError(ApiError):
    """500 or another 5xx: the API failed; its detail says nothing more (it was logged)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int) -> type[ApiError]:
    """The class of a refusal with this status."""
    found = _BY_STATUS.get(status)
    if found is not None:
        return found
    return ServerError if status >= 500 else ApiError
