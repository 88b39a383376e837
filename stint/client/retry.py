"""When a call is tried again, and how long it waits first.

A call is retried only when trying it again cannot do twice what it did once:
reads, requests with an idempotency key (a turn, a signal) and answers (the
same answer twice is accepted once) are *replay-safe* and are retried after
any transport failure and after 502, 503 or 504. Any call is retried when the
request certainly never reached the API (the connection was refused or timed
out before it was sent) and after a 429, because a refusal writes nothing —
unless the caller asked to be refused (``busy="reject"``). A ``Retry-After``
is honoured: the wait is at least what it says, and a hint longer than
``max_retry_after`` is handed to the caller as the error instead of waited out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["Backoff", "FollowPolicy", "RetryPolicy", "retry_after_seconds"]


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried: at most ``attempts`` tries in all, the waits growing
    from ``first`` seconds by doubling up to ``cap`` (each drawn at random in its
    upper half, so many clients do not retry in step)."""

    attempts: int = 4
    first: float = 0.2
    cap: float = 5.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.first <= 0 or self.cap < self.first:
            raise ValueError("RetryPolicy needs attempts >= 1 and 0 < first <= cap")


@dataclass(frozen=True)
class FollowPolicy:
    """How ``follow()`` reconnects: waits from ``first`` to ``cap`` seconds, reset
    by every event received; it gives up (``Unreachable``) after ``give_up_after``
    seconds with no event and no stream opened (None: never). ``read_timeout`` must
    exceed the API's keepalive interval (``STINT_API_KEEPALIVE_SECONDS``, 15 s by
    default): a stream silent for longer is taken for dead and reopened; ``timeout``
    bounds connecting and sending."""

    first: float = 0.1
    cap: float = 5.0
    give_up_after: float | None = 600.0
    read_timeout: float = 60.0
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.first <= 0 or self.cap < self.first or self.read_timeout <= 0:
            raise ValueError("FollowPolicy needs 0 < first <= cap and read_timeout > 0")
        if self.give_up_after is not None and self.give_up_after <= 0:
            raise ValueError("FollowPolicy.give_up_after must be positive (or None)")


class Backoff:
    """Capped exponential waits: ``first``, twice that, ... up to ``cap``, each drawn
    uniformly from its upper half; ``reset()`` after progress starts over."""

    def __init__(self, *, first: float, cap: float) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def reset(self) -> None:
        self._next = self._first

    def next_delay(self, *, at_least: float | None = None) -> float:
        delay = self._next * random.uniform(0.5, 1.0)
        self._next = min(self._cap, self._next * 2)
        return max(delay, at_least or 0.0)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks for: a number of seconds or an
    HTTP date (RFC 9110); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        return max(0.0, when.timestamp() - current)
    return seconds if seconds >= 0 and seconds == seconds else None
