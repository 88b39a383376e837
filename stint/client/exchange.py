"""One call to the API, without the I/O: what to send, whether a failure may be
tried again (see ``retry``), and how an answer becomes a model or a typed
error. The sync and async clients each drive a ``Call`` with their own HTTP
client, so both retry and read answers by the same rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from stint.client.errors import ApiError, ProtocolError, Unreachable, error_for
from stint.client.retry import Backoff, RetryPolicy, retry_after_seconds

__all__ = ["Attempts", "Call", "describe", "refusal"]

T = TypeVar("T", bound=BaseModel)

# Failures in which the request was never sent: any call may be tried again.
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_UNAVAILABLE = frozenset({502, 503, 504})
_DETAIL_CHARS = 300


@dataclass(frozen=True)
class Call(Generic[T]):
    """A request and what its answer is read as. ``replay_safe``: sending it again
    after it may have reached the API does no harm (a read, a keyed request, an
    answer); ``retry_refused``: a 429 is tried again after its Retry-After."""

    method: str
    path: str
    result: type[T]
    params: list[tuple[str, str]] = field(default_factory=list)
    body: BaseModel | None = None
    headers: dict[str, str] = field(default_factory=dict)
    replay_safe: bool = False
    retry_refused: bool = True

    def request(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client.request``."""
        args: dict[str, Any] = {
            "method": self.method,
            "url": self.path,
            "params": self.params,
            "headers": self.headers,
        }
        if self.body is not None:
            args["json"] = self.body.model_dump(mode="json", exclude_none=True)
        return args

    def read(self, response: httpx.Response) -> T:
        """The answer as the route's model; a shape this client cannot read is a
        ``ProtocolError`` naming the call."""
        try:
            return self.result.model_validate_json(response.content)
        except ValidationError as exc:
            raise ProtocolError(
                f"{self.method} {self.path}: the answer is not a {self.result.__name__}: "
                f"{exc.error_count()} error(s), first: {exc.errors()[0]['msg']}"
            ) from None

    def attempts(self, policy: RetryPolicy) -> Attempts:
        return Attempts(self, policy)


class Attempts:
    """The tries of one call: each failure either gives the seconds to wait before
    the next try or raises the error the caller gets."""

    def __init__(self, call: Call[Any], policy: RetryPolicy) -> None:
        self._call = call
        self._policy = policy
        self._tries = 1
        self._backoff = Backoff(first=policy.first, cap=policy.cap)

    def after_transport_error(self, exc: httpx.TransportError) -> float:
        call = self._call
        may_retry = call.replay_safe or isinstance(exc, _NEVER_SENT)
        if not may_retry or self._tries >= self._policy.attempts:
            raise Unreachable(call.method, call.path, describe(exc)) from exc
        self._tries += 1
        return self._backoff.next_delay()

    def after_answer(self, response: httpx.Response) -> float | None:
        """None for a success (read it); else the wait before trying again."""
        if response.status_code < 400:
            return None
        call = self._call
        error = refusal(response, call.method, call.path)
        retryable = (response.status_code == 429 and call.retry_refused) or (
            response.status_code in _UNAVAILABLE and call.replay_safe
        )
        hint = error.retry_after
        if (
            not retryable
            or self._tries >= self._policy.attempts
            or (hint is not None and hint > self._policy.max_retry_after)
        ):
            raise error
        self._tries += 1
        return self._backoff.next_delay(at_least=hint)


def refusal(response: httpx.Response, method: str, path: str) -> ApiError:
    """The typed error for a refusal, from its problem+json body when it has one
    (a proxy's HTML page becomes a problem of its status and first line)."""
    status = response.status_code
    problem: dict[str, Any] | None = None
    try:
        parsed = json.loads(response.content)
        if isinstance(parsed, dict):
            problem = parsed
    except ValueError:
        pass
    text = response.text.strip().splitlines()[0][:_DETAIL_CHARS] if response.text.strip() else ""
    if problem is None:
        problem = {"title": response.reason_phrase, "status": status, "detail": text}
    cls = error_for(status)
    return cls(
        status=status,
        title=str(problem.get("title") or response.reason_phrase),
        detail=str(problem.get("detail") or ""),
        type=str(problem.get("type") or "about:blank"),
        method=method,
        path=path,
        retry_after=retry_after_seconds(response.headers.get("retry-after")),
        problem=problem,
    )


def describe(exc: httpx.TransportError) -> str:
    """A transport failure in one line (its class, and its message when it has one)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
