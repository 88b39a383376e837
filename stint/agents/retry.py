"""When to retry a provider call and how long to wait first (pure: no I/O).

429, 408, 409 and 5xx answers and dropped connections are retried; other 4xx
answers are the caller's fault and are not. The wait honours the provider's
``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) when it sends
one, else grows exponentially with jitter; either way it is capped, so one
retry can never outlast the step's budget by itself.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RetryPolicy", "is_retryable_status", "retry_after_seconds"]

_RETRYABLE = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    return status in _RETRYABLE or status >= 500


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The provider's requested wait, or None when it asked for none (or nonsense)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = lowered.get(name)
        if raw is None:
            continue
        value: float | None
        try:
            value = float(raw) * scale
        except ValueError:
            value = _http_date_wait(raw, now) if name == "retry-after" else None
        if value is not None and value >= 0 and value == value:  # not NaN
            return value
    return None


def _http_date_wait(raw: str, now: float | None) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` tries in all; waits start at ``first`` and double up to ``cap``."""

    max_attempts: int = 6
    first: float = 0.5
    cap: float = 60.0

    def delay(self, retry: int, requested: float | None) -> float:
        """The wait before retry number ``retry`` (1 = the first retry)."""
        if requested is not None:
            return min(requested, self.cap)
        backoff = min(self.cap, self.first * 2.0 ** (retry - 1))
        return backoff * random.uniform(0.5, 1.0)
